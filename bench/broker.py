"""The embedded Apache Kafka: how long it takes to be ready, and how much memory it holds.

    .venv/bin/python -m bench.broker --repeat 5

Each round starts a fresh broker (format + JVM start, until an admin metadata call names it), then writes
and reads back `--records` records in one transaction-free topic, and reads the JVM's RSS when ready and
after that load. Targets (issue 28): ready in under 6 s, under 600 MB RSS.
"""

from __future__ import annotations

import argparse
import statistics
import time

from stylus.config.model import TopicSpec
from stylus.kafka.admin import create_topics
from stylus.kafka.broker import EmbeddedBroker
from stylus.kafka.reader import read_topic
from tests.support.kafka import produce
from tests.support.proc import rss_mb


def one_round(records: int) -> tuple[float, float, float]:
    """(seconds to ready, RSS MB when ready, RSS MB after writing and reading `records`)."""
    started = time.monotonic()
    with EmbeddedBroker() as broker:
        ready = time.monotonic() - started
        idle = rss_mb(broker.pid) or 0.0
        create_topics(broker.bootstrap, {"load": TopicSpec(partitions=4)})
        produce(broker.bootstrap, "load", [(f"k{i}", {"i": i, "pad": "x" * 100}) for i in range(records)])
        assert len(read_topic(broker.bootstrap, "load", timeout=120)) == records
        loaded = rss_mb(broker.pid) or 0.0
    return ready, idle, loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    rounds = [one_round(args.records) for _ in range(args.repeat)]
    for i, (ready, idle, loaded) in enumerate(rounds):
        print(f"round {i}: ready in {ready:.2f} s, RSS {idle:.0f} MB ready, {loaded:.0f} MB after "
              f"{args.records:,} records", flush=True)
    ready, idle, loaded = (statistics.median(col) for col in zip(*rounds, strict=True))
    print(f"median: ready in {ready:.2f} s, RSS {idle:.0f} MB ready, {loaded:.0f} MB loaded")


if __name__ == "__main__":
    main()
