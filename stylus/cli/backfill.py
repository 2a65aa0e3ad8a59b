"""`stylus backfill`: run one processor's own code on Spark over historical input (SPEC §3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def common_options(func: F) -> F:
    """Options shared by `backfill` and `replay`."""
    for option in reversed([
        click.option("--processor", "name", required=True, help="the processor to run"),
        click.option("--from", "start", default=None, metavar="T",
                     help="inclusive start: earliest, offset:N, offset:P=N,..., ISO time, epoch ms, now-1h"),
        click.option("--to", "stop", default=None, metavar="T", help="exclusive end, same forms (default latest)"),
        click.option("--master", default=None, help="Spark master URL (default local[*])"),
        click.option("--source", type=click.Choice(["kafka", "archive", "both"]), default="kafka",
                     help="read Kafka, the Parquet archive, or both (deduplicated by topic, partition, offset)"),
        click.option("--archive", "archive_root", default=None,
                     help="archive root (default: the pipeline's archiver path, else ./.stylus/archive)"),
        click.option("--chunk-size", type=int, default=250_000, show_default=True,
                     help="largest Kafka range one read covers"),
        click.option("--no-progress", is_flag=True, help="no progress bar on stderr"),
    ]):
        func = option(func)
    return func


@click.command("backfill")
@click.argument("pipeline_file", type=click.Path())
@common_options
@click.option("--output", "target", default=None, metavar="TOPIC|PATH|@outputs",
              help="a Parquet dir (key, value JSON, timestamp, topic), a topic for every emitted record, or "
                   "@outputs for the processor's own output topics; default: count only")
@click.option("--seed-state", is_flag=True, help="write the final state and next offsets as the processor's live "
              "state (its RocksDB, or its PostgreSQL monoid table with `state.backend: postgres`)")
@click.option("--summary", "summary_file", type=click.Path(dir_okay=False), default=None,
              help="write the summary to FILE instead of standard output")
def backfill_command(pipeline_file: str, name: str, start: str | None, stop: str | None, master: str | None,
                     source: str, archive_root: str | None, chunk_size: int, no_progress: bool,
                     target: str | None, seed_state: bool, summary_file: str | None) -> None:
    """Run the processor's own process/on_timer code on Spark over historical input."""
    from stylus.backfill.bounds import parse_bound
    from stylus.backfill.runner import backfill, parse_output
    from stylus.backfill.session import processor_modules, spark_session
    from stylus.cli.main import emit_result, load_or_exit
    from stylus.runtime.runner import resolved_bootstrap

    pipeline = load_or_exit(pipeline_file, import_classes=True)
    if name not in pipeline.processors:
        raise click.BadParameter(f"no processor `{name}`; the pipeline has {sorted(pipeline.processors)}",
                                 param_hint="--processor")
    try:
        lower, upper = parse_bound(start, default="earliest"), parse_bound(stop, default="latest")
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    with resolved_bootstrap(pipeline) as bootstrap:
        spark = spark_session(master, preload=processor_modules(pipeline, [name]))
        try:
            result = backfill(spark, pipeline, name, bootstrap, lower, upper, output=parse_output(target),
                              source=source, archive_root=archive_root, seed=seed_state,  # type: ignore[arg-type]
                              chunk_size=chunk_size, progress=not no_progress)
        finally:
            spark.stop()
    text = result.summary()
    if seed_state:
        state = pipeline.processors[name].state
        if state.backend == "postgres":
            from stylus.monoid.pg import default_table

            where = f"into table {state.table or default_table(pipeline.pipeline, name)}"
        else:
            where = f"under {state.dir}"
        text += f"  seeded state of {len(result.states)} partitions {where}\n"
    emit_result(text, summary_file)
