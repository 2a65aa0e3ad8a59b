"""Executable (Swift) processors on the real broker: Storm's word count end to end, SIGKILL of the program and
of `stylus run` at random points without losing an input, a program that keeps crashing (or hangs) on one
record, dead-lettered or stopping the processor (docs/executable.md)."""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from stylus.config import Pipeline, load_pipeline
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from stylus.monitoring.metrics import StylusCollector
from stylus.runtime.executable import ExecutableWorker
from stylus.runtime.runner import PipelineRunner
from tests.conftest import PipelineFactory
from tests.support.chaos import (
    Feeder,
    Instance,
    Rec,
    group_offsets,
    produce_now,
    topic_ends,
    unique_suffix,
    wait_until,
)
from tests.support.cli import ROOT
from tests.support.kafka import produce, read_json, read_raw

SPLIT = ROOT / "processors" / "split.sh"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def wordcount_doc(command: list[str], **splitter: Any) -> dict[str, Any]:
    """pipelines/wordcount.yaml with the splitter's command (and knobs) replaced."""
    doc = yaml.safe_load((ROOT / "pipelines" / "wordcount.yaml").read_text())
    doc["processors"]["splitter"]["command"] = command
    doc["processors"]["splitter"].update(splitter)
    doc["processors"]["counter"]["state"] = {}
    return doc


def sentences(n: int, seed: int) -> list[Rec]:
    """Sentence i carries the unique word `s<i>`, so each input's arrival can be checked on its own. They alternate
    between the two partitions of `sentences`: unkeyed records would stick to one partition for a while (the
    producer's sticky partitioning), and leave the other empty as often as not."""
    rnd = random.Random(seed)
    return [Rec(None, {"sentence": " ".join([f"s{i}", *rnd.choices(WORDS, k=rnd.randint(1, 6))])}, 1_000 + i, i % 2)
            for i in range(n)]


def truth(recs: list[Rec]) -> dict[str, int]:
    out: dict[str, int] = {}
    for rec in recs:
        for word in rec.value["sentence"].split():
            out[word] = out.get(word, 0) + 1
    return out


def final_counts(bootstrap: str, pipeline: Pipeline) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in read_json(bootstrap, _topic(pipeline, "counts")):
        counts[row["word"]] = max(counts.get(row["word"], 0), row["count"])
    return counts


def _topic(pipeline: Pipeline, prefix: str) -> str:
    [name] = [t for t in pipeline.topics if t.startswith(prefix + "-")]
    return name


def run_in_thread(runner: PipelineRunner) -> tuple[threading.Thread, list[int]]:
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(runner.run(install_signals=False)), daemon=True)
    thread.start()
    return thread, code


def test_wordcount_example_gives_exact_counts(pipeline_factory: PipelineFactory, bootstrap: str,
                                              tmp_path: Path) -> None:
    shutil.copy(SPLIT, tmp_path / "split.sh")  # `./split.sh` runs in the pipeline file's directory
    path, pipeline = pipeline_factory(wordcount_doc(["./split.sh"]), name="wc")
    assert path.parent == tmp_path
    recs = sentences(400, seed=1)
    produce_now(bootstrap, _topic(pipeline, "sentences"), recs)
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.5)
    assert runner.run(install_signals=False) == 0, runner.errors
    assert final_counts(bootstrap, pipeline) == truth(recs)
    splitter = runner.workers["splitter"]
    assert isinstance(splitter, ExecutableWorker)
    assert splitter.processed == 400 and splitter.restarts == 0 and splitter.checkpoints >= 1
    group = group_offsets(bootstrap, pipeline.group_id("splitter"), _topic(pipeline, "sentences"), 2)
    ends = topic_ends(bootstrap, _topic(pipeline, "sentences"), 2)
    assert group == {p: ends[p][1] for p in range(2)}  # committed up to the last answered record


