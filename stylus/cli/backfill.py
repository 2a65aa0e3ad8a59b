"""`stylus backfill`: run one processor's own code on Spark over historical input (docs/backfill.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

if TYPE_CHECKING:
    from stylus.backfill.bounds import Bound
    from stylus.backfill.job import BackfillResult
    from stylus.backfill.outputs import OutputTarget
    from stylus.backfill.plan import Source
    from stylus.config.model import Pipeline

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


@dataclass(frozen=True)
class SparkRun:
    """A checked `backfill` or `replay` request: both run one processor over the same kind of input, and
    differ only in where its output goes and what is reported."""

    pipeline: Pipeline
    name: str
    lower: Bound
    upper: Bound
    master: str | None
    source: Source
    archive_root: str | None
    chunk_size: int
    progress: bool

    @classmethod
    def from_options(cls, pipeline_file: str, name: str, start: str | None, stop: str | None,
                     master: str | None, source: str, archive_root: str | None, chunk_size: int,
                     no_progress: bool) -> SparkRun:
        """Load the pipeline and parse the range, or exit with the option that is wrong."""
        from stylus.backfill.bounds import parse_bound
        from stylus.cli.main import load_or_exit

        pipeline = load_or_exit(pipeline_file, import_classes=True)
        if name not in pipeline.processors:
            from stylus.sql.expand import stages_of

            stages = stages_of(pipeline, name)  # a `sql:` app of several tables runs one processor per table
            tables = [s for s in stages if not s.endswith((".shuffle", ".partial"))]
            hint = (f"; `{name}` is a SQL app of {len(tables)} tables: name the one to run, "
                    f"{', '.join(tables)} (the stages it reads from run first)") if stages else ""
            raise click.BadParameter(f"no processor `{name}`; the pipeline has {sorted(pipeline.processors)}{hint}",
                                     param_hint="--processor")
        try:
            lower = parse_bound(start, default="earliest")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--from") from exc
        try:
            upper = parse_bound(stop, default="latest")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--to") from exc
        return cls(pipeline, name, lower, upper, master, cast("Source", source), archive_root, chunk_size,
                   not no_progress)

    def run(self, bootstrap: str, output: OutputTarget, *, app: str, seed: bool = False) -> BackfillResult:
        """One Spark session for one run: started with the processor's modules preloaded, always stopped."""
        from stylus.backfill.chain import chain_of
        from stylus.backfill.runner import backfill
        from stylus.backfill.session import processor_modules, spark_session

        spark = spark_session(self.master, app, preload=processor_modules(self.pipeline,
                                                                          chain_of(self.pipeline, self.name)))
        try:
            return backfill(spark, self.pipeline, self.name, bootstrap, self.lower, self.upper, output=output,
                            source=self.source, archive_root=self.archive_root, seed=seed,
                            chunk_size=self.chunk_size, progress=self.progress)
        finally:
            spark.stop()


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
    from stylus.extras import require

    require("spark", "stylus backfill")
    from stylus.backfill.runner import parse_output
    from stylus.cli.main import emit_result
    from stylus.runtime.runner import resolved_bootstrap

    request = SparkRun.from_options(pipeline_file, name, start, stop, master, source, archive_root, chunk_size,
                                    no_progress)
    pipeline = request.pipeline
    with resolved_bootstrap(pipeline) as bootstrap:
        result = request.run(bootstrap, parse_output(target), app="stylus-backfill", seed=seed_state)
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
