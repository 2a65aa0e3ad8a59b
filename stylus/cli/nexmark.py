"""`stylus nexmark --events N --rate R --seed S`: generated Nexmark events (persons, auctions, bids) into the
topics `<prefix>-person`, `<prefix>-auction`, `<prefix>-bid` (`docs/nexmark.md`)."""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager, nullcontext
from itertools import islice
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from stylus.config.model import Pipeline

# The --output option is declared here, not imported: main.py imports this module at its bottom (see lag.py).


@click.command("nexmark")
@click.option("--events", type=click.IntRange(min=0), default=100_000, show_default=True,
              help="how many events (persons, auctions and bids, 1:3:46)")
@click.option("--rate", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="events per second of event time")
@click.option("--seed", type=int, default=0, show_default=True, help="the same seed gives the same events")
@click.option("--base-time", type=int, default=None, metavar="MS",
              help="event time of the first event, ms since the epoch (default: fixed, or now with --realtime)")
@click.option("--realtime", is_flag=True, help="write at the pace of event time instead of as fast as possible")
@click.option("--bootstrap", default=None, metavar="SERVERS",
              help="Kafka bootstrap servers (default: as other commands find them, else an embedded broker)")
@click.option("--pipeline", "pipeline_file", type=click.Path(), default=None,
              help="take connection settings and the topics' partitions from this pipeline file")
@click.option("--prefix", default="nexmark", show_default=True, help="topics are PREFIX-person, -auction, -bid")
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True,
              help="partitions of each topic it creates (a topic that exists is used as it is)")
@click.option("--no-progress", is_flag=True, help="no progress lines on standard error")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="write the result to FILE instead of standard output")
def nexmark(events: int, rate: int, seed: int, base_time: int | None, realtime: bool, bootstrap: str | None,
            pipeline_file: str | None, prefix: str, partitions: int, no_progress: bool, output: str | None) -> None:
    """Write generated Nexmark events to Kafka: persons, auctions and bids in the proportions 1:3:46."""
    from stylus.cli.main import emit_result, load_or_exit
    from stylus.kafka.settings import bootstrap_from
    from stylus.nexmark.generator import DEFAULT_BASE_TIME, GeneratorConfig, NexmarkGenerator
    from stylus.nexmark.kafka import Produced, ensure_topics, produce
    from stylus.nexmark.model import topics

    pipeline = load_or_exit(pipeline_file) if pipeline_file else None
    if base_time is None:
        base_time = int(time.time() * 1000) if realtime else DEFAULT_BASE_TIME
    config = GeneratorConfig(seed=seed, rate=rate, base_time=base_time)
    if bootstrap is None and bootstrap_from(pipeline) is None:
        click.echo("note: no bootstrap servers configured: the events go to an embedded broker whose data is "
                   "deleted when this command ends; run `stylus broker` and pass --bootstrap to keep them", err=True)
    tty = sys.stderr.isatty()
    last_line = [0.0]

    def report(done: Produced) -> None:
        now = time.monotonic()
        if no_progress or (not tty and now - last_line[0] < 5.0 and done.total < events):
            return
        last_line[0] = now
        seconds = ((done.last_time or base_time) - base_time) / 1000
        line = (f"{done.total:,}/{events:,} events ({done.total / max(events, 1):.0%}), "
                f"event time +{seconds:,.1f} s")
        click.echo(f"\r{line}" if tty else line, err=True, nl=not tty or done.total >= events)

    with _connection(bootstrap, pipeline) as servers:
        click.echo(f"bootstrap servers: {servers}", err=True)
        ensure_topics(servers, prefix, partitions, pipeline)
        done = produce(servers, islice(NexmarkGenerator(config), events), prefix=prefix, realtime=realtime,
                       progress=report)
    names = topics(prefix)
    span = ((done.last_time or base_time) - base_time) / 1000
    lines = [f"{done.counts[kind]:>12,} {kind}s to {names[kind]}" for kind in ("person", "auction", "bid")]
    emit_result(f"wrote {done.total:,} events (seed {seed}) to {servers}:\n" + "\n".join(lines) + "\n"
                f"event time {done.first_time} .. {done.last_time} ms ({span:,.1f} s at {rate:,} events/s)\n",
                output)


def _connection(bootstrap: str | None, pipeline: Pipeline | None) -> AbstractContextManager[str]:
    """`--bootstrap` as given (checked to answer), else what other commands use: STYLUS_BOOTSTRAP_SERVERS, the
    pipeline's `kafka:`, the profile, or an embedded broker for the duration."""
    from stylus.kafka.reach import probe
    from stylus.kafka.settings import remember_connection
    from stylus.runtime.runner import resolved_bootstrap

    if bootstrap is None:
        return resolved_bootstrap(pipeline)
    remember_connection(bootstrap, pipeline)
    probe(bootstrap, pipeline, "--bootstrap")
    return nullcontext(bootstrap)
