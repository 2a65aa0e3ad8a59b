"""The chaos matrix's long run: workloads x faults x semantics pairs (tests/chaos/harness.py), each run checked
against its pair's promise on state and on output.

    .venv/bin/python -m bench.chaos --runs 50 --seed 1
    .venv/bin/python -m bench.chaos --replay 844            # one run again, by the seed it printed
    .venv/bin/python -m bench.chaos --workloads batch --runs 25   # one workload's cells only

Runs cycle through every (workload, fault) cell, a cell's pair changing from round to round. Prints each run's
result as it ends, then per combination the runs and the runs with violations or errors, and a final summary
line; writes bench/results-chaos.json (every run: seed, combination, violations, errors, notes, numbers, and a
fingerprint of the stylus/ sources it ran). The directories of failed runs (logs, state) are kept and named.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from stylus.kafka.broker import EmbeddedBroker
from tests.chaos.harness import FAULTS, WORKLOADS, ChaosResult, known_bugs, long_run_order, run_chaos

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results-chaos.json"


def source_fingerprint() -> str:
    """sha256 of every stylus/ source file (path and contents): which code a run exercised."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "stylus").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def git_head() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip()


def report(args: argparse.Namespace, fingerprint: str, head: str, results: list[tuple[ChaosResult, str, str]],
           seconds: float, *, final: bool) -> tuple[list[int], list[int]]:
    """Counts per combination (printed when `final`) and bench/results-chaos.json; returns the seeds that
    broke a promise and those that ended in errors."""
    per_combo: dict[str, dict[str, int]] = defaultdict(lambda: {"runs": 0, "violations": 0, "errors": 0})
    for result, _, _ in results:
        row = per_combo[result.combo.name]
        row["runs"] += 1
        row["violations"] += bool(result.violations)
        row["errors"] += bool(result.errors)
    combos = {r.combo.name: r.combo for r, _, _ in results}
    if final:
        print(f"\n{'combination':34} {'runs':>5} {'violations':>11} {'errors':>7}  known open bugs "
              "(harness.KNOWN_BUGS)")
        for name in sorted(per_combo):
            row = per_combo[name]
            print(f"{name:34} {row['runs']:5d} {row['violations']:11d} {row['errors']:7d}  "
                  f"{', '.join(known_bugs(combos[name]))}")
    violating = [r.seed for r, _, _ in results if r.violations]
    erring = [r.seed for r, _, _ in results if r.errors]
    summary = (f"chaos: {len(results)} runs over {len(per_combo)} combinations in {seconds:.0f}s: "
               f"{len(violating)} with violations {violating}, {len(erring)} with errors {erring}")
    if final:
        print(summary)
    doc: dict[str, Any] = {
        "seed": args.seed, "runs": len(results), "stylus_sources": fingerprint, "git_head": head,
        "summary": summary,
        "per_combination": dict(sorted(per_combo.items())),
        "results": [{"seed": r.seed, "combination": r.combo.name, "ok": r.ok, "known_bugs": known_bugs(r.combo),
                     "violations": r.violations,
                     "errors": [e[:2000] for e in r.errors], "notes": r.notes, "stats": r.stats, "kept": where,
                     # a failed run's log tails, also here: the kept directory may be gone when it is read
                     **({} if r.ok else {"logs": r.logs[-30_000:]}),
                     "stylus_sources": code}
                    for r, where, code in results],
    }
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    if final:
        print(f"wrote {args.json}")
    return violating, erring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=len(WORKLOADS) * len(FAULTS),
                        help="how many runs (the default: every workload x fault once)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"the workloads to run, comma-separated (default: all of {','.join(WORKLOADS)})")
    parser.add_argument("--seed", type=int, default=1, help="chooses the order of the runs and each run's seed")
    parser.add_argument("--replay", type=int, nargs="*", default=None, metavar="SEED",
                        help="run exactly these run seeds (as printed) instead")
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time (2 cores: 1 or 2)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--keep", type=Path, default=None,
                        help="where failed runs' directories go (default: a temporary directory, kept)")
    args = parser.parse_args()

    try:
        seeds = args.replay if args.replay else long_run_order(args.seed, args.runs,
                                                               tuple(w.strip() for w in args.workloads.split(",")))
    except ValueError as exc:
        parser.error(f"--workloads: {exc}")
    root = Path(tempfile.mkdtemp(prefix="stylus-chaos-"))
    keep = args.keep or root
    fingerprint, head = source_fingerprint(), git_head()
    print(f"chaos: {len(seeds)} runs, seed {args.seed}, stylus/ sources {fingerprint} (HEAD {head}); "
          f"work in {root}", flush=True)
    results: list[tuple[ChaosResult, str, str]] = []
    started = time.monotonic()

    with EmbeddedBroker() as broker:
        def one(seed: int) -> tuple[ChaosResult, str, str]:
            workdir = root / f"run-{seed}"
            code_before = source_fingerprint()
            result = run_chaos(seed, broker.bootstrap, workdir)
            code_after = source_fingerprint()
            where = ""
            if result.ok:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                target = keep / f"run-{seed}"
                if target != workdir:
                    shutil.move(str(workdir), target)
                (target / "result.txt").write_text(result.summary() + "\n\n" + result.logs)
                where = str(target)
            print(result.summary() + (f"\n  kept in {where}" if where else ""), flush=True)
            if code_before != code_after:
                print(f"  note: stylus/ sources changed during this run ({code_before} -> {code_after})", flush=True)
            return result, where, code_before if code_before == code_after else f"{code_before}->{code_after}"

        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            for outcome in pool.map(one, seeds):
                results.append(outcome)
                # written as it goes, so a long run stopped early still leaves its counts
                report(args, fingerprint, head, results, time.monotonic() - started, final=False)

    violating, erring = report(args, fingerprint, head, results, time.monotonic() - started, final=True)
    if args.keep is not None or not (violating or erring):  # failed runs were moved to --keep, or there are none
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
