"""The command a rendered container runs, run outside Docker against the embedded broker: the image's
`ENTRYPOINT ["stylus", "run"]` + the service's command, with the service's environment. Only the
pipeline path differs: in the container it is the mounted config, here the file it is made from."""

from __future__ import annotations

import collections
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from stylus.deploy.common import PIPELINE_MOUNT, DeployOptions
from stylus.deploy.compose import render_compose_doc
from stylus.kafka.admin import create_topics, pipeline_topics
from tests.conftest import PipelineFactory
from tests.support.cli import stylus_cmd, stylus_env
from tests.support.kafka import produce, read_json

WORDS = ["kafka", "rocksdb", "stylus", "spark", "hdfs"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(port: int, env: dict[str, str]) -> bool:
    """The Dockerfile's HEALTHCHECK command, with the port the image sets in STYLUS_METRICS_PORT."""
    probe = subprocess.run(["python", "-m", "stylus.deploy.healthcheck"], capture_output=True, text=True,
                           env={**env, "STYLUS_METRICS_PORT": str(port)}, timeout=30)
    return probe.returncode == 0


def test_rendered_command_processes_records(pipeline_factory: PipelineFactory, bootstrap: str,
                                            tmp_path: Path) -> None:
    doc: dict[str, Any] = {
        "pipeline": "deployed",
        "topics": {"passed": {"partitions": 2}, "counts": {"partitions": 2}},
        "processors": {
            "counter": {
                "class": "tests.apps.counting:WordCount",
                "inputs": ["passed"],
                "outputs": ["counts"],
                "semantics": {"state": "at_least_once", "output": "at_least_once"},
                "checkpoint": {"interval": "1s"},
                "state": {"backup": {"uri": f"file://{tmp_path}/backup"}},
                "replicas": 2,
            }
        },
    }
    path, pipeline = pipeline_factory(doc)
    state_dir = Path(pipeline.processors["counter"].state.dir)
    port = free_port()
    compose = render_compose_doc(pipeline, path.read_text(), DeployOptions(metrics_port=port))
    service = compose["services"]["counter"]
    command: list[str] = service["command"]
    assert command[0] == PIPELINE_MOUNT and "--metrics-port" in command
    assert service["volumes"][0]["target"] == str(state_dir)  # the volume sits where the state is written
    env = stylus_env(bootstrap, **service["environment"])  # STYLUS_PROFILE=compose; the env bootstrap wins

    source, sink = pipeline.processors["counter"].inputs[0], pipeline.processors["counter"].outputs[0]
    records = [(WORDS[i % len(WORDS)], {"word": WORDS[i % len(WORDS)], "i": i}) for i in range(500)]
    create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    produce(bootstrap, source, records)
    expected = collections.Counter(key for key, _ in records)

    proc = subprocess.Popen(stylus_cmd("run", str(path), *command[1:]), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not healthy(port, env):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the container healthcheck never passed"
            time.sleep(0.5)
        final: dict[str, int] = {}
        while final != expected:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, f"counts so far {final}"
            time.sleep(0.5)
            final = {}
            for row in read_json(bootstrap, sink):
                final[row["word"]] = max(final.get(row["word"], 0), row["count"])
        proc.send_signal(signal.SIGTERM)  # what `docker stop` sends, within stop_grace_period
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "counter: processed 500 records" in out
    partitions = sorted(p.name for p in (state_dir / pipeline.pipeline / "counter").iterdir())
    assert partitions == [f"{source}-0", f"{source}-1"]
