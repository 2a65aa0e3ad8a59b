"""Load a pipeline file: env expansion, safe YAML, pydantic validation, cross-checks.

Every failure becomes a `PipelineError` whose problems name the file, the dotted path
inside it (with the line when known) and what to write instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import shutil
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from stylus.config.applicability import check_applicability
from stylus.config.env import MissingVariable, expand_env
from stylus.config.errors import PipelineError, Problem
from stylus.config.model import NAME_PATTERN, FixableError, Pipeline, ProcessorSpec

MAX_FILE_BYTES = 1 << 20  # YAML bombs and accidental binaries stop here
MAX_NODES = 100_000  # YAML nodes after alias expansion: a "billion laughs" file is small but expands
MAX_DEPTH = 100  # nesting levels; real pipelines use < 10
_YAML_FAILURES = (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError)


def load_pipeline(
    path: str | Path, *, import_classes: bool = False, environ: Mapping[str, str] | None = None
) -> Pipeline:
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PipelineError(file, [Problem("", f"cannot read the file: {exc.strerror}", "check the path")]) from exc
    if len(raw) > MAX_FILE_BYTES:
        raise PipelineError(
            file, [Problem("", f"the file is {len(raw)} bytes; the limit is {MAX_FILE_BYTES}", "split it up")]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PipelineError(file, [Problem("", "the file is not UTF-8 text", "save it as UTF-8")]) from exc
    return parse_pipeline(text, file=file, import_classes=import_classes, environ=environ)


def parse_pipeline(
    text: str,
    *,
    file: str = "<string>",
    import_classes: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Pipeline:
    try:
        text = expand_env(text, environ)
    except MissingVariable as exc:
        raise PipelineError(
            file,
            [Problem("", str(exc), f"export {exc.name}=... or write ${{{exc.name}:-default}}", exc.line)],
        ) from exc
    data, lines = _parse_yaml(text, file)
    try:
        pipeline = Pipeline.model_validate({**data, "source": file} if isinstance(data, dict) else data)
    except ValidationError as exc:
        raise PipelineError(file, [_problem_from(err, lines) for err in exc.errors()]) from exc
    if any(spec.sql is not None for spec in pipeline.processors.values()):
        from stylus.sql.expand import expand_sql  # a `sql:` app -> its processors, read relative to `file`

        pipeline, sql_problems = expand_sql(pipeline)
        if sql_problems:
            raise PipelineError(file, [_with_line(p, lines) for p in sql_problems])
    try:
        problems = check_references(pipeline)
    except RecursionError as exc:  # a chain of processors longer than Python's recursion limit
        raise PipelineError(file, [Problem("processors", "the processors form too long a chain to check",
                                           "split the pipeline into several files")]) from exc
    from stylus.config.profiles import apply_profile_defaults  # STYLUS_PROFILE fills unset state dir/backup

    if not problems:  # settings that would be accepted and then do nothing (stylus/config/applicability.py)
        pipeline = apply_profile_defaults(pipeline)
        problems = check_applicability(pipeline)
    if not problems and import_classes:
        problems = check_classes(pipeline)
    problems = [_with_line(p, lines) for p in problems]
    if problems:
        raise PipelineError(file, problems)
    return pipeline


def _with_line(problem: Problem, lines: dict[str, int]) -> Problem:
    """The problem with the YAML line of its path, unless it already points somewhere (a SQL app's line)."""
    if problem.line is not None:
        return problem
    return dataclasses.replace(problem, line=_line_for(problem.path, lines))


# --- YAML with duplicate-key detection and a path -> line map -------------------------------


class _DuplicateKey(Exception):
    def __init__(self, path: str, key: str, line: int) -> None:
        super().__init__(key)
        self.path, self.key, self.line = path, key, line


def _parse_yaml(text: str, file: str) -> tuple[Any, dict[str, int]]:
    if len(text) > MAX_FILE_BYTES:
        raise PipelineError(
            file, [Problem("", f"the text is {len(text)} characters; the limit is {MAX_FILE_BYTES}", "split it up")]
        )
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except _YAML_FAILURES as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise PipelineError(
            file, [Problem("", f"not valid YAML: {getattr(exc, 'problem', exc)}", "fix the YAML syntax", line)]
        ) from exc
    if node is None:
        raise PipelineError(file, [Problem("", "the file is empty", "start with `pipeline: NAME`")])
    _check_budget(node, file)
    lines: dict[str, int] = {}
    try:
        _walk(node, "", lines)
    except _DuplicateKey as dup:
        where = f"{dup.path}.{dup.key}" if dup.path else dup.key
        raise PipelineError(
            file,
            [Problem(where, f"`{dup.key}` is defined twice", "give each entry its own name", dup.line)],
        ) from dup
    try:
        return yaml.load(text, Loader=yaml.SafeLoader), lines
    except _YAML_FAILURES as exc:  # e.g. an impossible date such as 2024-13-45
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise PipelineError(
            file, [Problem("", f"not valid YAML: {getattr(exc, 'problem', None) or exc}", "fix the value", line)]
        ) from exc


def _check_budget(root: yaml.Node, file: str) -> None:
    """Refuse documents that expand (through aliases) past MAX_NODES or nest deeper than MAX_DEPTH,
    before anything walks them recursively."""
    count = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES or depth > MAX_DEPTH:
            what = f"more than {MAX_NODES} values" if count > MAX_NODES else f"nesting deeper than {MAX_DEPTH}"
            raise PipelineError(file, [Problem("", f"the document has {what} (after expanding aliases)",
                                               "write a smaller pipeline; avoid repeated `*alias` expansion",
                                               node.start_mark.line + 1)])
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                stack.append((key_node, depth + 1))
                stack.append((value_node, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)


def _walk(node: yaml.Node, path: str, lines: dict[str, int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                raise _DuplicateKey(path, key, key_node.start_mark.line + 1)
            seen.add(key)
            _walk(value_node, f"{path}.{key}" if path else key, lines)
            lines[f"{path}.{key}" if path else key] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, f"{path}.{i}" if path else str(i), lines)


def _line_for(path: str, lines: dict[str, int]) -> int | None:
    while path:
        if path in lines:
            return lines[path]
        path = path.rpartition(".")[0]
    return None


# --- pydantic errors -> problems -----------------------------------------------------------------


def _problem_from(err: Any, lines: dict[str, int]) -> Problem:
    loc = [str(part) for part in err["loc"]]
    path = ".".join(loc)
    kind = err["type"]
    cause = (err.get("ctx") or {}).get("error")
    message = err["msg"].removeprefix("Value error, ")
    if isinstance(cause, FixableError):
        fix = cause.fix
        message = str(cause)
    elif kind == "missing":
        fix = f"add `{loc[-1]}:` at {'.'.join(loc[:-1]) or 'the top level'}"
        message = f"`{loc[-1]}` is required"
    elif kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        fix = f"{hint}remove `{loc[-1]}`; allowed keys here: {', '.join(allowed)}"
        message = f"unknown key `{loc[-1]}`"
    elif kind == "literal_error":
        fix = f"use one of {err['ctx']['expected']}"
    elif kind == "string_pattern_mismatch":
        fix = _pattern_fix(loc)
    else:
        fix = f"give `{loc[-1] if loc else 'the document'}` a valid value ({message.lower()})"
    return Problem(path, message, fix, _line_for(path, lines))


def _pattern_fix(loc: list[str]) -> str:
    last = loc[-1] if loc else ""
    if last == "class":
        return "write the class as `package.module:ClassName`"
    if last == "uri":
        return "use a `file:///path` or `hdfs://namenode:9870/path` URI"
    return f"use only letters, digits, '.', '_' and '-' (pattern {NAME_PATTERN})"


def _allowed_keys(loc: list[str]) -> list[str]:
    """The keys the model at `loc` accepts, by walking the model types along the path."""
    current: Any = Pipeline
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    model = _model_in(current)
    if model is None:
        return []
    return sorted((f.alias or name) for name, f in model.model_fields.items() if name != "source")


def _step(annotation: Any, part: str) -> Any:
    model = _model_in(annotation)
    if model is not None:
        for name, field in model.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
        return None
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    if origin in (tuple, list) and args:
        return args[0]
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None


# --- cross-checks --------------------------------------------------------------------------------


def check_references(pipeline: Pipeline) -> list[Problem]:
    import re

    problems: list[Problem] = []
    declared = sorted(pipeline.topics)
    name_ok = re.compile(NAME_PATTERN)
    for topic in pipeline.topics:
        if not name_ok.match(topic):
            problems.append(
                Problem(f"topics.{topic}", f"`{topic}` is not a valid Kafka topic name", _pattern_fix([]))
            )
    for name, spec in pipeline.processors.items():
        if not name_ok.match(name):
            problems.append(Problem(f"processors.{name}", f"`{name}` is not a valid name", _pattern_fix([])))
        for field in ("inputs", "outputs"):
            for i, topic in enumerate(getattr(spec, field)):
                if topic not in pipeline.topics:
                    close = difflib.get_close_matches(topic, declared, n=1)
                    hint = f"did you mean `{close[0]}`? or " if close else ""
                    problems.append(
                        Problem(
                            f"processors.{name}.{field}.{i}",
                            f"topic `{topic}` is not declared under `topics`",
                            f"{hint}add `{topic}: {{partitions: 1}}` under `topics`",
                        )
                    )
        for field in ("inputs", "outputs"):
            values = getattr(spec, field)
            for dup in sorted({t for t in values if values.count(t) > 1}):
                problems.append(
                    Problem(f"processors.{name}.{field}", f"topic `{dup}` is listed twice", "list it once")
                )
        both = sorted(set(spec.inputs) & set(spec.outputs))
        if both:
            problems.append(
                Problem(
                    f"processors.{name}.outputs",
                    f"`{name}` reads and writes `{both[0]}`, a loop onto itself",
                    "write to a different topic",
                )
            )
        if spec.semantics.output == "exactly_once" and not spec.outputs:
            problems.append(
                Problem(
                    f"processors.{name}.semantics.output",
                    "exactly-once output needs at least one output topic",
                    "add `outputs:` or choose at_least_once output",
                )
            )
    from stylus.config.tables import check_tables  # `tables:` (docs/tables.md)

    problems += check_tables(pipeline)
    if not problems:
        cycle = _find_cycle(pipeline)
        if cycle:
            problems.append(
                Problem(
                    f"processors.{cycle[0]}",
                    "the processors form a cycle: " + " -> ".join([*cycle, cycle[0]]),
                    "a pipeline is a DAG; break the cycle by writing one of these to a new topic",
                )
            )
    return problems


def _find_cycle(pipeline: Pipeline) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = 1
        stack.append(name)
        for topic in pipeline.processors[name].outputs:
            for nxt in pipeline.consumers_of(topic):
                if state.get(nxt) == 1:
                    return stack[stack.index(nxt) :]
                if nxt not in state:
                    found = visit(nxt)
                    if found:
                        return found
        stack.pop()
        state[name] = 2
        return []

    for name in pipeline.processors:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return []


def check_classes(pipeline: Pipeline) -> list[Problem]:
    from stylus.api import ProcessorImportError, import_processor_class

    problems: list[Problem] = []
    for name, spec in pipeline.processors.items():
        if spec.command is not None:
            problems += check_command(pipeline, name, spec.command)
            continue
        try:
            cls = import_processor_class(spec.class_)
        except ProcessorImportError as exc:
            problems.append(Problem(f"processors.{name}.class", str(exc), exc.fix))
            continue
        from stylus.monoid.backend import check_backend_class

        wrong = check_backend_class(spec.state.backend, cls)
        if wrong:
            problems.append(Problem(f"processors.{name}.state.backend", wrong,
                                    "use `backend: rocksdb`, or subclass stylus.monoid.MonoidProcessor"))
        if spec.concurrency is not None:
            from stylus.core.concurrent import concurrency_problem

            refused = concurrency_problem(pipeline, name, cls)
            if refused:
                problems.append(Problem(f"processors.{name}.concurrency", f"`concurrency` cannot apply: {refused}",
                                        "remove `concurrency` (records are then worked on one at a time)"))
        problems += missing_extras(name, spec)
    return problems


def command_dir(pipeline: Pipeline) -> Path:
    """Where a `command` runs: the pipeline file's directory, so `./split.sh` next to it works."""
    return Path(pipeline.source).resolve().parent if pipeline.source != "<memory>" else Path.cwd()


def check_command(pipeline: Pipeline, name: str, command: tuple[str, ...]) -> list[Problem]:
    """The program of a `command` processor exists and may be executed (found as `run` will find it)."""
    program = command[0]
    where = f"processors.{name}.command"
    if "/" in program:
        path = command_dir(pipeline) / program
        if not path.is_file():
            return [Problem(where, f"`{program}` not found (looked in {command_dir(pipeline)})",
                            "give the program's path relative to the pipeline file, or an absolute one")]
        if not os.access(path, os.X_OK):
            return [Problem(where, f"`{program}` is not executable", f"chmod +x {path}")]
    elif shutil.which(program) is None:
        return [Problem(where, f"`{program}` is not on the PATH",
                        "install it, or write its path (e.g. `./split.sh`, relative to the pipeline file)")]
    return []


def missing_extras(name: str, spec: ProcessorSpec) -> list[Problem]:
    """Settings whose optional dependencies are not installed here: caught by `validate` and before `run`
    starts, rather than when a worker first needs them."""
    from stylus.extras import EXTRAS, installed

    needs: list[tuple[str, str, str]] = []  # (path, extra, what)
    if spec.stateful and spec.state.backend == "postgres":
        needs.append((f"processors.{name}.state.backend", "postgres", "state backend `postgres`"))
    backup = spec.state.backup
    if spec.stateful and backup is not None and not backup.uri.startswith("file://"):
        needs.append((f"processors.{name}.state.backup.uri", "hdfs", f"backup target `{backup.uri}`"))
    return [Problem(path, f"{what} needs {EXTRAS[extra][0]}, which is not installed",
                    f"pip install 'stylus[{extra}]'") for path, extra, what in needs if not installed(extra)]
