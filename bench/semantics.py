"""Issue 3 benchmarks: the Counter Node under each semantics pair, and the paper's Figure 9 experiment.

    .venv/bin/python -m bench.semantics --records 400000 --heavy-records 60000 --repeat 3

1. Counter Node (processors/counter.py) records/s under each (state, output) pair; the cost of
   exactly-once against at-least-once. `--changelog` adds exactly-once with `state.changelog: true` (every
   checkpoint's state changes also produced to a compacted topic in its transaction); `--partitions` sets the
   input's partitions, all held by the one worker (its transaction carries all of them).
2. Figure 9: a deserialisation-heavy at-most-once processor (4 KB JSON values, checkpoint every 20 ms)
   with checkpoints overlapped with processing (`checkpoint.overlap: true`: the worker goes on consuming,
   decoding and processing while the checkpoint's commit, state write, output produce and flush are in
   flight) against stop-and-checkpoint (`overlap: false`: input waits in the consumer's buffer until the
   checkpoint is done, then is processed: the Swift way). Batches are small enough (`--fig9-batch`) that a
   checkpoint really is taken every `--fig9-interval`; with the default 2,000-record batches a batch of
   4 KB records takes ~80 ms and the interval would silently be 4x longer.
   `--only figure9 --broker-latency MS` runs it against a broker MS ms away (one way): every client
   connection goes through bench/latency_proxy.py, the paper's remote-bus setting where a checkpoint's
   round trips take about as long as the processing between checkpoints (`--fig9-interval auto`).
   `--executable` adds Swift's side (issue 32): the same work done by a real program over pipes, a `command:`
   processor (bench/fig9_worker.py, run by this interpreter: it decodes with orjson like the json serde)
   with Swift's checkpoint knob, `checkpoint.records` (`--fig9-exe-records`; auto: as many records per
   checkpoint as the first stop-and-checkpoint run took). The ExecutableWorker commits on its one thread
   (flush the outputs, then commit the offsets) and meanwhile neither writes input lines nor reads answers:
   stop-and-checkpoint, the program working on only what its pipes hold. The bench measures that after each
   commit (answer lines waiting on the program's stdout; whether its stdin pipe ran dry).
Each configuration runs in a fresh Worker on the same pre-loaded input; the repeats are interleaved
(every configuration once, then again) so that a neighbour's load spreads over all of them. Reported:
best and median records/s, CPU time of this process per record (median; it includes the librdkafka
threads, not the broker), the worker's own checkpoint timings (count, mean, p50/p90 as histogram bucket
bounds) and the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import statistics
import struct
import sys
import tempfile
import termios
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from bench.common import time_worker
from bench.latency_proxy import LatencyProxy, proxied_broker
from stylus import Context, Processor, Record
from stylus.config import parse_pipeline
from stylus.config.model import FIGURE8_PAIRS, TopicSpec
from stylus.kafka.admin import create_topics, delete_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.settings import PRODUCER_DEFAULTS
from stylus.runtime.executable import ExecutableWorker, Program
from stylus.runtime.stats import Timing

PARTITIONS = 4
PAIRS = list(FIGURE8_PAIRS)


class HeavyDecode(Processor):
    """Figure 9's processor: most of its time goes to decoding a large value (done by the JSON serde)."""

    def process(self, record: Record, ctx: Context) -> None:
        doc = record.value
        total = sum(item["v"] for item in doc["items"])
        key = record.key or ""
        n = (ctx.state.get(key) or 0) + 1
        ctx.state[key] = n
        ctx.emit({"id": doc["id"], "total": total, "n": n}, key=record.key)


def load(bootstrap: str, topic: str, records: int, heavy: bool, keys: int = 1000) -> None:
    producer = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(3)
    base = 1_700_000_000_000
    for i in range(records):
        if heavy:
            value = {"id": i, "items": [{"k": f"item-{j}", "v": rng.random(), "tags": ["a", "b", "c"]}
                                        for j in range(60)]}
        else:
            value = {"id": i}
        while True:
            try:
                producer.produce(topic, orjson.dumps(value), f"k{rng.randrange(keys)}".encode(),
                                 timestamp=base + i)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


