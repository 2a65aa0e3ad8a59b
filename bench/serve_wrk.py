"""`stylus serve` under `wrk`: requests/s and latency against one instance, and through forwarding.

A partitioned table of `--keys` keys (4 partitions). Scenario `local`: one instance, which holds every
partition, asked for random keys. Scenario `forwarded`: a second instance joins; the first is asked only for
keys the second owns, so every request is forwarded. Each scenario runs `wrk` twice: paced at `--rate`
requests/s, then unpaced (the most it does over `--connections`).

wrk has no fixed-rate mode (wrk2 is not packaged), so the paced runs give it a schedule in its Lua script:
request n of the run is due at start + n/rate, each connection asks `delay()` for the wait until the next
due slot once its previous answer has come (wrk's delays are whole milliseconds: about rate/1000 requests
leave together each millisecond). With enough connections (`--paced-connections`, default 100) a slow answer
does not hold the schedule back; if every connection is busy when a slot falls due, the schedule restarts
from that moment instead of sending a catch-up burst, so the achieved rate printed is what was sent.
Each scenario starts with a few seconds of unpaced requests, not measured. Besides wrk's figures, each run
prints the CPU time each serving process spent per request (steadier than latency on a machine shared with
other work) and the 1-minute load average; `--nice N` runs the servers and wrk ahead of the other work.

    .venv/bin/python -m bench.serve_wrk --keys 100000 --duration 10
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import requests
import yaml

from stylus.config.model import TopicSpec
from stylus.kafka.admin import create_topics
from stylus.kafka.broker import EmbeddedBroker
from tests.support.chaos import wait_until
from tests.support.net import closed_port
from tests.tables.helpers import produce_rows

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 3  # seconds of unpaced requests before a scenario's runs (caches, the forwarding connections)
LUA = """
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } stylus_timespec;
int clock_gettime(int clock, stylus_timespec *now);
]]
local clock = ffi.new("stylus_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, clock)  -- CLOCK_MONOTONIC
  return tonumber(clock.tv_sec) * 1000 + tonumber(clock.tv_nsec) / 1e6
end
local paths = {}
for line in io.lines("%s") do paths[#paths + 1] = line end
local interval = %s  -- ms between two requests of the run; 0: unpaced
local due = nil
request = function()
  return wrk.format("GET", paths[math.random(#paths)])
end
if interval > 0 then
  delay = function()
    local now = now_ms()
    if due == nil or due < now - 1 then due = now end  -- behind: no catch-up burst
    local wait = due - now
    due = due + interval
    return math.floor(wait + 0.5)
  end
end
"""


def _serve(path: Path, bootstrap: str, port: int, directory: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, STYLUS_BOOTSTRAP_SERVERS=bootstrap, PYTHONPATH=str(ROOT))
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "stylus", "serve", str(path), "--port", str(port),
                                 "--dir", str(directory)], env=env, stdout=out, stderr=subprocess.STDOUT)


def _wrk(url: str, paths: list[str], work: Path, *, connections: int, duration: int, rate: int | None) -> str:
    listing = work / f"paths-{uuid.uuid4().hex[:6]}.txt"
    listing.write_text("\n".join(paths) + "\n")
    script = work / f"{listing.stem}.lua"
    script.write_text(LUA % (listing, 0 if rate is None else 1000 / rate))  # one wrk thread: one schedule
    result = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration}s", "--latency", "-s",
                             str(script), url], capture_output=True, text=True, check=True)
    return result.stdout


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _measure(label: str, url: str, paths: list[str], work: Path, procs: list[subprocess.Popen[bytes]], *,
             connections: int, duration: int, rate: int | None) -> None:
    before = [_cpu_seconds(p.pid) for p in procs]
    output = _wrk(url, paths, work, connections=connections, duration=duration, rate=rate)
    spent = [_cpu_seconds(p.pid) - b for p, b in zip(procs, before, strict=True)]
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    requests_done = (float(rps.group(1)) if rps else 0) * duration or 1
    cpu = " + ".join(f"{s * 1e6 / requests_done:.0f}" for s in spent)
    print(f"{label:<19}: {_figures(output)}; CPU {cpu} us/request ({'A + B' if len(procs) > 1 else 'A'}); "
          f"load {os.getloadavg()[0]:.1f}", flush=True)


def _figures(output: str) -> str:
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    pcts = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", output, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return (f"{float(rps.group(1)) if rps else 0:,.0f} req/s, p50 {pcts.get('50')}, p90 {pcts.get('90')}, "
            f"p99 {pcts.get('99')}, non-2xx {errors.group(1) if errors else 0}")


def run(bootstrap: str, keys: int, duration: int, rate: int, connections: int, paced_connections: int,
        repeat: int = 1) -> None:
    work = Path(tempfile.mkdtemp(prefix="stylus-bench-serve-"))
    name = f"bench-serve-{uuid.uuid4().hex[:6]}"
    doc = {"pipeline": name, "kafka": {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500}},
           "topics": {"in": {"partitions": 4}, f"{name}-dims": {"partitions": 4}},
           "tables": {"dims": {"topic": f"{name}-dims", "placement": "partitioned"}},
           "processors": {"p": {"class": "tests.tables.apps:Enricher", "inputs": ["in"]}}}
    path = work / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    table = {f"k{n}": {"name": f"row-{n}", "n": n} for n in range(keys)}
    create_topics(bootstrap, {f"{name}-dims": TopicSpec(partitions=4)})
    produce_rows(bootstrap, f"{name}-dims", table)
    ports = [closed_port(), closed_port()]
    procs = [_serve(path, bootstrap, ports[0], work / "a", work / "a.log")]
    session = requests.Session()
    a = f"http://127.0.0.1:{ports[0]}"
    try:
        wait_until(lambda: "serve: holding dims" in (work / "a.log").read_text(), 120, "instance A")
        sample = random.Random(1).sample(sorted(table), min(keys, 20_000))
        for key in sample[:200]:
            answer = session.get(f"{a}/tables/dims/{key}")
            assert answer.status_code == 200 and answer.json() == table[key], (key, answer.status_code, answer.text)
        paths = [f"/tables/dims/{k}" for k in sample]
        print(f"{keys:,} keys, {paced_connections} connections paced at {rate:,} req/s, {connections} unpaced, "
              f"{duration}s per run, nice {os.nice(0)}; load {os.getloadavg()[0]:.1f}", flush=True)
        _wrk(a, paths, work, connections=connections, duration=WARM_UP, rate=None)
        for _ in range(repeat):
            _measure("local, paced", a, paths, work, procs, connections=paced_connections, duration=duration,
                     rate=rate)
            _measure("local, unpaced", a, paths, work, procs, connections=connections, duration=duration,
                     rate=None)
        procs.append(_serve(path, bootstrap, ports[1], work / "b", work / "b.log"))
        b_address = f"127.0.0.1:{ports[1]}"
        wait_until(lambda: "serve: holding dims" in (work / "b.log").read_text(), 120, "instance B")

        def forwarded_keys() -> list[str]:
            found = []
            for key in sample[:4000]:
                answer = session.get(f"{a}/tables/dims/{key}")
                if answer.status_code != 200:
                    return []
                if answer.headers.get("X-Stylus-Served-By") == b_address:
                    found.append(key)
            return found

        remote: list[str] = []

        def settled() -> bool:
            remote[:] = forwarded_keys()
            return bool(remote)

        wait_until(settled, 60, "both instances serving")
        paths = [f"/tables/dims/{k}" for k in remote]
        print(f"forwarded ({len(remote):,} keys owned by B, asked of A)", flush=True)
        _wrk(a, paths, work, connections=paced_connections, duration=WARM_UP, rate=None)
        for _ in range(repeat):
            _measure("forwarded, paced", a, paths, work, procs, connections=paced_connections,
                     duration=duration, rate=rate)
            _measure("forwarded, unpaced", a, paths, work, procs, connections=connections, duration=duration,
                     rate=None)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rate", type=int, default=5000, help="requests/s the paced runs aim at")
    parser.add_argument("--connections", type=int, default=10, help="connections of the unpaced runs")
    parser.add_argument("--paced-connections", type=int, default=100, help="connections of the paced runs")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each kind per scenario")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--nice", type=int, default=0, metavar="N",
                        help="run N nice steps ahead of the machine's other processes (root only), and so the "
                             "servers and wrk started from here: the latency when they do not queue for a CPU")
    args = parser.parse_args()
    if args.nice:
        os.nice(-args.nice)
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    if args.bootstrap:
        run(args.bootstrap, args.keys, args.duration, args.rate, args.connections, args.paced_connections,
            args.repeat)
        return
    with EmbeddedBroker() as broker:
        run(broker.bootstrap, args.keys, args.duration, args.rate, args.connections, args.paced_connections,
            args.repeat)


if __name__ == "__main__":
    main()
