"""The longer crash run of issue 3, and the paper's Figure 7 from it.

    .venv/bin/python -m bench.crash_semantics --kills 10 --plot docs/figure7.png

Runs the Counter Node under each pair with `--kills` random SIGKILLs (input keeps arriving), reports
the violations (there must be none) and plots, for each state semantics, the count the processor
emitted against the true count of its input so far, with the kills marked: at-least-once runs above
the truth after a crash (replayed input counted again), at-most-once below it (input skipped),
exactly-once on it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from stylus.kafka.broker import EmbeddedBroker
from tests.runtime.crash_harness import CrashRun, run_crash_harness

PAIRS = [("at_least_once", "at_least_once"), ("exactly_once", "at_least_once"), ("at_most_once", "at_most_once"),
         ("exactly_once", "at_most_once"), ("exactly_once", "exactly_once")]
PLOTTED = {"at_least_once": ("at_least_once", "at_least_once"), "at_most_once": ("at_most_once", "at_most_once"),
           "exactly_once": ("exactly_once", "exactly_once")}
ONE_WINDOW_MS = 10**12  # the whole run is one window: the counter is one running count per partition


def plot(runs: dict[tuple[str, str], CrashRun], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=False)
    for ax, (label, pair) in zip(axes, PLOTTED.items(), strict=True):
        run = runs[pair]
        xs, counts, truths = [], [], []
        for position, src, count in run.output_log:
            _topic, partition, offset = src.rsplit(":", 2)
            if partition != "0":
                continue
            xs.append(position)
            counts.append(count)
            truths.append(int(offset) + 1)  # one window: the true count at this input is its offset + 1
        ax.plot(xs, truths, color="0.6", lw=3, label="true count of the input")
        ax.plot(xs, counts, lw=1, label="count emitted by the processor")
        for i, kill in enumerate(run.kill_positions):
            ax.axvline(kill, color="red", ls=":", lw=1, label="SIGKILL" if i == 0 else None)
        ax.set_title(f"{label.replace('_', '-')} state ({run.kills} kills)")
        ax.set_xlabel("output records (time)")
        ax.set_ylabel("counter (partition 0)")
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle("Counter Node under crashes (the paper's Figure 7), from a real run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(5) as pool:
        futures = {pair: pool.submit(run_crash_harness, broker.bootstrap, Path(tmp) / "-".join(pair), *pair,
                                     kills=args.kills, rate=args.rate, seed=i, interval="500ms",
                                     window_ms=ONE_WINDOW_MS)
                   for i, pair in enumerate(PAIRS)}
        runs = {pair: f.result() for pair, f in futures.items()}
    summary = {}
    for pair, run in runs.items():
        summary["/".join(pair)] = {"kills": run.kills, "inputs": len(run.inputs),
                                   "outputs": sum(run.outputs_per_src.values()),
                                   "state_violations": len(run.state_violations()),
                                   "output_violations": len(run.output_violations())}
        print(f"{'/'.join(pair):30} {summary['/'.join(pair)]}")
    if args.plot:
        plot(runs, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
