"""Issue 4: throughput of a stateful processor while its backup target is healthy, hanging or refusing.

    .venv/bin/python -m bench.backup_outage --records 1000000 --repeat 3

Work: WordCount (count per key in RocksDB, emit the running count; exactly-once state, at-least-once
output), 4 partitions, `--keys` distinct keys, checkpoint every 1 s, backups every 2 s to the WebHDFS
test server (tests/webhdfs_server.py) running in its own process, as a NameNode would be. Modes:
`none` (no backup configured: the ceiling), `healthy`, `hang` (every request held until the client's
`timeout` of 5 s gives up) and `refuse` (every request answered 503 RemoteException). Each run is a
fresh consumer group over the same input, timed from its first record to its last; runs alternate
between modes and the median per mode is reported, with the load average around each run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from stylus.config import parse_pipeline
from stylus.config.model import TopicSpec
from stylus.kafka.admin import create_topics, delete_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.settings import PRODUCER_DEFAULTS
from stylus.runtime.worker import Worker

PARTITIONS = 4
MODES = ("none", "healthy", "hang", "refuse")


def _serve(root: str, conn: Connection) -> None:
    """Child process: the WebHDFS server, steered by commands on `conn`."""
    from tests.webhdfs_server import WebHdfsServer

    with WebHdfsServer(root) as server:
        conn.send(server.port)
        while True:
            cmd, arg = conn.recv()
            if cmd == "stop":
                return
            if cmd == "hang":
                server.hang(float(arg))
            elif cmd == "refuse":
                server.refuse(int(arg))
            elif cmd == "heal":
                server.heal()
            conn.send("ok")


class RemoteHdfs:
    """The test server in another process (its HTTP threads must not share the worker's GIL)."""

    def __init__(self, root: Path) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(str(root), child), daemon=True)
        self.proc.start()
        self.port: int = self.conn.recv()

    def send(self, cmd: str, arg: Any = None) -> None:
        self.conn.send((cmd, arg))
        assert self.conn.recv() == "ok"

    def close(self) -> None:
        self.conn.send(("stop", None))
        self.proc.join(10)


def load_input(bootstrap: str, topic: str, records: int, keys: int) -> None:
    producer = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(1)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, orjson.dumps({"i": i}), f"k{rng.randrange(keys)}".encode())
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


def run_once(bootstrap: str, topic_in: str, records: int, mode: str, hdfs: RemoteHdfs, state_dir: str
             ) -> dict[str, Any]:
    backup = "" if mode == "none" else (
        f"backup: {{uri: 'hdfs://127.0.0.1:{hdfs.port}/bench-{uuid.uuid4().hex[:6]}', interval: 2s, keep: 3, "
        f"timeout: 5s}}")
    out = f"bench-out-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {out: TopicSpec(partitions=PARTITIONS)})
    pipeline = parse_pipeline(f"""
pipeline: bench-{uuid.uuid4().hex[:6]}
kafka: {{bootstrap.servers: "{bootstrap}"}}
topics:
  {topic_in}: {{partitions: {PARTITIONS}}}
  {out}: {{partitions: {PARTITIONS}}}
processors:
  counter:
    class: tests.apps.counting:WordCount
    inputs: [{topic_in}]
    outputs: [{out}]
    semantics: {{state: exactly_once, output: at_least_once}}
    checkpoint: {{interval: 1s}}
    state: {{dir: {state_dir}, {backup}}}
""")
    if mode == "hang":
        hdfs.send("hang", 3600)
    elif mode == "refuse":
        hdfs.send("refuse", 503)
    load_before = os.getloadavg()[0]
    stop = threading.Event()
    worker = Worker(pipeline, "counter", bootstrap, stop=stop)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    while worker.processed == 0:
        time.sleep(0.0005)
    first, cpu_first = time.perf_counter(), time.process_time()
    already = worker.processed
    while worker.processed < records:
        time.sleep(0.002)
    worker.sink.flush()
    elapsed, cpu = time.perf_counter() - first, time.process_time() - cpu_first
    load_after = os.getloadavg()[0]
    backups = worker.backups  # counted over the timed span only
    result = {
        "mode": mode, "records_per_s": (records - already) / elapsed, "seconds": elapsed,
        "records_per_cpu_s": (records - already) / cpu,  # this process: worker, clients, backup thread
        "load_before": load_before, "load_after": load_after,
        "backups_ok": backups.completed if backups else 0, "backups_failed": backups.failures if backups else 0,
        "rounds_skipped_busy": backups.skipped_busy if backups else 0,
        "sent_mb": (backups.sent_bytes / 1e6) if backups else 0.0,
    }
    stop.set()
    hdfs.send("heal")  # a hung upload returns at once, so the worker closes quickly
    thread.join(60)
    delete_topics(bootstrap, [out])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    assert all(m in MODES for m in modes), f"modes are {MODES}"
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        hdfs = RemoteHdfs(Path(tmp) / "hdfs")
        try:
            bootstrap = broker.bootstrap
            topic_in = f"bench-in-{uuid.uuid4().hex[:6]}"
            create_topics(bootstrap, {topic_in: TopicSpec(partitions=PARTITIONS)})
            print(f"loading {args.records:,} records ({args.keys:,} keys) into {PARTITIONS} partitions ...",
                  flush=True)
            load_input(bootstrap, topic_in, args.records, args.keys)
            runs: list[dict[str, Any]] = []
            for rep in range(args.repeat):
                for mode in modes:
                    result = run_once(bootstrap, topic_in, args.records, mode, hdfs, f"{tmp}/s-{mode}-{rep}")
                    runs.append(result)
                    print(f"  {mode:8} run {rep + 1}: {result['records_per_s']:,.0f} records/s, "
                          f"{result['records_per_cpu_s']:,.0f} per CPU-s ({result['seconds']:.1f} s; "
                          f"load {result['load_before']:.1f} -> {result['load_after']:.1f}; backups ok "
                          f"{result['backups_ok']}, failed {result['backups_failed']}, skipped "
                          f"{result['rounds_skipped_busy']}, {result['sent_mb']:.1f} MB sent)", flush=True)
        finally:
            hdfs.close()
    medians: dict[str, dict[str, float]] = {}
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        medians[mode] = {k: statistics.median(r[k] for r in mine) for k in ("records_per_s", "records_per_cpu_s")}
    base = medians.get("healthy")
    for mode, med in medians.items():
        vs = (f"  ({med['records_per_s'] / base['records_per_s'] - 1:+.1%} wall, "
              f"{med['records_per_cpu_s'] / base['records_per_cpu_s'] - 1:+.1%} per CPU-s vs healthy)"
              if base and mode != "healthy" else "")
        print(f"{mode:8}: median {med['records_per_s']:,.0f} records/s, {med['records_per_cpu_s']:,.0f} per "
              f"CPU-s{vs}")
    if args.json:
        args.json.write_text(json.dumps({"records": args.records, "keys": args.keys, "runs": runs,
                                         "median": medians}, indent=2))


if __name__ == "__main__":
    main()
