"""The backup target hangs, then refuses: processing goes on, failures are counted, backups resume."""

from __future__ import annotations

import threading
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.offsets import end_offsets
from stylus.runtime.runner import PipelineRunner
from stylus.runtime.worker import Worker
from stylus.state.backup import BackupManager
from tests.state.helpers import wait_for
from tests.support.kafka import produce, read_json
from tests.support.state import summed_state
from tests.webhdfs_server import WebHdfsServer

PARTS = 2


def progressed(worker: Worker, at_least: int) -> bool:
    return worker.processed >= at_least


def round_failed(backups: BackupManager, failures: int, skipped: int) -> bool:
    return backups.failures > failures or backups.skipped_busy > skipped


def backed_up_to(backups: BackupManager, topic: str, ends: dict[tuple[str, int], tuple[int, int]]) -> bool:
    """The newest backup of every partition is at the partition's end offset."""
    return all((m := backups.partition(topic, p).newest()) is not None and m.offset == ends[(topic, p)][1]
               for p in range(PARTS))


def test_processing_continues_while_the_target_is_down(pipeline_factory: Any, bootstrap: str, tmp_path: Path,
                                                      webhdfs: WebHdfsServer) -> None:
    _, pipeline = pipeline_factory({
        "topics": {"words": {"partitions": PARTS}, "counts": {"partitions": PARTS}},
        "processors": {"counter": {
            "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
            "semantics": {"state": "exactly_once", "output": "at_least_once"}, "checkpoint": {"interval": "200ms"},
            "state": {"backup": {"uri": f"hdfs://127.0.0.1:{webhdfs.port}/b", "interval": "300ms",
                                 "timeout": "1s"}},
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

        for outage in ("hang", "refuse"):
            failures, skipped, processed = backups.failures, backups.skipped_busy, worker.processed
            webhdfs.hang(5) if outage == "hang" else webhdfs.refuse(500)
            sent += produce(bootstrap, words, [(f"k{i % 50}", {"i": i}) for i in range(sent, sent + 1000)])
            # processing goes on during the outage
            wait_for(partial(progressed, worker, processed + 1000), 30, f"processing during the {outage}")
            wait_for(partial(round_failed, backups, failures, skipped), 30,
                     f"a failed or skipped backup round during the {outage}")
            assert backups.failures > failures or backups.skipped_busy > skipped
            webhdfs.heal()
            # backups resume and reach the current offsets
            ends = end_offsets(bootstrap, [(words, p) for p in range(PARTS)])
            wait_for(partial(backed_up_to, backups, words, ends), 30, f"backups after the {outage}")
        assert backups.last_error is not None and "500" in backups.last_error
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
