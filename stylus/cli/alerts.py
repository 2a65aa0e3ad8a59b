"""`stylus alerts PIPELINE`: Prometheus alerting rules for the pipeline (thresholds from its YAML);
with `--scrape-config`, a prometheus.yml that scrapes its `stylus run --metrics-port` endpoints."""

from __future__ import annotations

import click


# --output is declared here: main.py imports this module at its bottom (circular under `python -m`).
@click.command()
@click.argument("pipeline_file", type=click.Path())
@click.option("--scrape-config", is_flag=True, help="print a prometheus.yml scrape config instead of the rules")
@click.option("--target", "targets", multiple=True, metavar="HOST:PORT",
              help="metrics endpoint to scrape (repeatable; with --scrape-config)")
@click.option("--rules-file", default=None, help="rule file the scrape config loads (default: PIPELINE.rules.yml)")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="write the result to FILE instead of standard output")
def alerts(pipeline_file: str, scrape_config: bool, targets: tuple[str, ...], rules_file: str | None,
           output: str | None) -> None:
    """Print Prometheus alerting rules for the pipeline."""
    from stylus.cli.main import emit_result, load_or_exit
    from stylus.monitoring import alerts as rules

    pipeline = load_or_exit(pipeline_file)
    if scrape_config:
        text = rules.scrape_config(pipeline, list(targets) or ["127.0.0.1:9100"],
                                   [rules_file] if rules_file else None)
    else:
        text = rules.render_rules(pipeline)
    emit_result(text, output)
