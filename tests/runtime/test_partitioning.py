"""Emitted keys are partitioned with the Java client's murmur2, so other Kafka clients co-partition."""

from __future__ import annotations

from tests.conftest import PipelineFactory
from tests.support.cli import run_stylus
from tests.support.kafka import produce, read_raw


def java_murmur2(data: bytes) -> int:
    """org.apache.kafka.common.utils.Utils.murmur2, transcribed for the check."""
    m, r, length = 0x5BD1E995, 24, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: bytes, partitions: int) -> int:
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


def test_emitted_keys_land_where_the_java_client_puts_them(bootstrap: str,
                                                          pipeline_factory: PipelineFactory) -> None:
    path, pipeline = pipeline_factory({
        "pipeline": "part",
        "topics": {"src": {"partitions": 1}, "dst": {"partitions": 7}},
        "processors": {"pass": {"class": "tests.apps.counting:Passthrough", "inputs": ["src"],
                                "outputs": ["dst"], "semantics": {"output": "at_least_once"}}},
    })
    src, dst = pipeline.processors["pass"].inputs[0], pipeline.processors["pass"].outputs[0]
    keys = [f"user-{i}" for i in range(300)] + ["", "é", "a" * 41]
    run_stylus("topics", "create", str(path), bootstrap=bootstrap)
    produce(bootstrap, src, [(k, {"k": k}) for k in keys])
    assert run_stylus("run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap).returncode == 0
    out = read_raw(bootstrap, dst)
    assert len(out) == len(keys)
    assert len({m.partition() for m in out}) == 7
    for msg in out:
        assert msg.partition() == java_partition(msg.key() or b"", 7), msg.key()
