"""Data from topics and YAML is never executed: no pickle/eval anywhere, safe YAML with limits,
processor classes only from the configured `module:Class`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stylus.config import PipelineError, load_pipeline, parse_pipeline
from stylus.config.loader import MAX_FILE_BYTES

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["stylus", "processors", "bench"]
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve", "jsonpickle"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
UNSAFE_YAML = {"load_all", "unsafe_load", "unsafe_load_all", "full_load", "full_load_all"}
UNSAFE_LOADERS = {"Loader", "FullLoader", "UnsafeLoader", "CLoader", "CFullLoader", "CUnsafeLoader"}


def _sources() -> list[Path]:
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
            found.append(f"{where} imports from {node.module}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"{where} calls {func.id}()")
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "yaml":
                if func.attr in UNSAFE_YAML:
                    found.append(f"{where} calls yaml.{func.attr}")
                if func.attr in ("load", "compose", "compose_all", "parse"):
                    loader = next((k.value for k in node.keywords if k.arg == "Loader"), None)
                    if not (isinstance(loader, ast.Attribute) and loader.attr in ("SafeLoader", "CSafeLoader")):
                        found.append(f"{where} calls yaml.{func.attr} without Loader=yaml.SafeLoader")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "yaml" \
                and node.attr in UNSAFE_LOADERS:
            found.append(f"{where} uses yaml.{node.attr}")
    return found


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text("import pickle\nimport yaml\nx = eval('1')\nyaml.load('a', Loader=yaml.Loader)\n"
                   "yaml.unsafe_load('a')\nfrom marshal import loads\n")
    found = _violations(bad)
    assert len(found) == 6, found


def test_no_pickle_eval_or_unsafe_yaml_in_the_code() -> None:
    sources = _sources()
    assert len(sources) > 30
    problems = [v for path in sources for v in _violations(path)]
    assert problems == []


def test_rocksdb_is_opened_in_raw_mode_only() -> None:
    """rocksdict's default mode pickles values: every database must be opened with raw_mode=True."""
    for path in _sources():
        text = path.read_text()
        if "Rdict(" in text:
            assert "raw_mode=True" in text, path


def test_yaml_tags_that_build_objects_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = f"""
pipeline: !!python/object/apply:os.system ["touch {marker}"]
topics: {{a: {{}}}}
processors: {{x: {{class: "tests.apps.counting:Passthrough", inputs: [a]}}}}
"""
    with pytest.raises(PipelineError) as err:
        parse_pipeline(text)
    assert "not valid YAML" in str(err.value) and not marker.exists()


def test_a_yaml_bomb_is_refused_quickly() -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    text = "\n".join(lines) + "\npipeline: x\ntopics: {t: {}}\n"
    with pytest.raises(PipelineError) as err:
        parse_pipeline(text)
    assert "after expanding aliases" in str(err.value)


def test_deep_nesting_and_oversized_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PipelineError) as err:
        parse_pipeline("pipeline: " + "[" * 5000 + "]" * 5000)
    assert "fix:" in str(err.value)
    big = tmp_path / "big.yaml"
    big.write_text("pipeline: x\n# " + "x" * MAX_FILE_BYTES + "\n")
    with pytest.raises(PipelineError) as err:
        load_pipeline(big)
    assert "the limit is" in str(err.value)


@pytest.mark.parametrize("path", ["os:system", "subprocess:Popen", "builtins:eval", "stylus.api:Record"])
def test_only_processor_classes_are_accepted(path: str) -> None:
    text = f"""
pipeline: x
topics: {{a: {{}}}}
processors: {{x: {{class: "{path}", inputs: [a]}}}}
"""
    with pytest.raises(PipelineError) as err:
        parse_pipeline(text, import_classes=True)
    assert "processors.x.class" in str(err.value)


def test_class_paths_are_dotted_names_not_code() -> None:
    text = """
pipeline: x
topics: {a: {}}
processors: {x: {class: "__import__('os').system('true'):X", inputs: [a]}}
"""
    with pytest.raises(PipelineError) as err:
        parse_pipeline(text, import_classes=True)
    assert "package.module:ClassName" in str(err.value)
