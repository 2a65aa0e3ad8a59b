"""`stylus lag PIPELINE [--json]`: committed offset, end offset and lag (messages, seconds) per
processor and input partition, straight from Kafka (no running processor needed)."""

from __future__ import annotations

import json

import click

# The --output option is declared here, not imported: main.py imports this module at its bottom, and
# under `python -m stylus.cli.main` a top-level import back into it would be circular.

@click.command()
@click.argument("pipeline_file", type=click.Path())
@click.option("--processor", "processors", multiple=True, help="only this processor (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print JSON (one object per processor and partition)")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="write the result to FILE instead of standard output")
def lag(pipeline_file: str, processors: tuple[str, ...], as_json: bool, output: str | None) -> None:
    """Per processor and partition: committed offset, end offset, lag in messages and in seconds."""
    from stylus.cli.main import emit_result, load_or_exit
    from stylus.monitoring.lag import format_table, pipeline_lag
    from stylus.runtime.runner import resolved_bootstrap

    pipeline = load_or_exit(pipeline_file)
    for name in processors:
        if name not in pipeline.processors:
            raise click.BadParameter(f"no processor `{name}`; the pipeline has {sorted(pipeline.processors)}",
                                     param_hint="--processor")
    with resolved_bootstrap(pipeline) as bootstrap:
        rows = pipeline_lag(pipeline, bootstrap, list(processors) or None)
    if as_json:
        text = json.dumps({"pipeline": pipeline.pipeline, "partitions": [r.as_dict() for r in rows]}, indent=2)
        emit_result(text + "\n", output)
    else:
        emit_result(format_table(rows), output)