def test_sigkill_of_the_program_at_random_points_loses_nothing(
        pipeline_factory: PipelineFactory, bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rnd = random.Random(seed)
    _, pipeline = pipeline_factory(wordcount_doc([str(SPLIT)], checkpoint={"interval": "1s", "records": 50},
                                                 command_window=100), name="wck")
    recs = sentences(3000, seed)
    feeder = Feeder(bootstrap, _topic(pipeline, "sentences"), recs, rate=600)
    feeder.start()
    wait_until(lambda: feeder.sent > 0, 30, "the feeder's first record")
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=2.0)
    thread, code = run_in_thread(runner)
    splitter = wait_until(lambda: runner.workers.get("splitter"), 60, "the splitter worker")
    assert isinstance(splitter, ExecutableWorker)
    points = sorted(rnd.sample(range(50, 2800), 5))
    print(f"kill the program after {points} answered records")
    with caplog.at_level(logging.WARNING, logger="stylus.runtime.executable"):
        for point in points:
            wait_until(lambda p=point: splitter.processed >= p, 120, f"{point} records answered")
            program = splitter.program
            assert program is not None
            os.kill(program.pid, signal.SIGKILL)
            wait_until(lambda old=program: splitter.program is not old, 60, "the program's restart")
        feeder.join_checked(60)
        thread.join(180)
    assert not thread.is_alive() and code == [0], runner.errors
    assert splitter.restarts == len(points)  # each kill seen, counted and logged
    assert caplog.text.count("restarting it") == len(points) and "exited with code -9" in caplog.text
    collector = StylusCollector(pipeline, lambda: runner.workers, bootstrap)
    try:
        samples = [s for family in collector.collect() for s in family.samples]
    finally:
        collector.close()
    assert [s.value for s in samples if s.name == "stylus_command_restarts_total"] == [len(points)]
    counts, expected = final_counts(bootstrap, pipeline), truth(recs)
    lost = [w for w, n in expected.items() if counts.get(w, 0) < n]
    assert not lost, f"seed {seed}: inputs lost: {lost[:20]}"


def test_sigkill_of_stylus_run_then_restart_loses_nothing(pipeline_factory: PipelineFactory, bootstrap: str,
                                                          tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rnd = random.Random(seed)
    path, pipeline = pipeline_factory(wordcount_doc([str(SPLIT)], checkpoint={"interval": "1s", "records": 100}),
                                      name="wcr")
    recs = sentences(4000, seed)
    sentences_topic = _topic(pipeline, "sentences")
    feeder = Feeder(bootstrap, sentences_topic, recs, rate=400)
    instance = Instance(path, tmp_path / "run.log", bootstrap, name="wcr")
    group = pipeline.group_id("splitter")

    def committed() -> int:
        return sum(max(0, o) for o in group_offsets(bootstrap, group, sentences_topic, 2).values())

    feeder.start()
    try:
        for kill in sorted(rnd.sample(range(200, 3200), 3)):
            instance.start()
            print(f"SIGKILL stylus run once {kill} sentences are committed")
            wait_until(lambda k=kill: committed() >= k, 120, f"{kill} committed", interval=0.2,
                       explain=instance.tail)
            instance.kill()
        feeder.join_checked(60)
        instance.start(exit_when_idle=3.0)
        assert instance.wait(180) == 0, instance.tail()
    finally:
        instance.kill()
        feeder.stop_flag.set()
    counts, expected = final_counts(bootstrap, pipeline), truth(recs)
    lost = [w for w, n in expected.items() if counts.get(w, 0) < n]
    assert not lost, f"seed {seed}: inputs lost: {lost[:20]}\n{instance.tail()}"
    assert committed() == len(recs)


def poisoned_doc(command: list[str], on_error: str, **knobs: Any) -> dict[str, Any]:
    return {"topics": {"lines": {"partitions": 1}, "out": {"partitions": 1}},
            "processors": {"echo": {"command": command, "inputs": ["lines"], "outputs": ["out"],
                                    "on_error": on_error, "command_attempts": 2, **knobs}}}


def echo_program(where: Path, on_poison: str) -> list[str]:
    """A shell program that answers each line with one output (the input line itself), and on the record whose
    value is "poison" does `on_poison` instead (crash, or hang)."""
    path = where / "echo.sh"
    path.write_text("#!/bin/sh\nwhile IFS= read -r line; do\n"
                    f"  case \"$line\" in *'\"value\":\"poison\"'*) {on_poison};; esac\n"
                    "  printf '[{\"value\": %s}]\\n' \"$line\"\ndone\n")
    path.chmod(0o755)
    return ["./echo.sh"]


CRASH = "echo 'poisoned record' >&2; exit 3"


def feed_lines(bootstrap: str, pipeline: Pipeline, poison_at: int, n: int = 20) -> None:
    produce_now(bootstrap, _topic(pipeline, "lines"),
                [Rec(f"k{i}", "poison" if i == poison_at else f"line {i}", 1_000 + i) for i in range(n)])  # type: ignore[arg-type]


def poisoned_run(pipeline_factory: PipelineFactory, bootstrap: str, program: list[str], on_error: str, *, name: str,
                 poison_at: int, n: int = 20, **settings: Any) -> tuple[Pipeline, PipelineRunner, int]:
    """The echo pipeline over `n` lines with a poisoned one, run to its end: (pipeline, runner, exit code)."""
    _, pipeline = pipeline_factory(poisoned_doc(program, on_error, **settings), name=name)
    feed_lines(bootstrap, pipeline, poison_at=poison_at, n=n)
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.0)
    return pipeline, runner, runner.run(install_signals=False)


