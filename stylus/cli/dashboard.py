"""`stylus dashboard PIPELINE`: a Grafana dashboard (JSON) for the pipeline, built with grafanalib."""

from __future__ import annotations

import click


# --output is declared here: main.py imports this module at its bottom (circular under `python -m`).
@click.command()
@click.argument("pipeline_file", type=click.Path())
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="write the result to FILE instead of standard output")
def dashboard(pipeline_file: str, output: str | None) -> None:
    """Print a Grafana dashboard (JSON) for the pipeline."""
    from stylus.cli.main import emit_result, load_or_exit
    from stylus.extras import require

    require("grafana", "stylus dashboard")
    from stylus.monitoring.dashboard import render_dashboard

    emit_result(render_dashboard(load_or_exit(pipeline_file)), output)
