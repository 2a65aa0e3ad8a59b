"""`stylus` CLI. Each command prints its result on stdout (or `--output FILE`) and exits non-zero
with a clear message on error."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from stylus.config import PipelineError, load_pipeline
from stylus.config.model import Pipeline

F = TypeVar("F", bound=Callable[..., Any])


def setup_logging(verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else getattr(logging, os.environ.get("STYLUS_LOG_LEVEL", "INFO").upper(),
                                                  logging.INFO)
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    # the Kafka client's own log lines (where a client forwards them: stylus/kafka/reach.py) only with -v
    logging.getLogger("stylus.kafka.client").setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)


def emit_result(text: str, output: str | None) -> None:
    from stylus.config.secrets import scrub

    text = scrub(text)  # no command prints a secret from the pipeline's kafka settings
    if output:
        Path(output).write_text(text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=not text.endswith("\n"))


def output_option(func: F) -> F:
    return click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                        help="write the result to FILE instead of standard output")(func)


def load_or_exit(path: str, *, import_classes: bool = False) -> Pipeline:
    try:
        return load_pipeline(path, import_classes=import_classes)
    except PipelineError as exc:
        click.echo(f"error: invalid pipeline\n{exc}", err=True)
        sys.exit(2)


class StylusGroup(click.Group):
    """Turns expected failures into one clear line on stderr and a non-zero exit."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as exc:
            if os.environ.get("STYLUS_DEBUG"):
                raise
            from stylus.config.secrets import scrub
            from stylus.errors import ClearError

            if isinstance(exc, ClearError):  # its message names the setting, its origin and the fix
                click.echo(scrub(f"error: {exc}"), err=True)
                sys.exit(1)

            click.echo(scrub(f"error: {type(exc).__name__}: {exc}"), err=True)
            sys.exit(1)


@click.group(cls=StylusGroup)
@click.option("--verbose", "-v", is_flag=True, help="debug logging, including the Kafka client's own log")
def cli(verbose: bool) -> None:
    """Stylus: realtime processors on Kafka with local RocksDB state."""
    setup_logging(verbose)


@cli.command()
@click.argument("pipeline_file", type=click.Path())
@output_option
def validate(pipeline_file: str, output: str | None) -> None:
    """Check the YAML and import every processor class."""
    from stylus.cli.cluster import check_cluster
    from stylus.describe import describe

    pipeline = load_or_exit(pipeline_file, import_classes=True)
    note = check_cluster(pipeline)  # a reachable configured broker: its topics must match the declarations
    emit_result(f"ok: {pipeline_file} is valid\n" + (f"{note}\n" if note else "") + describe(pipeline), output)


@cli.command()
@click.argument("pipeline_file", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "dot", "mermaid"]), default="text")
@output_option
def graph(pipeline_file: str, fmt: str, output: str | None) -> None:
    """Draw the DAG."""
    from stylus.graph import RENDERERS

    emit_result(RENDERERS[fmt](load_or_exit(pipeline_file)), output)


@cli.group()
def topics() -> None:
    """Topic administration."""


@topics.command("create")
@click.argument("pipeline_file", type=click.Path())
@output_option
def topics_create(pipeline_file: str, output: str | None) -> None:
    """Create the topics the pipeline declares (and its dead-letter topics)."""
    from stylus.kafka.admin import create_topics, pipeline_topics
    from stylus.runtime.runner import resolved_bootstrap

    pipeline = load_or_exit(pipeline_file)
    with resolved_bootstrap(pipeline) as bootstrap:
        result = create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
    width = max(len(t) for t in result)
    specs = {**pipeline.topics}
    lines = [f"{t:<{width}}  {state:<7}  {specs[t].partitions if t in specs else '-'} partitions"
             for t, state in sorted(result.items())]
    emit_result("\n".join(lines) + "\n", output)


@cli.command()
@click.argument("pipeline_file", type=click.Path())
@click.option("--processor", "processors", multiple=True, help="run only this processor (repeatable)")
@click.option("--exit-when-idle", type=float, default=None, metavar="SECONDS",
              help="stop once every input has been fully consumed for this long")
@click.option("--instance", default=None, help="instance id, for logs and client ids (default: host-pid)")
@output_option
@click.option("--metrics-port", type=int, default=None, metavar="N",
              help="serve Prometheus /metrics, /healthz and /readyz on this port")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="address for --metrics-port")
