"""`stylus ui PIPELINE [--port N]`: serve the built-in status page until SIGTERM/SIGINT."""

from __future__ import annotations

import click


@click.command()
@click.argument("pipeline_file", type=click.Path())
@click.option("--port", type=int, default=8080, show_default=True, help="port to listen on (0: a free one)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--interval", type=float, default=2.0, show_default=True, help="seconds between Kafka samples")
def ui(pipeline_file: str, port: int, host: str, interval: float) -> None:
    """Serve the built-in status page: the DAG with live lag and throughput, alerts, likely cause."""
    import signal
    import sys
    import threading

    from stylus.cli.main import load_or_exit
    from stylus.monitoring.ui import StatusServer
    from stylus.runtime.runner import resolved_bootstrap

    pipeline = load_or_exit(pipeline_file)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with resolved_bootstrap(pipeline) as bootstrap:
        server = StatusServer(pipeline, bootstrap, port, host, interval=interval).start()
        click.echo(server.url)
        sys.stdout.flush()
        try:
            stop.wait()
        finally:
            server.stop()
