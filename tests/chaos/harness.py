"""The chaos matrix: workloads x faults x semantics pairs, each run checked against its pair's promise.

A run is identified by one integer seed: `COMBOS[seed % len(COMBOS)]` is its combination (workload, fault,
pair), and `random.Random(seed)` draws everything else (the input, when each fault strikes, which instance it
hits, how long a zombie sleeps, whether a broker restart is a crash). `STYLUS_CHAOS_SEED=<seed>` replays one
(tests/chaos/test_matrix.py; `python -m bench.chaos --replay <seed>`). Process scheduling is not replayed, so a
replay repeats the faults, not every interleaving. A seed names a combination of the matrix at its commit: the
sixth workload (batch) changed every seed's combination, so a seed quoted from before it replays at that commit.

Workloads (tests/chaos/apps.py):
- counter: a per-key counter (KeyCounter), one instance, 2 input partitions; outputs name their input;
- windows: per-key tumbling sums written with timers (TimerWindowSum), event time, 3 input partitions, input
  disordered by up to 0.5 s, closed at the end by far-future records on every partition;
- pipeline: two stages in one process: a counting relay (event time) -> the timer windows, the second stage's
  watermark carried across the bus by control records;
- monoid: a count monoid with its state in PostgreSQL (EmittingCount), one output per input;
- shared: the counter run as two instances sharing the input partitions;
- batch: the counter as a batch processor (BatchKeyCounter: the same outputs and state), one instance;
- batch_windows: the timer windows as a batch processor (BatchTimerWindowSum: the same state, timers and outputs).
Faults:
- sigkill: SIGKILL at 1-2 random points, restart at once;
- zombie: SIGSTOP; another instance (another machine: its own state directory, state from the backups) takes
  over; SIGCONT after 1-3 s; the old one must find out it lost its partitions;
- machine_loss: SIGKILL, the state directory deleted, restart (state from the backups);
- broker_restart: the broker (this run's own, with a data directory) restarted, cleanly or by SIGKILL;
- proxy_cut: every client connection cut 2-4 times through a TCP proxy (this run's own broker behind it),
  new connections refused for up to 1.5 s each time.
After the input is in and the faults are over, every instance is stopped (SIGTERM) and one last instance
drains the input (`--exit-when-idle`) from the survivor's state directory; then the promises are checked:
- state (the RocksDB state read after the run; the PostgreSQL table for the monoid): exactly-once = the truth,
  at-least-once >= it (nothing lost), at-most-once <= it (nothing counted twice);
- output (a read_committed reader): per input (or per window), exactly-once = one output, at-least-once >= 1,
  at-most-once <= 1; window sums follow the state semantics (of both stages for the pipeline: the first stage's
  output feeds the second stage's state).
  The truth counts every record the input topic holds. A broker restart can leave a record there twice (the
  feeder's idempotent retry written again, `resent_copies`); with event time, the later copy arrives seconds
  behind its neighbours and may rightly be dropped as late, so for those copies either outcome passes (a
  state or window sum between the truth without them and the truth with them).
Anything that keeps the run from ending normally (a drain that fails, input never committed) is an `error`:
not a broken promise by itself, but the test fails on it too.
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
import yaml

from stylus.config import load_pipeline
from stylus.config.model import Pipeline
from stylus.kafka.admin import create_topics, pipeline_topics
from stylus.kafka.broker import EmbeddedBroker, free_port
from stylus.kafka.reader import read_topic
from stylus.monoid.pg import default_table
from tests.runtime.crash_harness import blocked_tail
from tests.support.chaos import (
    Feeder,
    Instance,
    Rec,
    group_offsets,
    produce_now,
    store_states,
    topic_ends,
    wait_until,
)
from tests.support.pg import fresh_database
from tests.support.tcp_proxy import TcpProxy

ALO, AMO, EO = "at_least_once", "at_most_once", "exactly_once"
PAIRS: list[tuple[str, str]] = [(ALO, ALO), (EO, ALO), (AMO, AMO), (EO, AMO), (EO, EO)]
WORKLOADS = ("counter", "windows", "pipeline", "monoid", "shared", "batch", "batch_windows")
WINDOWED = ("windows", "batch_windows")  # one stage of timer windows over 3 input partitions
FAULTS = ("sigkill", "zombie", "machine_loss", "broker_restart", "proxy_cut")
SHORT = {ALO: "alo", AMO: "amo", EO: "eo"}

BASE_TS = 1_700_000_000_000 - 1_700_000_000_000 % 60_000
FAR_FUTURE = BASE_TS + 10**9
SENTINEL_KEY = "zz"
#: windows of the chaos runs: 2 s tumbling, input disordered by up to 0.5 s, 1 s allowed lateness
CHAOS_WINDOW_MS = 2000
DISORDER_MS = 500
#: a killed member leaves the group within 3 s; a rebalance waits for a frozen one at most 15 s
KAFKA = {"consumer": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 15000}}


def pairs_for(workload: str) -> list[tuple[str, str]]:
    """Monoid state in PostgreSQL commits in a database transaction, which cannot also be a Kafka one."""
    return [p for p in PAIRS if not (workload == "monoid" and p[1] == EO)]


@dataclass(frozen=True)
class Combo:
    workload: str
    fault: str
    pair: tuple[str, str]

    @property
    def name(self) -> str:
        return f"{self.workload}/{self.fault}/{SHORT[self.pair[0]]}-{SHORT[self.pair[1]]}"


COMBOS: list[Combo] = [Combo(w, f, p) for w in WORKLOADS for f in FAULTS for p in pairs_for(w)]


def combo_of(seed: int) -> Combo:
    return COMBOS[seed % len(COMBOS)]


def seed_for(combo: Combo, draw: int) -> int:
    """The `draw`-th seed of a combination (draws give different inputs and fault times)."""
    return draw * len(COMBOS) + COMBOS.index(combo)


@dataclass(frozen=True)
class KnownBug:
    """A violation the matrix found, understood and reproduced deterministically (tests/chaos/test_findings.py,
    tests/chaos/test_known_failures.py), still open: the CI sample leaves out the combinations it breaks (their
    test fails instead); the long run keeps running them. Delete the entry once the bug is fixed."""

    name: str
    test: str
    hits: Callable[[Combo], bool]


#: Open bugs a CI sample steers clear of (each with a failing test of its own). None is open now; the ones the
#: matrix found are fixed and their tests in test_findings.py pass: recovery resuming behind saved state,
#: a rebuild firing its old owner's timers again, held at-most-once output of lost partitions released by a
#: later checkpoint, and a restore with at-most-once output firing the old owner's timers again.
KNOWN_BUGS: list[KnownBug] = []


def known_bugs(combo: Combo) -> list[str]:
    return [bug.name for bug in KNOWN_BUGS if bug.hits(combo)]


def ci_sample(seed: int, rounds: int = 2) -> list[int]:
    """A handful of run seeds chosen by `seed`: per round every workload once and every fault at least once (one
    more workload than faults: one fault twice), each with a pair no known open bug breaks (KNOWN_BUGS)."""
    rng = random.Random(seed)
    seeds = []
    for r in range(rounds):
        faults = [*FAULTS, *(rng.choice(FAULTS) for _ in range(len(WORKLOADS) - len(FAULTS)))]
        rng.shuffle(faults)
        for w, f in zip(WORKLOADS, faults, strict=True):
            pairs = [p for p in pairs_for(w) if not known_bugs(Combo(w, f, p))]
            seeds.append(seed_for(Combo(w, f, rng.choice(pairs)), seed + r))
    return seeds


def long_run_order(seed: int, runs: int, workloads: tuple[str, ...] = WORKLOADS) -> list[int]:
    """Run seeds for the long run: every (workload, fault) cell of `workloads` once per round, cells in a shuffled
    order, and the pair of a cell cycling through its pairs from a random start."""
    unknown = set(workloads) - set(WORKLOADS)
    if unknown or not workloads:
        raise ValueError(f"workloads {sorted(unknown) or '(none)'}: choose from {', '.join(WORKLOADS)}")
    rng = random.Random(seed)
    cells = [(w, f) for w in workloads for f in FAULTS]
    rng.shuffle(cells)
    starts = {cell: rng.randrange(len(pairs_for(cell[0]))) for cell in cells}
    out: list[int] = []
    r = 0
    while len(out) < runs:
        for w, f in cells:
            pairs = pairs_for(w)
            out.append(seed_for(Combo(w, f, pairs[(starts[(w, f)] + r) % len(pairs)]), seed + r))
            if len(out) == runs:
                break
        r += 1
    return out


@dataclass
class ChaosResult:
    seed: int
    combo: Combo
    violations: list[str] = field(default_factory=list)  # a promise of the pair broken
    errors: list[str] = field(default_factory=list)  # the run could not end normally
    notes: list[str] = field(default_factory=list)  # what happened (faults, unexpected exits, restarts)
    stats: dict[str, Any] = field(default_factory=dict)
    logs: str = ""  # the last part of every instance's log

    @property
    def ok(self) -> bool:
        return not self.violations and not self.errors

    def summary(self) -> str:
        head = f"chaos seed={self.seed} {self.combo.name}: "
        if self.ok:
            return head + f"ok ({self.stats})"
        parts = [f"{len(self.violations)} violations", f"{len(self.errors)} errors"]
        lines = [head + ", ".join(parts) + f" ({self.stats})"]
        lines += [f"  VIOLATION {v}" for v in self.violations[:20]]
        lines += [f"  ERROR {e}" for e in self.errors[:10]]
        lines += [f"  note {n}" for n in self.notes[:30]]
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ brokers, pg

@contextlib.contextmanager
def _broker_for(fault: str, shared_bootstrap: str, workdir: Path) -> Iterator[tuple[str, Any]]:
    """(bootstrap, fault handle): this run's own broker for broker faults, else the shared one."""
    if fault == "broker_restart":
        with EmbeddedBroker(data_dir=workdir / "broker") as broker:
            yield broker.bootstrap, broker
    elif fault == "proxy_cut":
        proxy_port = free_port()
        broker = EmbeddedBroker(advertised_port=proxy_port)
        proxy = TcpProxy(broker.port, proxy_port)
        try:
            with broker:
                yield broker.bootstrap, proxy
        finally:
            proxy.stop()
    else:
        yield shared_bootstrap, None


