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
from stylus.kafka.reader import read_topic

ROOT = Path(__file__).resolve().parents[1]
GARBAGE_EVERY = 200  # 0.5% of the records are not JSON


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


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
                                    "state": {"dir": str(work / "state")}}}}
        path = work / "soak.yaml"
        path.write_text(yaml.safe_dump(doc))
        pipeline = load_pipeline(path)
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
        env = dict(os.environ, STYLUS_BOOTSTRAP_SERVERS=bootstrap, PYTHONPATH=str(ROOT), STYLUS_LOG_LEVEL="WARNING")
        log = open(work / "run.log", "ab")  # noqa: SIM115 - shared by the children for the whole run

        def start(n: int, *extra: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen([sys.executable, "-m", "stylus.cli.main", "run", str(path), "--instance",
                                     f"soak-{n}", *extra], env=env, cwd=ROOT, stdout=log, stderr=log)

        procs = {n: start(n) for n in range(args.instances)}
        load = Load(bootstrap, "in", args.rate)
        load.start()
        began = time.monotonic()
        samples: list[dict[str, Any]] = []
        kills = pauses = 0
        next_kill = began + rng.expovariate(1 / args.kill_every)
        next_pause = began + rng.expovariate(1 / args.pause_every)
        next_sample = began
        while time.monotonic() - began < args.duration:
            now = time.monotonic()
            if now >= next_sample:
                samples.append({"t": round(now - began, 1), "sent": load.sent,
                                "rss_mb": {n: rss_mb(p.pid) for n, p in procs.items()}})
                next_sample = now + 5
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
        drain = start(0, "--exit-when-idle", "3")
        drain.wait(600)
        sent = load.sent
        out_ids = {json.loads(m.value())["id"] for m in read_topic(bootstrap, "out", timeout=120)}
        out_count = len(read_topic(bootstrap, "out", timeout=120))
        dead = {int(m.value().rsplit(b"#", 1)[1]) for m in read_topic(bootstrap, pipeline.dlq_topic("p"), timeout=60)}
        lost = sorted(set(range(sent)) - out_ids - dead)
        rss = [max(v for v in s["rss_mb"].values() if v is not None) for s in samples
               if any(v is not None for v in s["rss_mb"].values())]
        report = {
            "duration_s": args.duration, "rate": args.rate, "instances": args.instances,
            "sigkills": kills, "broker_pauses": pauses,
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
