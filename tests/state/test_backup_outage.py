"""The backup target hangs, then refuses: processing goes on, failures are counted, backups resume.

The hang and a refusal run on a real HDFS (the shared MiniDFSCluster); 5xx answers need the hand-written server.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.offsets import end_offsets
from stylus.runtime.runner import PipelineRunner
from stylus.runtime.worker import Worker
from stylus.state.backup import BackupManager
from tests.state.helpers import wait_for
from tests.support.hdfs import MiniHdfs
from tests.support.kafka import produce, read_json
from tests.support.state import summed_state
from tests.webhdfs_server import WebHdfsServer

PARTS = 2


def progressed(worker: Worker, at_least: int) -> bool:
    return worker.processed >= at_least


def round_failed(backups: BackupManager, failures: int) -> bool:
    """A round failed: refused, or given up after the backup `timeout` (a hung target holds the round that
    far, and rounds falling due meanwhile are skipped as busy)."""
    return backups.failures > failures


def backed_up_to(backups: BackupManager, topic: str, ends: dict[tuple[str, int], tuple[int, int]]) -> bool:
    """The newest backup of every partition is at the partition's end offset."""
    return all((m := backups.partition(topic, p).newest()) is not None and m.offset == ends[(topic, p)][1]
               for p in range(PARTS))


@dataclass
class Outage:
    begin: Callable[[], object]
    end: Callable[[], object]
    error: str  # what the failed rounds' error says


def test_processing_continues_while_hdfs_hangs_or_refuses(pipeline_factory: Any, bootstrap: str,
                                                          mini_hdfs: MiniHdfs, hdfs_uri: str) -> None:
    """A hung cluster (its JVM SIGSTOPped: connections open, nothing answers), then a NameNode refusing every new
    file (a full namespace quota on the backup root)."""
    run_through_outages(pipeline_factory, bootstrap, hdfs_uri, {
        "hang": Outage(mini_hdfs.pause, mini_hdfs.resume, "timed out"),
        "refusal": Outage(partial(mini_hdfs.fill_quota, hdfs_uri), partial(mini_hdfs.clear_quota, hdfs_uri),
                          "NameSpace quota"),
    })


def test_processing_continues_while_the_namenode_answers_5xx(pipeline_factory: Any, bootstrap: str,
                                                            webhdfs: WebHdfsServer) -> None:
    """The hand-written WebHDFS server, because a MiniDFSCluster cannot be made to answer 503 (the
    RetriableException of a standby or overloaded NameNode) or 500 (an internal error) on demand."""
    run_through_outages(pipeline_factory, bootstrap, f"hdfs://127.0.0.1:{webhdfs.port}/b", {
        "503": Outage(partial(webhdfs.refuse, 503), webhdfs.heal, "(503)"),
        "500": Outage(partial(webhdfs.refuse, 500), webhdfs.heal, "(500)"),
    })


def run_through_outages(pipeline_factory: Any, bootstrap: str, uri: str, outages: dict[str, Outage]) -> None:
    """Input keeps coming through each outage in turn: processing goes on, rounds fail with the outage's error,
    backups reach the current offsets once it ends, and nothing is lost or counted twice."""
    _, pipeline = pipeline_factory({
        "topics": {"words": {"partitions": PARTS}, "counts": {"partitions": PARTS}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "at_least_once"}, "checkpoint": {"interval": "200ms"},
            "state": {"backup": {"uri": uri, "interval": "300ms", "timeout": "1s"}},
        }},
    })
    words = pipeline.processors["counter"].inputs[0]
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)  # before producing: no auto-created topic
    runner = PipelineRunner(pipeline, bootstrap, ["counter"])
    thread = threading.Thread(target=runner.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        worker = wait_for(lambda: runner.workers.get("counter"), 30, "the worker")
        backups = worker.backups
        assert backups is not None
        sent = produce(bootstrap, words, [(f"k{i % 50}", {"i": i}) for i in range(1000)])
        wait_for(lambda: worker.processed >= sent and backups.completed >= PARTS, 60, "first backups")

        for name, outage in outages.items():
            failures, processed = backups.failures, worker.processed
            outage.begin()
            try:
                sent += produce(bootstrap, words, [(f"k{i % 50}", {"i": i}) for i in range(sent, sent + 1000)])
                # processing goes on during the outage
                wait_for(partial(progressed, worker, processed + 1000), 30, f"processing during the {name}")
                wait_for(partial(round_failed, backups, failures), 30, f"a failed backup round during the {name}")
                assert outage.error in (backups.last_error or ""), backups.last_error
            finally:
                outage.end()
            # backups resume and reach the current offsets
            ends = end_offsets(bootstrap, [(words, p) for p in range(PARTS)])
            wait_for(partial(backed_up_to, backups, words, ends), 30, f"backups after the {name}")
    finally:
        runner.stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert not runner.errors, runner.errors
    # nothing lost: every record counted once in the state (exactly-once), every count in the output
    truth = Counter(f"k{i % 50}" for i in range(sent))
    spec = pipeline.processors["counter"]
    assert summed_state(Path(spec.state.dir), pipeline.pipeline, "counter", words, PARTS) == truth
    final: dict[str, int] = {}
    for count in read_json(bootstrap, spec.outputs[0]):
        final[count["word"]] = max(final.get(count["word"], 0), count["count"])
    assert final == dict(truth)
