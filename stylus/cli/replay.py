"""`stylus replay`: run the current code over past input into a shadow topic, optionally diffing it with
what the live processor emitted (the paper's way to reproduce a problem: read the same input again)."""

from __future__ import annotations

import sys

import click

from stylus.cli.backfill import SparkRun, common_options


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
    from stylus.extras import require

    require("spark", "stylus replay")
    from stylus.backfill.diff import diff_outputs, live_outputs, replayed
    from stylus.backfill.outputs import OutputTarget
    from stylus.cli.main import emit_result
    from stylus.runtime.runner import resolved_bootstrap

    request = SparkRun.from_options(pipeline_file, name, start, stop, master, source, archive_root, chunk_size,
                                    no_progress)
    pipeline, lower, upper = request.pipeline, request.lower, request.upper
    if shadow in pipeline.topics:
        raise click.BadParameter(f"`{shadow}` is a pipeline topic; a shadow topic must be a new one",
                                 param_hint="--shadow")
    with resolved_bootstrap(pipeline) as bootstrap:
        result = request.run(bootstrap, OutputTarget(kind="topic", topic=shadow, collect=show_diff),
                             app="stylus-replay")
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