@dataclass(frozen=True)
class Run:
    """One timed worker run."""

    rate: float  # records/s (bench.common.time_worker)
    cpu_us: float  # CPU time of this process per record, whole run
    checkpoints: int
    checkpoint_seconds: float  # all checkpoints together (overlapped ones ran beside processing)
    checkpoint_p50: float  # histogram bucket bound (seconds) holding the median checkpoint
    checkpoint_p90: float
    load: float  # 1-minute load average at the end
    batch_seconds: float = 0.0  # the worker's time in its engine (batches processed), whole run
    proxy_cpu_us: float = 0.0  # CPU time of the latency proxy's process per record (--broker-latency)
    # cpu_us split into user and kernel time. The kernel part is mostly page faults (glibc and pymalloc give
    # freed memory back and touch it again; ~2-4 us each in this VM): 0.2-4.9 s per 1M-record run, the least
    # steady part of the run (BENCHMARKS.md, issue 3), so user time compares configurations more steadily.
    user_us: float = 0.0
    sys_us: float = 0.0
    # --executable: the program's CPU per record (its own process, startup included), and what it did during
    # the framework's commits (CommitProbe)
    program_cpu_us: float = 0.0
    commit_answers: float = 0.0  # answer lines waiting on its stdout after a commit (mean)
    commit_starved: float = 0.0  # share of commits after which its stdin pipe was empty


