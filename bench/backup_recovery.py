"""Issue 4: recovery time after a machine loss (restore from the backup + catch-up replay).

    .venv/bin/python -m bench.backup_recovery --records 400000 --gap 200000 --keys 100000

Two `stylus run` instances of WordCount (exactly-once state; `--output` semantics), 4 partitions,
separate state dirs, backups every 2 s to the WebHDFS test server (own process). `--records` are
processed and backed up; then the target refuses while `--gap` more records are processed and committed
(so the backups are that far behind the group, as with a long backup interval); then one instance is
SIGKILLed and its state dir deleted, the target heals, `--after` more records arrive, and the clock runs
until the group has committed every input record (so the lost partitions are restored, replayed and live).
The survivor's log gives the restore and replay times per partition.

`--source changelog` (exactly-once output) keeps no backups: the state has a changelog topic instead
(`state.changelog: true`), and the lost partitions are read back from it, with nothing to replay.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from bench.backup_outage import RemoteHdfs, load_input
from stylus.config.loader import load_pipeline
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.state.backup.repository import PartitionBackups
from stylus.state.backup.target import target_for
from tests.state.helpers import caught_up, wait_for
from tests.support.cli import start_stylus

PARTITIONS = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--gap", type=int, default=200_000, help="records committed after the last backup")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--after", type=int, default=10_000, help="records produced right after the kill")
    parser.add_argument("--output", default="at_least_once", choices=["at_least_once", "exactly_once"])
    parser.add_argument("--source", default="backup", choices=["backup", "changelog"],
                        help="where the lost state comes back from (changelog: exactly-once output only)")
    args = parser.parse_args()
    if args.source == "changelog" and args.output != "exactly_once":
        parser.error("--source changelog needs --output exactly_once")
    changelog = args.source == "changelog"
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        hdfs = RemoteHdfs(tmp / "hdfs")
        bootstrap = broker.bootstrap
        name = f"bench-recovery-{uuid.uuid4().hex[:6]}"
        uri = f"hdfs://127.0.0.1:{hdfs.port}/backups"
        doc = {
            "pipeline": name,
            "topics": {"words": {"partitions": PARTITIONS}, "counts": {"partitions": PARTITIONS}},
            "processors": {"counter": {
                "class": "tests.apps.counting:WordCount", "inputs": ["words"], "outputs": ["counts"],
                "semantics": {"state": "exactly_once", "output": args.output},
                "checkpoint": {"interval": "1s"},
                "state": {"dir": str(tmp / "state-a")} | (
                    {"changelog": True} if changelog else
                    {"backup": {"uri": uri, "interval": "2s", "keep": 3, "timeout": "10s"}}),
            }},
        }
        paths = {}
        for side in "ab":
            doc["processors"]["counter"]["state"]["dir"] = str(tmp / f"state-{side}")  # type: ignore[index]
            paths[side] = tmp / f"{side}.yaml"
            paths[side].write_text(yaml.safe_dump(doc, sort_keys=False))
        pipeline = load_pipeline(paths["a"])
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
        group = pipeline.group_id("counter")
        done = lambda: caught_up(bootstrap, group, "words", PARTITIONS)  # noqa: E731
        repos = [PartitionBackups(target_for(uri, timeout=10), name, "counter", "words", p) for p in range(PARTITIONS)]
        print(f"loading {args.records:,} records ...", flush=True)
        load_input(bootstrap, "words", args.records, args.keys)
        procs = {side: start_stylus("run", str(paths[side]), "--processor", "counter", bootstrap=bootstrap,
                                    log=tmp / f"{side}.log") for side in "ab"}
        try:
            wait_for(done, 300, "phase 1 to be committed", interval=1.0)
            if not changelog:
                wait_for(lambda: sum((m.offset or 0) if (m := r.newest()) else 0 for r in repos) == args.records,
                         60, "backups of phase 1", interval=1.0)
                hdfs.send("refuse", 503)
            print(f"{args.records:,} committed{'' if changelog else ' and backed up; the target refuses'}; loading "
                  f"the gap of {args.gap:,} ...", flush=True)
            load_input(bootstrap, "words", args.gap, args.keys)
            wait_for(done, 300, "the gap to be committed", interval=1.0)
            state_a = tmp / "state-a" / name / "counter"
            lost = sorted(p.name for p in state_a.iterdir() if (p / "CURRENT").exists())
            load = os.getloadavg()
            procs["a"].send_signal(signal.SIGKILL)
            procs["a"].wait(10)
            killed = time.monotonic()
            shutil.rmtree(tmp / "state-a")
            hdfs.send("heal")
            load_input(bootstrap, "words", args.after, args.keys)  # the lost partitions must move on too
            wait_for(done, 600, "the survivor to catch up", interval=0.2)
            recovery = time.monotonic() - killed
            print(f"SIGKILL -> all input committed again: {recovery:.1f} s (lost partitions {', '.join(lost)}; "
                  f"load average at the kill {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}, after "
                  f"{os.getloadavg()[0]:.1f})")
            procs["b"].send_signal(signal.SIGTERM)
            procs["b"].wait(60)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            hdfs.close()
        log_b = (tmp / "b.log").read_text()
        for line in log_b.splitlines():
            if re.search(r"restoring backup|restored \S+ (to offset|from)|replayed offsets|assigned", line):
                print("  b:", line.split(" ", 3)[-1][:200])


if __name__ == "__main__":
    main()