def run(pipeline_file: str, processors: tuple[str, ...], exit_when_idle: float | None,
        instance: str | None, output: str | None, metrics_port: int | None, metrics_host: str) -> None:
    """Run processors (all when none is named) until SIGTERM/SIGINT."""
    import socket

    from stylus.runtime.runner import PipelineRunner, resolved_bootstrap
    from stylus.sql.expand import stages_of

    pipeline = load_or_exit(pipeline_file, import_classes=True)
    chosen: list[str] = []
    for name in processors:
        stages = stages_of(pipeline, name)  # a processor, or every table of a `sql:` app of that name
        if not stages:
            raise click.BadParameter(f"no processor `{name}`; the pipeline has {sorted(pipeline.processors)}",
                                     param_hint="--processor")
        chosen += [s for s in stages if s not in chosen]
    processors = tuple(chosen)
    with resolved_bootstrap(pipeline) as bootstrap:
        click.echo(f"bootstrap servers: {bootstrap}", err=True)
        runner = PipelineRunner(pipeline, bootstrap, list(processors) or None, exit_when_idle=exit_when_idle,
                                instance=instance or f"{socket.gethostname()}-{os.getpid()}")
        from stylus.monitoring.server import serve_metrics

        with serve_metrics(runner, metrics_port, metrics_host):
            code = runner.run()
    summary = "\n".join(
        f"{name}: processed {w.processed} records, {w.checkpoints} checkpoints"
        + (f", FAILED: {runner.errors[name]}" if name in runner.errors else "")
        for name, w in runner.workers.items()
    )
    emit_result(summary + "\n", output)
    sys.exit(code)


@cli.command()
@click.option("--port", type=int, default=None, help="port to listen on (default: a free one)")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None,
              help="keep the broker's log and metadata here across restarts (default: a temporary folder)")
def broker(port: int | None, data_dir: str | None) -> None:
    """Run Apache Kafka (one KRaft node, jars from `make install`) in the foreground."""
    import signal
    import threading

    from stylus.kafka.broker import EmbeddedBroker

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedBroker(port, data_dir=data_dir) as embedded:
        click.echo(embedded.bootstrap)
        click.echo(f"Apache Kafka ready in {embedded.started_in:.1f} s; data in {embedded.data_dir}, "
                   f"log in {embedded.log_file}", err=True)
        sys.stdout.flush()
        while not stop.wait(0.5):
            if embedded.process is None or embedded.process.poll() is not None:
                raise click.ClickException(f"Apache Kafka exited; see {embedded.log_file}")


@cli.command()
@click.option("--duration", type=float, default=None, metavar="SECONDS", help="stop by itself after this long")
@click.option("--rate", type=int, default=2000, help="generated events per second")
@click.option("--pipeline", "pipeline_file", type=click.Path(), default=None,
              help="pipeline file (default: pipelines/trending_events.yaml)")
@click.option("--plain", is_flag=True, help="print updates line by line instead of redrawing the screen")
def demo(duration: float | None, rate: int, pipeline_file: str | None, plain: bool) -> None:
    """The trending-events pipeline end to end on the embedded broker, with a live ranking."""
    from stylus.demo import run_demo

    sys.exit(run_demo(pipeline_file, duration=duration, rate=rate, plain=plain))


# --- commands that live in their own modules register here, one line each --------------------------
from stylus.cli.lag import lag  # noqa: E402

cli.add_command(lag)
from stylus.cli.alerts import alerts  # noqa: E402

cli.add_command(alerts)
from stylus.cli.dashboard import dashboard  # noqa: E402

cli.add_command(dashboard)
from stylus.cli.ui import ui  # noqa: E402

cli.add_command(ui)
from stylus.cli.deploy import deploy  # noqa: E402

cli.add_command(deploy)
from stylus.cli.dlq import dlq  # noqa: E402

cli.add_command(dlq)
from stylus.cli.backfill import backfill_command  # noqa: E402

cli.add_command(backfill_command)
from stylus.cli.replay import replay_command  # noqa: E402

cli.add_command(replay_command)
from stylus.cli.backup import backup  # noqa: E402

cli.add_command(backup)
from stylus.cli.nexmark import nexmark  # noqa: E402

cli.add_command(nexmark)

from stylus.cli.tables import serve, table  # noqa: E402

cli.add_command(table)
cli.add_command(serve)


def main() -> None:
    cli(prog_name="stylus")


if __name__ == "__main__":
    main()
