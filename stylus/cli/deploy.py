"""`stylus deploy compose|k8s PIPELINE`: per-processor container deployment rendered from the YAML."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from stylus.deploy.common import DeployError, DeployOptions

F = TypeVar("F", bound=Callable[..., Any])


def _common_options(func: F) -> F:
    func = click.option("--image", default="stylus:latest", show_default=True,
                        help="the processor image (docker/Dockerfile)")(func)
    func = click.option("--metrics-port", type=int, default=9400, show_default=True,
                        help="port of each container's metrics, /healthz and /readyz")(func)
    func = click.option("--profile", default=None,
                        help="STYLUS_PROFILE for the containers (default: compose / production)")(func)
    # Not stylus.cli.main.output_option: main.py imports this module at its bottom, and under
    # `python -m stylus.cli.main` a top-level import back into it would be circular.
    return click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                        help="write the result to FILE instead of standard output")(func)


def _render(renderer: Callable[..., str], pipeline_file: str, output: str | None, **options: Any) -> None:
    from stylus.cli.main import emit_result, load_or_exit

    pipeline = load_or_exit(pipeline_file)
    text = Path(pipeline_file).read_text()
    try:
        rendered = renderer(pipeline, text, DeployOptions(**options))
    except DeployError as exc:
        raise click.ClickException(str(exc)) from exc
    emit_result(rendered, output)


@click.group()
def deploy() -> None:
    """Render the pipeline as containers: one service / workload per processor."""


@deploy.command("compose")
@click.argument("pipeline_file", type=click.Path())
@_common_options
@click.option("--spark-image", default="stylus-spark:latest", show_default=True,
              help="the Spark master/worker image (docker/Dockerfile, target spark)")
def compose(pipeline_file: str, output: str | None, **options: Any) -> None:
    """Print a Compose file: processors, Kafka, HDFS, Spark, Prometheus and Grafana."""
    from stylus.deploy.compose import render_compose

    _render(render_compose, pipeline_file, output, **options)


@deploy.command("k8s")
@click.argument("pipeline_file", type=click.Path())
@_common_options
@click.option("--namespace", default=None, help="metadata.namespace of every object")
@click.option("--kafka-bootstrap", default="kafka:9092", show_default=True,
              help="KAFKA_BOOTSTRAP_SERVERS handed to the production profile")
@click.option("--storage", default="10Gi", show_default=True, help="state volume size per stateful pod")
@click.option("--storage-class", default=None, help="storageClassName of the state volumes")
def k8s(pipeline_file: str, output: str | None, **options: Any) -> None:
    """Print Kubernetes manifests (multi-document YAML)."""
    from stylus.deploy.k8s import render_k8s

    _render(render_k8s, pipeline_file, output, **options)