def resent_copies(inputs: list[Any]) -> set[str]:
    """Sources (topic:partition:offset) of input records the broker holds twice: the feeder numbers its records
    (`i`) and sends each once, from an idempotent producer, but across an unclean broker restart Kafka can
    accept a retried batch again (the producer state it rebuilt lacked the batch). The later copy comes far
    behind the event time of its neighbours, so a processor with event time may rightly judge it late and
    drop it (`late: drop`); the checks allow either."""
    seen: set[Any] = set()
    copies: set[str] = set()
    for m in sorted(inputs, key=lambda m: (m.partition(), m.offset())):
        number = orjson.loads(m.value()).get("i")
        if number in seen:
            copies.add(f"{m.topic()}:{m.partition()}:{m.offset()}")
        seen.add(number)
    return copies


# ------------------------------------------------------------------------------------------------ the run

class ChaosRun:
    """One run: pipeline files, instances, the feeder, the faults, the drain, the checks."""

    def __init__(self, seed: int, bootstrap: str, workdir: Path, fault_handle: Any, dsn: str | None) -> None:
        self.seed = seed
        self.combo = combo_of(seed)
        self.rng = random.Random(seed)
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.fault_handle = fault_handle
        self.dsn = dsn
        self.result = ChaosResult(seed, self.combo)
        w, f = self.combo.workload, self.combo.fault
        self.two_instances = w == "shared"
        # another machine (its own state directory, state from the backups) where a fault moves partitions
        # between instances that cannot share a disk: a frozen process keeps its RocksDB locks
        self.separate_dirs = f in ("zombie", "machine_loss") and (self.two_instances or f == "zombie")
        self.backup = f in ("zombie", "machine_loss") and w != "monoid"
        # exactly-once state and output may restore from the changelog instead: half of those runs do (drawn
        # apart from `rng`, so the rest of a seed's run stays what it was)
        self.changelog = (self.backup and self.combo.pair == ("exactly_once", "exactly_once")
                          and random.Random(seed * 7919 + 1).random() < 0.5)
        if self.changelog:
            self.result.notes.append("state restored from the changelog, not from backups")
        self.suffix = uuid.uuid4().hex[:6]
        self.pipeline_name = f"chaos-{w}-{self.suffix}"
        self.topics = {t: f"{t}-{self.suffix}" for t in ("in", "mid", "out")}
        self.paths: dict[str, Path] = {}
        self.dirs: dict[str, Path] = {}
        self.pipeline: Pipeline
        self.live: list[Instance] = []
        self.expected_down: set[str] = set()  # instances we stopped on purpose
        self.instances: dict[str, Instance] = {}
        self.records = self._records()
        self.feeder: Feeder | None = None

    # ---------------------------------------------------------------- configuration
    @property
    def input_partitions(self) -> int:
        return 3 if self.combo.workload in WINDOWED else 2

    def _semantics(self) -> dict[str, str]:
        state, output = self.combo.pair
        return {"state": state, "output": output}

    def _doc(self, side: str) -> dict[str, Any]:
        w = self.combo.workload
        state: dict[str, Any] = {"dir": str(self.dirs[side])}
        if self.changelog:
            state["changelog"] = True
        elif self.backup:
            state["backup"] = {"uri": f"file://{self.workdir / 'backups'}", "interval": "1s", "keep": 3}
        if w == "monoid":
            state = {"dir": str(self.dirs[side]), "backend": "postgres", "dsn": self.dsn}
        t_in, t_mid, t_out = self.topics["in"], self.topics["mid"], self.topics["out"]
        common = {"semantics": self._semantics(), "checkpoint": {"interval": "500ms"}, "state": state}
        window = {"class": "tests.chaos.apps:TimerWindowSum", "outputs": [t_out],
                  "config": {"window_ms": CHAOS_WINDOW_MS}, **common}
        if w in ("counter", "shared", "batch"):
            app = "BatchKeyCounter" if w == "batch" else "KeyCounter"
            processors = {"counter": {"class": f"tests.chaos.apps:{app}", "inputs": [t_in], "outputs": [t_out],
                                      **common}}
            topics = {t_in: {"partitions": 2}, t_out: {"partitions": 2}}
        elif w == "monoid":
            processors = {"count": {"class": "tests.chaos.apps:EmittingCount", "inputs": [t_in], "outputs": [t_out],
                                    **common}}
            topics = {t_in: {"partitions": 2}, t_out: {"partitions": 2}}
        elif w in WINDOWED:
            app = "BatchTimerWindowSum" if w == "batch_windows" else "TimerWindowSum"
            processors = {"win": {**window, "class": f"tests.chaos.apps:{app}", "inputs": [t_in],
                                  "event_time": {"field": "ts", "allowed_lateness": "1s"}}}
            topics = {t_in: {"partitions": 3}, t_out: {"partitions": 2}}
        else:  # pipeline
            processors = {
                "relay": {"class": "tests.chaos.apps:CountingRelay", "inputs": [t_in], "outputs": [t_mid],
                          "event_time": {"field": "ts", "allowed_lateness": "1s"}, **common},
                "win": {**window, "inputs": [t_mid], "event_time": {"field": "ts"}},
            }
            topics = {t_in: {"partitions": 2}, t_mid: {"partitions": 2}, t_out: {"partitions": 2}}
        return {"pipeline": self.pipeline_name, "kafka": KAFKA, "topics": topics, "processors": processors}

    def _write_pipelines(self) -> None:
        sides = ["a", "b"]
        for side in sides:
            self.dirs[side] = self.workdir / (f"state-{side}" if self.separate_dirs else "state")
            path = self.workdir / f"pipeline-{side}.yaml"
            path.write_text(yaml.safe_dump(self._doc(side), sort_keys=False))
            self.paths[side] = path
        self.pipeline = load_pipeline(self.paths["a"])
        create_topics(self.bootstrap, pipeline_topics(self.pipeline), self.pipeline)

    def _records(self) -> list[Rec]:
        rng, w = self.rng, self.combo.workload
        if w in (*WINDOWED, "pipeline"):
            count, keys = 4000, 8
            values: list[dict[str, Any]] = [{"k": f"k{rng.randrange(keys)}", "ts": BASE_TS + i * 10 + rng.randrange(10),
                       "amount": rng.randint(1, 9), "i": i} for i in range(count)]
            order = sorted(values, key=lambda v: v["ts"] + rng.uniform(0, DISORDER_MS))
            return [Rec(str(v["k"]), v, int(v["ts"])) for v in order]
        count, keys = 5000, 12
        return [Rec(f"k{key}", {"k": f"k{key}", "i": i}, BASE_TS + i * 10)
                for i in range(count) for key in [rng.randrange(keys)]]

    def _sentinels(self) -> list[Rec]:
        """Far-future records on every input partition: they close every window."""
        return [Rec(SENTINEL_KEY, {"k": SENTINEL_KEY, "ts": FAR_FUTURE, "amount": 0, "i": -1 - p}, FAR_FUTURE, p)
                for p in range(self.input_partitions)]

    # ---------------------------------------------------------------- instances
    def _instance(self, side: str, name: str) -> Instance:
        inst = Instance(self.paths[side], self.workdir / f"{name}.log", self.bootstrap, name=name)
        self.instances[name] = inst
        return inst

    def _start(self, inst: Instance) -> None:
        inst.start()
        self.expected_down.discard(inst.name)
        if inst not in self.live:
            self.live.append(inst)

    def _stop_expected(self, inst: Instance) -> None:
        self.expected_down.add(inst.name)

    def supervise(self) -> None:
        """An instance that exited although nobody stopped it is noted and started again (as a process
        supervisor would)."""
        for inst in self.live:
            if inst.name in self.expected_down or inst.paused or inst.proc is None:
                continue
            code = inst.returncode
            if code is not None:
                tail = inst.log_text()[-600:].strip().replace("\n", " | ")
                self.result.notes.append(f"{inst.name} exited by itself with code {code}; restarted (log: {tail})")
                self.result.stats["unexpected_exits"] = self.result.stats.get("unexpected_exits", 0) + 1
                inst.start()

    def wait(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        def supervised() -> Any:
            self.supervise()
            return check()
        return wait_until(supervised, timeout, what, interval=0.1, explain=self.tails)

    def tails(self) -> str:
        return "\n".join(inst.tail(2500) for inst in self.instances.values())

    def _assigned(self, inst: Instance, processor: str) -> set[str]:
        """The partitions of `processor` the instance holds, from its log since its last start: assignments add
        (the default cooperative protocol names only the partitions that move), revocations remove, a loss
        drops them all."""
        text = inst.log_text().rpartition(f"--- {inst.name} start {inst.starts - 1} ")[2]
        held: set[str] = set()
        for line in text.splitlines():
            if f"{processor}: assigned " in line:
                held |= set(re.findall(r"(\S+\[\d+\])@", line))
            elif f"{processor}: revoking " in line:
                held -= set(re.findall(r"(\S+\[\d+\])", line.split(f"{processor}: revoking ", 1)[1]))
            elif f"{processor}: lost " in line:
                held = set()
        return held

    def _all_inputs(self, processor: str) -> set[str]:
        spec = self.pipeline.processors[processor]
        return {f"{t}[{p}]" for t in spec.inputs for p in range(self.pipeline.topics[t].partitions)}

    def _owns_everything(self, inst: Instance) -> bool:
        return all(self._assigned(inst, p) == self._all_inputs(p) for p in self.pipeline.processors)

    # ---------------------------------------------------------------- the run
    def run(self) -> ChaosResult:
        started = time.monotonic()
        self._write_pipelines()
        a = self._instance("a", "a")
        self._start(a)
        b: Instance | None = None
        if self.two_instances:
            b = self._instance("b", "b")
            self._start(b)
        try:
            self.wait(lambda: a.says("assigned"), 90, "instance a to be assigned")
            rate = len(self.records) / self.rng.uniform(5.0, 7.0)
            self.feeder = Feeder(self.bootstrap, self.topics["in"], self.records, rate)
            self.feeder.start()
            self._inject(a, b)
            self.wait(lambda: self.feeder is not None and self.feeder.finished.is_set(), 180, "the input to be sent")
            self.feeder.join_checked(10)
            for inst in self.live:
                self._stop_expected(inst)
                code = inst.terminate(60)
                if code not in (0, None):
                    self.result.notes.append(f"{inst.name} ended with code {code} on SIGTERM")
            if self.combo.workload in (*WINDOWED, "pipeline"):
                # the far-future records go to the drain alone: a partition's largest event time is not saved
                # with its state, so a restarted instance holds the watermark at the saved floor for any
                # partition whose last record came before the restart, until the partition's idle timeout
                produce_now(self.bootstrap, self.topics["in"], self._sentinels())
            self._drain(self._survivor_side())
        finally:
            if self.feeder is not None:
                self.feeder.stop_flag.set()
            for inst in self.instances.values():
                if inst.alive:
                    inst.kill()
        self._check()
        self.result.stats["seconds"] = round(time.monotonic() - started, 1)
        self.result.logs = self.tails()
        return self.result

    def _survivor_side(self) -> str:
        return "b" if self.separate_dirs else "a"

    def _drain(self, side: str) -> None:
        drain = self._instance(side, "drain")
        drain.start(exit_when_idle=3)
        try:
            code = drain.wait(240)
        except AssertionError as exc:
            self.result.errors.append(f"the drain did not finish: {str(exc)[:300]}")
            drain.kill()
            return
        if code != 0:
            tail = drain.log_text()[-1500:]
            self.result.errors.append(f"the drain exited with code {code}: ...{tail}")

    def _at_fraction(self, fraction: float) -> None:
        """Wait until `fraction` of the input is sent (the fault schedule is tied to the input, not the clock)."""
        feeder = self.feeder
        assert feeder is not None
        target = int(len(self.records) * fraction)
        self.wait(lambda: feeder.sent >= target or feeder.finished.is_set(), 120, f"{fraction:.0%} of the input")

    # ---------------------------------------------------------------- faults
    def _inject(self, a: Instance, b: Instance | None) -> None:
        fault, rng = self.combo.fault, self.rng
        victim = a if b is None or rng.random() < 0.5 else b
        other = None if b is None else (b if victim is a else a)
        notes = self.result.notes
        if fault == "sigkill":
            kills = rng.randint(1, 2)
            points = sorted(rng.uniform(0.15, 0.8) for _ in range(kills))
            for point in points:
                self._at_fraction(point)
                self._stop_expected(victim)
                victim.kill()
                notes.append(f"SIGKILL {victim.name} at {self._sent()} records sent")
                self._start(victim)
            self.result.stats["kills"] = kills
        elif fault == "machine_loss":
            self._at_fraction(rng.uniform(0.3, 0.7))
            self._stop_expected(victim)
            victim.kill()
            shutil.rmtree(self.dirs["a" if victim is a else "b"], ignore_errors=True)
            notes.append(f"machine of {victim.name} lost at {self._sent()} records sent")
            self._start(victim)
        elif fault == "zombie":
            self._zombie(victim, other)
        elif fault == "broker_restart":
            broker: EmbeddedBroker = self.fault_handle
            self._at_fraction(rng.uniform(0.2, 0.6))
            crash = rng.random() < 0.5
            notes.append(f"broker {'crash' if crash else 'clean'} restart at {self._sent()} records sent")
            broker.restart(crash=crash)
        elif fault == "proxy_cut":
            proxy: TcpProxy = self.fault_handle
            cuts = rng.randint(2, 4)
            for point in sorted(rng.uniform(0.1, 0.9) for _ in range(cuts)):
                self._at_fraction(point)
                refuse = rng.uniform(0.2, 1.5)
                dropped = proxy.drop_all(refuse_for=refuse)
                notes.append(f"cut {dropped} connections at {self._sent()} records sent, refused {refuse:.1f}s")
            self.result.stats["cuts"] = cuts

    def _sent(self) -> int:
        return self.feeder.sent if self.feeder is not None else 0

    def _zombie(self, victim: Instance, other: Instance | None) -> None:
        rng, notes = self.rng, self.result.notes
        self._at_fraction(rng.uniform(0.2, 0.5))
        victim.pause()
        notes.append(f"SIGSTOP {victim.name} at {self._sent()} records sent")
        if other is None:  # another machine takes over
            other = self._instance("b", "b")
            self._start(other)
        taker = other
        self.wait(lambda: self._owns_everything(taker), 90, f"{taker.name} to take every partition over")
        notes.append(f"{taker.name} took every partition over at {self._sent()} records sent")
        time.sleep(rng.uniform(1.0, 3.0))  # the zombie's sleep: part of the fault, not a wait for a condition
        mark = len(victim.log_text())
        victim.resume()
        notes.append(f"SIGCONT {victim.name} at {self._sent()} records sent")

        def noticed() -> bool:
            text = victim.log_text()[mark:]
            return not victim.alive or any(w in text for w in ("fenced", "lost ", "revoking", "assigned"))

        try:
            self.wait(noticed, 30, f"{victim.name} to find out it lost its partitions")
        except AssertionError:
            notes.append(f"{victim.name} did not show within 30 s that it lost its partitions")

    # ---------------------------------------------------------------- checks
    def _read(self, topic: str) -> list[Any]:
        try:
            return read_topic(self.bootstrap, topic, timeout=90)
        except TimeoutError as exc:
            tail = blocked_tail(self.bootstrap, topic)
            self.result.errors.append(f"read_committed of {topic} blocked: {exc}\n{tail}")
            return read_topic(self.bootstrap, topic, timeout=30, partial=True)

    def _complete(self) -> None:
        """Every input offset committed by every processor (else the run did not end normally)."""
        for name, spec in self.pipeline.processors.items():
            group = self.pipeline.group_id(name)
            for topic in spec.inputs:
                parts = self.pipeline.topics[topic].partitions
                ends = topic_ends(self.bootstrap, topic, parts)
                done = group_offsets(self.bootstrap, group, topic, parts)
                behind = {p: (done[p], ends[p][1]) for p in range(parts) if done[p] != ends[p][1]}
                if behind:
                    self.result.errors.append(f"{name}: input {topic} not fully committed (committed, end): {behind}")

    def _check(self) -> None:
        self._complete()
        w = self.combo.workload
        inputs = self._read(self.topics["in"])
        self.result.stats["inputs"] = len(inputs)
        if w in ("counter", "shared", "monoid", "batch"):  # no event time: a copy is one more input like any other
            self._check_counter(inputs)
            return
        resent = resent_copies(inputs)
        if resent:
            self.result.notes.append(f"the broker holds {len(resent)} input records twice (the feeder's retry across "
                                     "the restart); their later copies may be dropped as late")
        if w in WINDOWED:
            self._check_windows(inputs, "win", self.combo.pair[0], self.combo.pair, resent)
        else:
            self._check_pipeline(inputs, resent)

    def _state_of(self, processor: str) -> dict[int, dict[str, Any]]:
        return store_states(self.dirs[self._survivor_side()] / self.pipeline_name / processor)

    def _pg_state(self, processor: str) -> dict[str, Any]:
        assert self.dsn is not None
        table = default_table(self.pipeline_name, processor)
        with psycopg.connect(self.dsn) as conn:
            return dict(conn.execute(f'SELECT key, value FROM "{table}"').fetchall())

    def _compare_state(self, what: str, got: dict[str, int], truth: Counter[str], semantics: str,
                       floor: Counter[str] | None = None) -> None:
        """`floor`: the truth without the inputs a processor may rightly drop (`resent_copies`)."""
        for key in sorted(truth.keys() | got.keys()):
            have, want = got.get(key, 0), truth.get(key, 0)
            least = want if floor is None else floor.get(key, 0)
            if (semantics == EO and not least <= have <= want) or (semantics == ALO and have < least) or (
                    semantics == AMO and have > want):
                shown = str(want) if least == want else f"{least}..{want}"
                self.result.violations.append(f"{what} state of {key}: {have}, truth {shown} ({semantics} state)")

    def _compare_outputs(self, what: str, per_src: Counter[str], sources: list[str], semantics: str,
                         may_drop: AbstractSet[str] = frozenset()) -> None:
        """`may_drop`: inputs a processor may rightly drop (`resent_copies`)."""
        bad = 0
        for src in sources:
            n = per_src.get(src, 0)
            if n == 0 and src in may_drop:
                continue
            if (semantics == EO and n != 1) or (semantics == ALO and n < 1) or (semantics == AMO and n > 1):
                bad += 1
                if bad <= 10:
                    self.result.violations.append(f"{what}: input {src} has {n} outputs ({semantics} output)")
        if bad > 10:
            self.result.violations.append(f"{what}: ... {bad} inputs in all break the {semantics} output promise")
        unknown = set(per_src) - set(sources)
        if unknown:
            self.result.violations.append(f"{what}: {len(unknown)} outputs name no input, e.g. {sorted(unknown)[:3]}")

    def _check_counter(self, inputs: list[Any]) -> None:
        state_sem, out_sem = self.combo.pair
        processor = "count" if self.combo.workload == "monoid" else "counter"
        sources = [f"{m.topic()}:{m.partition()}:{m.offset()}" for m in inputs]
        truth = Counter(m.key().decode() for m in inputs)
        outputs = [orjson.loads(m.value()) for m in self._read(self.topics["out"])]
        self.result.stats["outputs"] = len(outputs)
        self._compare_outputs(processor, Counter(o["src"] for o in outputs), sources, out_sem)
        if self.combo.workload == "monoid":
            got = {k: int(v) for k, v in self._pg_state(processor).items()}
        else:
            got = {}
            for state in self._state_of(processor).values():
                for k, v in state.items():
                    got[k] = got.get(k, 0) + int(v)
        self._compare_state(processor, got, truth, state_sem)
        if self.combo.workload != "monoid" and (state_sem, out_sem) == (EO, EO):  # counts 1..n, each once
            per_key: dict[str, list[int]] = defaultdict(list)
            for o in outputs:
                per_key[o["key"]].append(o["count"])
            for key, n in sorted(truth.items()):
                if sorted(per_key.get(key, [])) != list(range(1, n + 1)):
                    counts = Counter(per_key.get(key, []))
                    self.result.violations.append(
                        f"{processor}: output counts of {key} are not 1..{n} once each "
                        f"(twice: {sorted(c for c, k in counts.items() if k > 1)[:5]}, "
                        f"missing: {sorted(set(range(1, n + 1)) - set(counts))[:5]})")

    def _check_windows(self, inputs: list[Any], processor: str, value_sem: str, pair: tuple[str, str],
                       resent: AbstractSet[str] = frozenset()) -> None:
        """Window results: emissions per window by the output semantics, each sum by `value_sem`, between the
        truth without the `resent` copies (which may rightly be dropped as late) and the truth with them."""
        state_sem, out_sem = pair
        truth: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
        floor: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
        for m in inputs:
            v = orjson.loads(m.value())
            if v["k"] == SENTINEL_KEY:
                continue
            window = (v["k"], v["ts"] - v["ts"] % CHAOS_WINDOW_MS)
            sums = [truth[window]]
            if f"{m.topic()}:{m.partition()}:{m.offset()}" not in resent:
                sums.append(floor[window])
            for w in sums:
                w[0] += v["amount"]
                w[1] += 1
        results = [orjson.loads(m.value()) for m in self._read(self.topics["out"])]
        results = [r for r in results if r["key"] != SENTINEL_KEY]
        self.result.stats["windows"] = len(truth)
        self.result.stats["results"] = len(results)
        emitted: dict[tuple[str, int], list[tuple[Any, Any]]] = defaultdict(list)
        for r in results:
            if r.get("orphan"):
                self.result.violations.append(f"{processor}: a timer fired for {r['key']}@{r['start']} without "
                                              "its window's state")
                continue
            emitted[(r["key"], r["start"])].append((r["sum"], r["n"]))
        bad = 0
        for window in sorted(truth.keys() | emitted.keys()):
            got, want = emitted.get(window, []), truth.get(window)
            problems = []
            if want is None:
                problems.append(f"emitted {got} for a window with no input")
            else:
                n = len(got)
                if (out_sem == EO and n != 1) or (out_sem == ALO and n < 1) or (out_sem == AMO and n > 1):
                    problems.append(f"emitted {n} times ({out_sem} output)")
                least = floor.get(window, [0, 0])
                for total, count in got:
                    if (value_sem == EO and not (least[0] <= total <= want[0] and least[1] <= count <= want[1])) or (
                            value_sem == ALO and (total < least[0] or count < least[1])) or (
                            value_sem == AMO and (total > want[0] or count > want[1])):
                        shown = f"{want[0]} of {want[1]}" if least == want else \
                            f"{least[0]}..{want[0]} of {least[1]}..{want[1]}"
                        problems.append(f"sum {total} of {count} records, truth {shown} ({value_sem})")
            if problems:
                bad += 1
                if bad <= 12:
                    self.result.violations.append(f"{processor}: window {window[0]}@{window[1] - BASE_TS}: "
                                                  + "; ".join(problems))
        if bad > 12:
            self.result.violations.append(f"{processor}: ... {bad} windows in all break a promise")
        left = sorted(k for state in self._state_of(processor).values() for k in state
                      if not k.startswith(f"{SENTINEL_KEY}|"))
        if left:
            message = (f"{processor}: {len(left)} window entries never closed in the final state, e.g. "
                       f"{left[:3]}")
            if state_sem == EO or out_sem != AMO:  # exact state, or output that must not lose them
                self.result.violations.append(message)
            else:
                self.result.notes.append(message)

    def _check_pipeline(self, inputs: list[Any], resent: AbstractSet[str]) -> None:
        state_sem, out_sem = self.combo.pair
        sources = [f"{m.topic()}:{m.partition()}:{m.offset()}" for m in inputs]
        truth = Counter(orjson.loads(m.value())["k"] for m in inputs)
        floor = Counter(orjson.loads(m.value())["k"] for m, src in zip(inputs, sources, strict=True)
                        if src not in resent)
        relayed = [orjson.loads(m.value()) for m in self._read(self.topics["mid"])]
        self.result.stats["relayed"] = len(relayed)
        self._compare_outputs("relay", Counter(r["src"] for r in relayed), sources, out_sem, resent)
        got: dict[str, int] = {}
        for state in self._state_of("relay").values():
            for k, v in state.items():
                got[k] = got.get(k, 0) + int(v)
        self._compare_state("relay", got, truth, state_sem, floor)
        # the windows sum what the relay wrote: duplicates it wrote count more, records it lost count less
        value_sem = {ALO: ALO, AMO: AMO, EO: state_sem}[out_sem]
        self._check_windows(inputs, "win", value_sem, self.combo.pair, resent)


def run_chaos(seed: int, shared_bootstrap: str, workdir: Path) -> ChaosResult:
    """Run the combination and faults of `seed` (printed first) and check its promises."""
    combo = combo_of(seed)
    print(f"chaos seed={seed} ({combo.name}); replay with STYLUS_CHAOS_SEED={seed}", flush=True)
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        bootstrap, handle = stack.enter_context(_broker_for(combo.fault, shared_bootstrap, workdir))
        dsn = stack.enter_context(fresh_database("stylus_chaos")) if combo.workload == "monoid" else None
        run = ChaosRun(seed, bootstrap, workdir, handle, dsn)
        try:
            return run.run()
        except Exception as exc:  # a harness step that could not complete: an error of the run, with the logs
            run.result.errors.append(f"{type(exc).__name__}: {exc}")
            run.result.logs = run.tails()
            return run.result

