"""Soak test (issue 9): generated load through a stateful processor run as `stylus run` processes that
are SIGKILLed at random, with the broker paused (SIGSTOP/SIGCONT) now and then and 0.5% garbage input.

At the end it drains, then counts: records in, out, dead-lettered, lost (must be 0), and the RSS of the
`stylus run` processes over time (JSON + an optional PNG).

    .venv/bin/python -m bench.soak --duration 300 --plot docs/soak-rss.png
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer

from stylus.config import load_pipeline
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.offsets import end_offsets, topic_partitions
from stylus.kafka.reader import read_topic
from tests.support.proc import rss_mb

ROOT = Path(__file__).resolve().parents[1]
GARBAGE_EVERY = 200  # 0.5% of the records are not JSON


STALL_SECONDS = 60  # no new output for this long while input flows: the instances are restarted


def output_end(bootstrap: str) -> int:
    """Records in the output topic so far (progress)."""
    try:
        return sum(high for _, high in end_offsets(bootstrap, topic_partitions(bootstrap, ["out"]), timeout=5).values())
    except Exception:  # the broker is paused: no reading
        return -1


class Load(threading.Thread):
    """Produces ids 0, 1, 2, ... at `rate` per second; every GARBAGE_EVERY-th is undecodable."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "compression.type": "lz4", "partitioner": "murmur2_random"})
        self.topic, self.rate = topic, rate
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                i = self.sent
                value = (b"\xffgarbage#%d" % i) if i % GARBAGE_EVERY == GARBAGE_EVERY - 1 else \
                    json.dumps({"id": i}).encode()
                try:
                    self.producer.produce(self.topic, value, f"k{i % 97}".encode())
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                self.sent += 1
            self.producer.poll(0.02)
        assert self.producer.flush(120) == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1800, help="seconds of load (default 30 min)")
    parser.add_argument("--rate", type=int, default=1000, help="records per second")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=30, help="mean seconds between SIGKILLs")
    parser.add_argument("--pause-every", type=float, default=90, help="mean seconds between broker pauses")
    parser.add_argument("--json", default=None, help="write the report here too")
    parser.add_argument("--plot", default=None, help="PNG of RSS over time")
    args = parser.parse_args()
    rng = random.Random(9)
    work = Path(tempfile.mkdtemp(prefix="stylus-soak-"))
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap
        doc = {"pipeline": "soak", "topics": {"in": {"partitions": 4}, "out": {"partitions": 4}},
               "processors": {"p": {"class": "tests.apps.faulty:BigState", "config": {"size": 50},
                                    "inputs": ["in"], "outputs": ["out"], "checkpoint": {"interval": "1s"},
                                    "semantics": {"state": "exactly_once", "output": "at_least_once"},
                                    "state": {"dir": str(work / "state")},
                                    # 1.8M records: the embedded broker's fetches of big partitions take
                                    # longer than the 20 ms default wait (docs/faults.md)
                                    "kafka": {"consumer": {"fetch.wait.max.ms": 500}}}}}
        path = work / "soak.yaml"
        path.write_text(yaml.safe_dump(doc))
        pipeline = load_pipeline(path)
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
        env = dict(os.environ, STYLUS_BOOTSTRAP_SERVERS=bootstrap, PYTHONPATH=str(ROOT), STYLUS_LOG_LEVEL="INFO")
        log = open(work / "run.log", "ab")  # noqa: SIM115 - shared by the children for the whole run

        def start(n: int, *extra: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen([sys.executable, "-m", "stylus.cli.main", "run", str(path), "--instance",
                                     f"soak-{n}", *extra], env=env, cwd=ROOT, stdout=log, stderr=log)

        procs = {n: start(n) for n in range(args.instances)}
        load = Load(bootstrap, "in", args.rate)
        load.start()
        began = time.monotonic()
        samples: list[dict[str, Any]] = []
        kills = pauses = stall_restarts = 0
        last_out, last_progress = -1, began
        next_kill = began + rng.expovariate(1 / args.kill_every)
        next_pause = began + rng.expovariate(1 / args.pause_every)
        next_sample = began
        while time.monotonic() - began < args.duration:
            now = time.monotonic()
            if now >= next_sample:
                out = output_end(bootstrap)
                samples.append({"t": round(now - began, 1), "sent": load.sent, "out": out,
                                "rss_mb": {n: rss_mb(p.pid) for n, p in procs.items()}})
                next_sample = now + 5
                if out != last_out:
                    last_out, last_progress = out, now
                elif now - last_progress > STALL_SECONDS:  # what a liveness probe would do: restart them all
                    print(f"no output for {STALL_SECONDS}s at t={now - began:.0f}s: restarting every instance",
                          file=sys.stderr, flush=True)
                    for n, proc in procs.items():
                        proc.send_signal(signal.SIGKILL)
                        proc.wait()
                        procs[n] = start(n)
                    stall_restarts += 1
                    last_progress = now
            if now >= next_kill:
                n = rng.randrange(args.instances)
                procs[n].send_signal(signal.SIGKILL)
                procs[n].wait()
                procs[n] = start(n)
                kills += 1
                next_kill = now + rng.expovariate(1 / args.kill_every)
            if now >= next_pause:
                broker.pause()
                time.sleep(rng.uniform(2, 8))
                broker.resume()
                pauses += 1
                next_pause = time.monotonic() + rng.expovariate(1 / args.pause_every)
            for n, proc in procs.items():  # an instance that exits by itself is a finding: restart and count it
                if proc.poll() is not None:
                    print(f"instance {n} exited with {proc.returncode}; restarting", file=sys.stderr)
                    procs[n] = start(n)
            time.sleep(0.2)
        load.stop.set()
        load.join()
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(120)
        for _attempt in range(4):  # a drain that never gets its partitions is restarted, like a stall
            drain = start(0, "--exit-when-idle", "3")
            try:
                drain.wait(300)
                break
            except subprocess.TimeoutExpired:
                print("drain did not finish in 300 s: restarting it", file=sys.stderr, flush=True)
                drain.kill()
                drain.wait()
                stall_restarts += 1
        sent = load.sent
        out_ids = {json.loads(m.value())["id"] for m in read_topic(bootstrap, "out", timeout=120)}
        out_count = len(read_topic(bootstrap, "out", timeout=120))
        dead = {int(m.value().rsplit(b"#", 1)[1]) for m in read_topic(bootstrap, pipeline.dlq_topic("p"), timeout=60)}
        lost = sorted(set(range(sent)) - out_ids - dead)
        rss = [max(v for v in s["rss_mb"].values() if v is not None) for s in samples
               if any(v is not None for v in s["rss_mb"].values())]
        report = {
            "duration_s": args.duration, "rate": args.rate, "instances": args.instances,
            "sigkills": kills, "broker_pauses": pauses, "stall_restarts": stall_restarts,
            "records_in": sent, "records_out_distinct": len(out_ids), "records_out_total": out_count,
            "dead_lettered": len(dead), "expected_dead": sum(1 for i in range(sent) if i % GARBAGE_EVERY ==
                                                             GARBAGE_EVERY - 1),
            "lost": len(lost), "lost_first": lost[:10], "drain_exit_code": drain.returncode,
            "rss_mb_first_minute_max": max(rss[:12]) if rss else None,
            "rss_mb_last_minute_max": max(rss[-12:]) if rss else None,
            "samples": samples,
        }
        text = json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2)
        print(text)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        if args.plot:
            plot(samples, args.plot, kills, pauses)
    if lost or drain.returncode:  # the instances' log and state are the evidence: kept
        print(f"kept for inspection: {work} (run.log, state)", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


def plot(samples: list[dict[str, Any]], out: str, kills: int, pauses: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    names = sorted({n for s in samples for n in s["rss_mb"]})
    for n in names:
        points = [(s["t"], s["rss_mb"][n]) for s in samples if s["rss_mb"].get(n) is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], label=f"instance {n}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("RSS (MB)")
    ax.set_title(f"stylus run RSS under soak ({kills} SIGKILLs, {pauses} broker pauses)")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main()
