"""Each CLI command, run as a real process against the real embedded broker."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import yaml
from confluent_kafka.admin import AdminClient

from tests.conftest import PipelineFactory
from tests.support.cli import ROOT, run_stylus, stylus_cmd, stylus_env
from tests.support.kafka import produce, read_json

TRENDING = str(ROOT / "pipelines" / "trending_events.yaml")

COUNTER = {
    "pipeline": "cli",
    "topics": {"words": {"partitions": 2}, "counts": {"partitions": 2}},
    "processors": {
        "counter": {"class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
                    "checkpoint": {"interval": "200ms"}},
    },
}


def test_validate_prints_a_summary_and_fails_on_bad_yaml(tmp_path: Path) -> None:
    ok = run_stylus("validate", TRENDING)
    assert ok.returncode == 0, ok.stderr
    assert "is valid" in ok.stdout and "filterer" in ok.stdout and "ranker" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(TRENDING).read_text().replace("inputs: [filtered]", "inputs: [filterd]"))
    result = run_stylus("validate", str(bad))
    assert result.returncode == 2
    assert f"{bad}:" in result.stderr and "processors.joiner.inputs.0" in result.stderr
    assert "did you mean `filtered`?" in result.stderr


def test_graph_in_three_formats(tmp_path: Path) -> None:
    text = run_stylus("graph", TRENDING).stdout
    assert "[events(4)] -> filterer" in text and "-> ranker" in text
    dot = run_stylus("graph", TRENDING, "--format", "dot").stdout
    assert dot.startswith("digraph") and '"topic:events" -> "proc:filterer";' in dot
    mermaid = run_stylus("graph", TRENDING, "--format", "mermaid").stdout
    assert mermaid.startswith("flowchart LR") and "t_events --> p_filterer" in mermaid
    out = tmp_path / "g.dot"
    assert run_stylus("graph", TRENDING, "--format", "dot", "--output", str(out)).returncode == 0
    assert out.read_text() == dot


def test_topics_create_is_idempotent(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    path, pipeline = pipeline_factory(COUNTER, create=False)
    first = run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    assert first.returncode == 0, first.stderr
    words = pipeline.processors["counter"].inputs[0]
    assert f"{words}" in first.stdout and "created" in first.stdout
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert len(meta[words].partitions) == 2 and pipeline.dlq_topic("counter") in meta
    second = run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    assert second.returncode == 0 and "created" not in second.stdout and "exists" in second.stdout


def test_run_processes_and_exits_when_idle(bootstrap: str, pipeline_factory: PipelineFactory) -> None:
    path, pipeline = pipeline_factory(COUNTER)
    words, counts = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    produce(bootstrap, words, [(f"w{i % 7}", {"i": i}) for i in range(700)])
    result = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap)
    assert result.returncode == 0, result.stderr
    assert "counter: processed 700 records" in result.stdout
    final: dict[str, int] = {}
    for value in read_json(bootstrap, counts):
        final[value["word"]] = max(final.get(value["word"], 0), value["count"])
    assert final == {f"w{i}": 100 for i in range(7)}


def test_run_rejects_an_unknown_processor(pipeline_factory: PipelineFactory, bootstrap: str) -> None:
    path, _ = pipeline_factory(COUNTER)
    result = run_stylus("run", str(path), "--processor", "nope", bootstrap=bootstrap)
    assert result.returncode != 0 and "no processor `nope`" in result.stderr


def test_sigterm_takes_a_final_checkpoint_and_exits_zero(bootstrap: str, pipeline_factory: PipelineFactory,
                                                         tmp_path: Path) -> None:
    doc = json.loads(json.dumps(COUNTER))
    doc["processors"]["counter"]["checkpoint"] = {"interval": "1h"}  # only the final checkpoint can save
    path, pipeline = pipeline_factory(doc)
    words = pipeline.processors["counter"].inputs[0]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    produce(bootstrap, words, [(f"w{i % 3}", {"i": i}) for i in range(300)])
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(stylus_cmd("run", str(path)), env=stylus_env(bootstrap), stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 60
    while "assigned" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    assert "processed 300 records" in log.read_text()
    # the committed offsets prove the final checkpoint: a second run has nothing left to do
    again = run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap)
    assert "counter: processed 0 records" in again.stdout, again.stdout + again.stderr


def test_broker_command_serves_until_terminated() -> None:
    proc = subprocess.Popen(stylus_cmd("broker"), env=stylus_env(None), stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        address = proc.stdout.readline().strip() if proc.stdout else ""
        assert address.startswith("127.0.0.1:")
        meta = AdminClient({"bootstrap.servers": address}).list_topics(timeout=10)
        assert meta.brokers
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_commands_without_bootstrap_use_the_embedded_broker(pipeline_factory: PipelineFactory) -> None:
    path, _ = pipeline_factory(COUNTER)
    text = yaml.safe_load(path.read_text())
    assert "bootstrap.servers" not in (text.get("kafka") or {})
    result = run_stylus("topics", "create", str(path), env=stylus_env(None))
    assert result.returncode == 0, result.stderr
    assert "started the embedded broker at 127.0.0.1:" in result.stderr
