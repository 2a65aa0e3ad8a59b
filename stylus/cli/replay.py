"""`stylus replay`: run the current code over past input into a shadow topic, optionally diffing it with
what the live processor emitted (the paper's way to reproduce a problem: read the same input again)."""

from __future__ import annotations

import sys

import click

from stylus.cli.backfill import common_options


@click.command("replay")
@click.argument("pipeline_file", type=click.Path())
@common_options
@click.option("--shadow", required=True, metavar="TOPIC",
              help="topic receiving every emitted record (original topic in header stylus.topic)")
@click.option("--diff", "show_diff", is_flag=True,
              help="compare with the live outputs for the same input; exit 1 when they differ")
@click.option("--limit", type=int, default=10, show_default=True, help="differences to print")
@click.option("--output", "-o", "output", type=click.Path(dir_okay=False), default=None,
              help="write the result to FILE instead of standard output")
def replay_command(pipeline_file: str, name: str, start: str | None, stop: str | None, master: str | None,
                   source: str, archive_root: str | None, chunk_size: int, no_progress: bool, shadow: str,
                   show_diff: bool, limit: int, output: str | None) -> None:
    """Re-run current code over past input into a shadow topic."""
    from stylus.backfill.bounds import parse_bound
    from stylus.backfill.diff import diff_outputs, live_outputs, replayed
    from stylus.backfill.outputs import OutputTarget
    from stylus.backfill.runner import backfill
    from stylus.backfill.session import processor_modules, spark_session
    from stylus.cli.main import emit_result, load_or_exit
    from stylus.runtime.runner import resolved_bootstrap

    pipeline = load_or_exit(pipeline_file, import_classes=True)
    if name not in pipeline.processors:
        raise click.BadParameter(f"no processor `{name}`; the pipeline has {sorted(pipeline.processors)}",
                                 param_hint="--processor")
    if shadow in pipeline.topics:
        raise click.BadParameter(f"`{shadow}` is a pipeline topic; a shadow topic must be a new one",
                                 param_hint="--shadow")
    try:
        lower, upper = parse_bound(start, default="earliest"), parse_bound(stop, default="latest")
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    with resolved_bootstrap(pipeline) as bootstrap:
        spark = spark_session(master, "stylus-replay", preload=processor_modules(pipeline, [name]))
        try:
            result = backfill(spark, pipeline, name, bootstrap, lower, upper,
                              output=OutputTarget(kind="topic", topic=shadow, collect=show_diff),
                              source=source, archive_root=archive_root,  # type: ignore[arg-type]
                              chunk_size=chunk_size, progress=not no_progress)
        finally:
            spark.stop()
        text = result.summary() + f"  replayed into {shadow}\n"
        code = 0
        if show_diff:
            mine = replayed(result.emitted)
            if mine:
                lo = min(e.timestamp for e in result.emitted)
                hi = max(e.timestamp for e in result.emitted)
                lo = max(lo, lower.time_ms) if lower.time_ms is not None else lo
                hi = min(hi, upper.time_ms - 1) if upper.time_ms is not None else hi
                live = live_outputs(bootstrap, pipeline, name, lo, hi)
            else:
                live = []
            lines = diff_outputs(live, mine, limit)
            if lines:
                code = 1
                text += f"differences (first {len(lines)}):\n" + "\n".join(f"  {line}" for line in lines) + "\n"
            else:
                text += f"no differences: {len(mine)} outputs match the live processor's\n"
    emit_result(text, output)
    sys.exit(code)