def test_a_record_that_keeps_crashing_the_program_is_dead_lettered(
        pipeline_factory: PipelineFactory, bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        pipeline, runner, code = poisoned_run(pipeline_factory, bootstrap, echo_program(tmp_path, CRASH),
                                              "dead_letter", name="poison", poison_at=7)
    assert code == 0, runner.errors
    worker = runner.workers["echo"]
    assert isinstance(worker, ExecutableWorker) and worker.restarts == 2
    out = read_json(bootstrap, _topic(pipeline, "out"))
    assert sorted(row["value"] for row in out) == sorted(f"line {i}" for i in range(20) if i != 7)
    [letter] = read_raw(bootstrap, pipeline.dlq_topic("echo"))
    headers = {k: v.decode() for k, v in letter.headers() or []}
    assert letter.value() == b'"poison"' and letter.key() == b"k7"
    assert "failed 2 times in a row on this record" in headers["stylus.error"]
    assert headers["stylus.error.stage"] == "command" and headers["stylus.source.offset"] == "7"
    assert "echo[" in caplog.text and "stderr: poisoned record" in caplog.text  # stderr, prefixed, in the log


def test_a_record_that_keeps_crashing_the_program_stops_the_processor(
        pipeline_factory: PipelineFactory, bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        pipeline, runner, code = poisoned_run(pipeline_factory, bootstrap, echo_program(tmp_path, CRASH), "stop",
                                              name="poison-stop", poison_at=5)
    assert code == 1
    assert "error while closing" not in caplog.text  # a clean stop: the final commit is taken
    message = runner.errors["echo"]
    assert "processor `echo`" in message and "@5" in message and "failed 2 times in a row" in message
    assert "exited with code 3" in message
    # committed up to the last answered record before it: a restart retries the poison, nothing is skipped
    assert group_offsets(bootstrap, pipeline.group_id("echo"), _topic(pipeline, "lines"), 1) == {0: 5}


def test_a_program_that_stops_answering_is_restarted_then_dead_lettered(
        pipeline_factory: PipelineFactory, bootstrap: str, tmp_path: Path) -> None:
    pipeline, runner, code = poisoned_run(pipeline_factory, bootstrap, echo_program(tmp_path, "sleep 600"),
                                          "dead_letter", name="hang", poison_at=3, n=10, command_timeout="1s")
    assert code == 0, runner.errors
    worker = runner.workers["echo"]
    assert isinstance(worker, ExecutableWorker) and worker.restarts == 2
    out = read_json(bootstrap, _topic(pipeline, "out"))
    assert sorted(row["value"] for row in out) == sorted(f"line {i}" for i in range(10) if i != 3)
    [letter] = read_raw(bootstrap, pipeline.dlq_topic("echo"))
    assert "no answer for 1s" in dict(letter.headers() or [])["stylus.error"].decode()


def test_a_rebalance_commits_the_revoked_partitions_and_loses_nothing(
        pipeline_factory: PipelineFactory, bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    """A second instance joins mid-stream: the first commits what was answered on the partitions it gives up,
    restarts its program's stream for the rest, and the newcomer resumes from that commit."""
    _, pipeline = pipeline_factory(wordcount_doc([str(SPLIT)], checkpoint={"interval": "1s"}), name="wcb")
    recs = sentences(2000, seed=7)
    feeder = Feeder(bootstrap, _topic(pipeline, "sentences"), recs, rate=500)
    feeder.start()
    first = PipelineRunner(pipeline, bootstrap, exit_when_idle=3.0, instance="a")
    first_thread, first_code = run_in_thread(first)
    splitter = wait_until(lambda: first.workers.get("splitter"), 60, "the first splitter")
    wait_until(lambda: splitter.processed >= 300, 120, "300 sentences answered by the first instance")
    second = PipelineRunner(pipeline, bootstrap, exit_when_idle=3.0, instance="b")
    with caplog.at_level(logging.INFO, logger="stylus.runtime.executable"):
        second_thread, second_code = run_in_thread(second)
        feeder.join_checked(60)
        first_thread.join(180)
        second_thread.join(180)
    assert first_code == [0] and second_code == [0], (first.errors, second.errors)
    other = second.workers["splitter"]
    assert splitter.rebalances >= 2 and other.processed > 0  # the partitions were shared out
    assert "splitter: revoking" in caplog.text
    counts, expected = final_counts(bootstrap, pipeline), truth(recs)
    assert not [w for w, n in expected.items() if counts.get(w, 0) < n]


def test_an_undecodable_record_is_dead_lettered_in_its_turn(pipeline_factory: PipelineFactory, bootstrap: str,
                                                            tmp_path: Path) -> None:
    _, pipeline = pipeline_factory(poisoned_doc(echo_program(tmp_path, CRASH), "dead_letter"), name="undecodable")
    produce(bootstrap, _topic(pipeline, "lines"),
            [(f"k{i}", b"{not json" if i == 4 else f'"line {i}"'.encode()) for i in range(10)], raw=True)
    runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.0)
    assert runner.run(install_signals=False) == 0, runner.errors
    out = read_json(bootstrap, _topic(pipeline, "out"))
    assert [row["value"] for row in out] == [f"line {i}" for i in range(10) if i != 4]  # in order, once each
    [letter] = read_raw(bootstrap, pipeline.dlq_topic("echo"))
    assert letter.value() == b"{not json" and dict(letter.headers() or [])["stylus.error.stage"] == b"decode"
    assert group_offsets(bootstrap, pipeline.group_id("echo"), _topic(pipeline, "lines"), 1) == {0: 10}


def test_groupings_apply_to_a_command_processors_outputs(bootstrap: str, tmp_path: Path) -> None:
    """`grouping: all` on an output copies each answer's output to every partition; `partition` in an output
    picks one (direct grouping), as `ctx.emit(..., partition=n)` does (docs/groupings.md)."""
    suffix = unique_suffix()
    lines, ctl, direct = f"lines-{suffix}", f"ctl-{suffix}", f"direct-{suffix}"
    program = f'[{{value: .value}}, {{value: .value, topic: "{direct}", partition: 2}}]'
    doc = {"pipeline": f"grouped-{suffix}",
           "topics": {lines: {"partitions": 1}, ctl: {"partitions": 3}, direct: {"partitions": 3}},
           "processors": {"fan": {"command": ["jq", "--unbuffered", "-c", program], "inputs": [lines],
                                  "outputs": [{"topic": ctl, "grouping": "all"}, direct]}}}
    path = tmp_path / "grouped.yaml"
    path.write_text(yaml.safe_dump(doc))
    pipeline = load_pipeline(path, import_classes=True)
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    try:
        produce_now(bootstrap, lines, [Rec(None, {"n": i}, 1_000 + i) for i in range(5)])
        runner = PipelineRunner(pipeline, bootstrap, exit_when_idle=1.0)
        assert runner.run(install_signals=False) == 0, runner.errors
        every = {p: sorted(orjson.loads(m.value())["n"] for m in read_raw(bootstrap, ctl) if m.partition() == p)
                 for p in range(3)}
        assert every == {p: [0, 1, 2, 3, 4] for p in range(3)}
        assert {m.partition() for m in read_raw(bootstrap, direct)} == {2} and len(read_raw(bootstrap, direct)) == 5
    finally:
        delete_topics(bootstrap, sorted({*pipeline_topics(pipeline), pipeline.dlq_topic("fan")}))