def _pipe_bytes(pipe: Any) -> int:
    """Bytes in a pipe (either end; Linux FIONREAD)."""
    return int(struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0" * 4))[0])


class CommitProbe:
    """What a command processor's program does while its ExecutableWorker commits. After each commit it takes
    the answer lines waiting on the program's stdout (written during the commit, or just before it: the loop
    reads before committing) into the worker's buffer, counts them, and notes whether the program's stdin
    pipe was empty (it had run out of input before the commit ended)."""

    def __init__(self) -> None:
        self.commits = self.answers = self.starved = 0

    def attach(self, worker: ExecutableWorker) -> None:
        commit = worker._commit

        def probed(only: set[tuple[str, int]] | None = None) -> None:
            before = worker.checkpoints
            commit(only)
            if worker.checkpoints > before and worker.program is not None and only is None:
                self.commits += 1
                self.answers += self._take_answers(worker.program)
                self.starved += _pipe_bytes(worker.program.stdin) == 0

        worker._commit = probed  # type: ignore[method-assign]

    @staticmethod
    def _take_answers(program: Program) -> int:
        try:
            chunk = os.read(program.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return 0
        if not chunk:
            program.eof = True
            return 0
        program.answers += chunk  # the worker splits and handles them as if it had read them itself
        return chunk.count(b"\n")


def _quantile(timing: Timing, q: float) -> float:
    """The bucket bound at quantile q (an upper bound of the true quantile)."""
    total, running = timing.count, 0
    for bound, n in zip((*timing.bounds, float("inf")), timing.counts, strict=True):
        running += n
        if total and running >= q * total:
            return bound
    return 0.0


def run_worker(bootstrap: str, topic_in: str, records: int, cls: str, state: str | None, output: str,
               interval: str, overlap: bool, state_dir: str, batch_size: int | None = None,
               proxy: LatencyProxy | None = None, changelog: bool = False, partitions: int = PARTITIONS) -> Run:
    semantics = {"output": output} | ({"state": state} if state else {})
    return _timed_run(bootstrap, topic_in, records, {
        "class": cls, "config": {"window": "1h"}, "semantics": semantics,
        "checkpoint": {"interval": interval, "overlap": overlap},
        "state": {"dir": state_dir} | ({"changelog": True} if changelog else {}), "on_error": "skip"}
        | ({"batch_size": batch_size} if batch_size else {}), proxy, partitions)


FIG9_WORKER = Path(__file__).resolve().with_name("fig9_worker.py")


def run_executable(bootstrap: str, topic_in: str, records: int, checkpoint: dict[str, object], batch_size: int,
                   proxy: LatencyProxy | None = None) -> Run:
    """Figure 9's work as a Swift-style `command:` processor, bench/fig9_worker.py over pipes."""
    probe = CommitProbe()
    run = _timed_run(bootstrap, topic_in, records, {
        "command": [sys.executable, str(FIG9_WORKER)], "checkpoint": checkpoint, "batch_size": batch_size,
        "on_error": "skip"}, proxy, PARTITIONS, probe.attach)
    return Run(**asdict(run) | {"commit_answers": probe.answers / max(probe.commits, 1),
                                "commit_starved": probe.starved / max(probe.commits, 1)})


def _timed_run(bootstrap: str, topic_in: str, records: int, processor: dict[str, object],
               proxy: LatencyProxy | None, partitions: int,
               before: Callable[[Any], None] | None = None) -> Run:
    """Time processor `p` (its spec without inputs and outputs) in a fresh pipeline reading `topic_in`."""
    topic_out = f"sem-out-{uuid.uuid4().hex[:6]}"
    pipeline = parse_pipeline(json.dumps({
        "pipeline": f"sem-{uuid.uuid4().hex[:6]}",
        "kafka": {"bootstrap.servers": bootstrap},
        "topics": {topic_in: {"partitions": partitions}, topic_out: {"partitions": partitions}},
        "processors": {"p": {"inputs": [topic_in], "outputs": [topic_out]} | processor},
    }))
    made = {t: spec for t, spec in pipeline_topics(pipeline).items() if t != topic_in}  # output (and changelog)
    create_topics(bootstrap, made)
    seen: list[Any] = []
    cpu, proxy_cpu, times = time.process_time(), proxy.cpu_seconds() if proxy else 0.0, os.times()
    rate = time_worker(pipeline, "p", bootstrap, records, after=seen.append, before=before)
    cpu, proxy_cpu = time.process_time() - cpu, (proxy.cpu_seconds() - proxy_cpu if proxy else 0.0)
    ended = os.times()  # a command's program has exited and been waited for: its CPU is the children's
    program_cpu = (ended.children_user + ended.children_system - times.children_user - times.children_system
                   if "command" in processor else 0.0)
    delete_topics(bootstrap, list(made))
    timing = seen[0].stats.checkpoint
    return Run(rate, cpu / records * 1e6, timing.count, timing.total, _quantile(timing, 0.5),
               _quantile(timing, 0.9), os.getloadavg()[0], seen[0].stats.batch.total, proxy_cpu / records * 1e6,
               (ended.user - times.user) / records * 1e6, (ended.system - times.system) / records * 1e6,
               program_cpu / records * 1e6)


def _config_name(state: str | None, output: str, changelog: bool) -> str:
    return f"counter {state}/{output}" + (" changelog" if changelog else "")


def _median_us(runs: list[Run], kind: str) -> float:
    """Median CPU per record of `kind`: cpu (user + system), user, sys or program_cpu (a command's program)."""
    return statistics.median(getattr(r, f"{kind}_us") for r in runs)


def _summary(name: str, runs: list[Run]) -> dict[str, object]:
    rates = [r.rate for r in runs]
    best = max(runs, key=lambda r: r.rate)
    print(f"  {name:40} best {best.rate:>9,.0f}/s  median {statistics.median(rates):>9,.0f}/s  "
          f"cpu {_median_us(runs, 'cpu'):5.1f} us/rec (user {_median_us(runs, 'user'):.1f}, "
          f"system {_median_us(runs, 'sys'):.1f})"
          + (f" + program {_median_us(runs, 'program_cpu'):.1f}" if best.program_cpu_us else "")
          + f"  checkpoints {best.checkpoints} "
          f"(mean {1000 * best.checkpoint_seconds / max(best.checkpoints, 1):.1f} ms, "
          f"p50 <= {1000 * best.checkpoint_p50:g} ms, p90 <= {1000 * best.checkpoint_p90:g} ms)  "
          f"load {', '.join(f'{r.load:.1f}' for r in runs)}", flush=True)
    return {"best": best.rate, "median": statistics.median(rates), "runs": [asdict(r) for r in runs]}


def fig9_interval(latency_ms: float) -> str:
    """The checkpoint interval for Figure 9 (`--fig9-interval auto`). The interval runs from one checkpoint's
    start to the next, so stop-and-checkpoint processes for interval - C between checkpoints of length C;
    the paper's setting, checkpoint I/O as long as that processing, needs interval = 2 C. Measured through
    the proxy at 2-20 ms, C ~ 4 ms + 4.5 x the one-way delay (offsets commit, then output produce and
    flush: two round trips and local work), hence 8 ms + 9 x the delay. The bench prints the ratio it got."""
    return "20ms" if not latency_ms else f"{round(8 + 9 * latency_ms)}ms"


def _own_bound(stop: list[Run], records: int) -> float:
    """What hiding the checkpoints entirely could give: stop-and-checkpoint's time over its time outside
    checkpoints (median over the runs)."""
    return statistics.median(1 / (1 - min(0.99, r.checkpoint_seconds * r.rate / records)) for r in stop)


def _checkpoint_split(stop: list[Run], records: int) -> tuple[float, float]:
    """C and P of stop-and-checkpoint runs (medians, ms): checkpoint I/O per checkpoint, and the time outside
    checkpoints between two of them (processing)."""
    io = statistics.median(1000 * r.checkpoint_seconds / max(r.checkpoints, 1) for r in stop)
    work = statistics.median(1000 * (records / r.rate - r.checkpoint_seconds) / max(r.checkpoints, 1) for r in stop)
    return io, work


def _figure9_executable(exe: list[Run], every: int, over: dict[str, Any], stop: dict[str, Any],
                        records: int) -> dict[str, object]:
    """Swift's side of Figure 9: the executable against the overlapped (and the stop-and-checkpoint) worker."""
    swift = _summary(f"figure 9: executable, every {every:,} records", exe)
    for kind in ("best", "median"):
        print(f"overlapped checkpoints: {over[kind] / swift[kind]:.2f}x the executable; stop-and-checkpoint "
              f"{stop[kind] / swift[kind]:.2f}x ({kind})")
    io, work = _checkpoint_split(exe, records)
    bound = (io + work) / max(io, work)
    print(f"executable: {io:.1f} ms of commit per {work:.1f} ms outside commits (medians): (P + C) / max(P, C) = "
          f"{bound:.2f}x; its own bound (P + C) / P = {_own_bound(exe, records):.2f}x")
    answers = statistics.median(r.commit_answers for r in exe)
    starved = statistics.median(r.commit_starved for r in exe)
    print(f"during a commit the program answered {answers:.1f} records (mean per commit, median of the runs) "
          f"against {every * io / max(work, 1e-9):,.0f} at its pace outside commits; its stdin pipe was empty "
          f"after {starved:.0%} of the commits")
    return {"figure 9: executable": swift, "figure 9: executable checkpoint records": every,
            "figure 9: executable checkpoint ms": io, "figure 9: executable processing ms": work,
            "figure 9: executable bound": bound, "figure 9: executable answers per commit": answers,
            "figure 9: executable stdin empty after commits": starved}


def figure9(bootstrap: str, topic: str, tmp: str, args: argparse.Namespace,
            proxy: LatencyProxy | None) -> dict[str, object]:
    """Overlapped checkpoints against stop-and-checkpoint, interleaved, on the same pre-loaded input."""
    interval = fig9_interval(args.broker_latency) if args.fig9_interval == "auto" else args.fig9_interval
    where = f"the broker {args.broker_latency:g} ms away (one way, latency proxy)" if proxy else "the local broker"
    print(f"figure 9: checkpoint every {interval}, batches of {args.fig9_batch}, {where}", flush=True)
    print(f"loading {args.heavy_records:,} 4 KB records ...", flush=True)
    load(bootstrap, topic, args.heavy_records, heavy=True)
    fig: dict[bool, list[Run]] = {True: [], False: []}
    exe: list[Run] = []  # --executable: Swift's side
    exe_records = None if args.fig9_exe_records == "auto" else int(args.fig9_exe_records)
    for _ in range(args.repeat):
        for overlap in (True, False):
            fig[overlap].append(run_worker(
                bootstrap, topic, args.heavy_records, "bench.semantics:HeavyDecode", "at_most_once",
                "at_most_once", interval, overlap, f"{tmp}/{uuid.uuid4().hex}", args.fig9_batch, proxy))
        if args.executable:
            if exe_records is None:  # auto: as many records per checkpoint as stop-and-checkpoint's first run
                exe_records = max(1, round(args.heavy_records / max(fig[False][0].checkpoints, 1)))
                print(f"executable: checkpoint every {exe_records:,} records (`checkpoint.records`)", flush=True)
            # Swift's only knobs are records and bytes: the interval is long enough never to come first
            exe.append(run_executable(bootstrap, topic, args.heavy_records, {"interval": "1h", "records": exe_records},
                                      args.fig9_batch, proxy))
    over = _summary("figure 9: overlapped checkpoints", fig[True])
    stop = _summary("figure 9: stop-and-checkpoint", fig[False])
    results: dict[str, object] = {"figure 9: overlap=True": over, "figure 9: overlap=False": stop,
                                  "figure 9: interval": interval, "figure 9: broker latency ms": args.broker_latency}
    for kind in ("best", "median"):
        print(f"overlapped checkpoints: {over[kind] / stop[kind]:.2f}x stop-and-checkpoint ({kind})")  # type: ignore[operator]
    # what hiding the checkpoint entirely could give: stop-and-checkpoint's time without its checkpoints
    bound = _own_bound(fig[False], args.heavy_records)
    print(f"upper bound of overlapping (stop-and-checkpoint time / its time outside checkpoints): {bound:.2f}x")
    # the paper's setting: checkpoint I/O about as long as the processing between two checkpoints
    io, work = _checkpoint_split(fig[False], args.heavy_records)
    engine = statistics.median(1000 * r.batch_seconds / max(r.checkpoints, 1) for r in fig[False])
    print(f"stop-and-checkpoint: {io:.1f} ms of checkpoint I/O per {work:.1f} ms outside checkpoints "
          f"({engine:.1f} ms of it in the engine) (medians); (P + C) / max(P, C) = "
          f"{(io + work) / max(io, work):.2f}x")
    results |= {"figure 9: bound": bound, "figure 9: checkpoint ms": io, "figure 9: processing ms": work}
    if exe:
        results |= _figure9_executable(exe, exe_records or 0, over, stop, args.heavy_records)
    if proxy is not None:
        runs = fig[True] + fig[False] + exe
        us = statistics.median(r.proxy_cpu_us for r in runs)
        share = statistics.median(r.proxy_cpu_us * 1e-6 * r.rate for r in runs)
        print(f"latency proxy CPU: {us:.1f} us/record, {share:.0%} of a core (medians)")
        results["figure 9: proxy cpu us/record"] = us
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--heavy-records", type=int, default=60_000)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repeats of every configuration")
    parser.add_argument("--only", choices=("all", "counter", "figure9"), default="all")
    parser.add_argument("--pairs", default="", help="counter pairs, e.g. at_least_once/at_least_once,exactly_once/"
                        "exactly_once (default: all five)")
    parser.add_argument("--changelog", action="store_true", help="also run exactly_once/exactly_once with "
                        "`state.changelog: true`: what writing the changelog in the transaction costs")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="input and output partitions (counter)")
    parser.add_argument("--keys", type=int, default=1000, help="distinct keys of the counter's input (its state)")
    parser.add_argument("--fig9-interval", default="auto", help="checkpoint interval (Figure 9); auto: 20ms on "
                        "the local broker, else long enough for checkpoint I/O ~ processing between checkpoints")
    parser.add_argument("--broker-latency", type=float, default=0.0, metavar="MS",
                        help="Figure 9 only: one-way delay (ms) of a proxy between every client and the broker "
                        "(bench/latency_proxy.py), a remote cluster's round trips")
    parser.add_argument("--fig9-batch", type=int, default=100, help="records per consumed batch (Figure 9)")
    parser.add_argument("--executable", action="store_true", help="Figure 9 only: also run the work as a "
                        "Swift-style `command:` processor, bench/fig9_worker.py over pipes (issue 32)")
    parser.add_argument("--fig9-exe-records", default="auto", help="the executable's `checkpoint.records`; auto: "
                        "as many records per checkpoint as the first stop-and-checkpoint run")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.executable and args.only != "figure9":
        parser.error("--executable is for --only figure9")
    if args.broker_latency and args.only != "figure9":
        parser.error("--broker-latency is for --only figure9 (the counter figures are the local broker's)")
    pairs = [tuple(p.split("/")) for p in args.pairs.split(",")] if args.pairs else PAIRS
    results: dict[str, object] = {}
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        proxy: LatencyProxy | None = None
        if args.broker_latency:  # every client of this broker talks to it through the latency proxy
            broker, proxy = stack.enter_context(proxied_broker(args.broker_latency))
        else:
            broker = stack.enter_context(EmbeddedBroker())
        bootstrap = broker.bootstrap
        light, heavy = f"sem-in-{uuid.uuid4().hex[:6]}", f"sem-heavy-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, {light: TopicSpec(partitions=args.partitions),
                                  heavy: TopicSpec(partitions=PARTITIONS)})
        if args.only in ("all", "counter"):
            print(f"loading {args.records:,} counter records ...", flush=True)
            load(bootstrap, light, args.records, heavy=False, keys=args.keys)
            configs = [(state, output, False) for state, output in pairs]
            if args.changelog:
                configs.append(("exactly_once", "exactly_once", True))
            runs: dict[str, list[Run]] = {_config_name(*c): [] for c in configs}
            for _ in range(args.repeat):
                for state, output, changelog in configs:
                    runs[_config_name(state, output, changelog)].append(run_worker(
                        bootstrap, light, args.records, "processors.counter:CounterNode", state, output, "2s",
                        True, f"{tmp}/{uuid.uuid4().hex}", changelog=changelog, partitions=args.partitions))
            summaries = {name: _summary(name, r) for name, r in runs.items()}
            results |= summaries
            alo = "counter at_least_once/at_least_once"
            for eo in ("counter exactly_once/exactly_once", _config_name("exactly_once", "exactly_once", True)):
                if eo in summaries and alo in summaries:
                    label = "exactly-once" + (" with a changelog" if "changelog" in eo else "")
                    for kind in ("best", "median"):
                        cost = 1 - summaries[eo][kind] / summaries[alo][kind]  # type: ignore[operator]
                        print(f"{label} costs {cost:.1%} against at-least-once ({kind})")
                    extra = {kind: _median_us(runs[eo], kind) / _median_us(runs[alo], kind) - 1
                             for kind in ("user", "cpu")}
                    print(f"{label} takes {extra['cpu']:.1%} more CPU per record ({extra['user']:.1%} more user "
                          "CPU; medians)")
        if args.only in ("all", "figure9"):
            results |= figure9(bootstrap, heavy, tmp, args, proxy)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
