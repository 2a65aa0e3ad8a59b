"""`stylus table load PIPELINE NAME --from FILE` and `stylus serve PIPELINE [--port N]` (docs/tables.md)."""

from __future__ import annotations

import click


@click.group()
def table() -> None:
    """Tables declared under `tables:` (docs/tables.md)."""


@table.command("load")
@click.argument("pipeline_file", type=click.Path())
@click.argument("name")
@click.option("--from", "source", type=click.Path(exists=True), required=True,
              help="a JSON-lines file (one object per row) or a Parquet file or directory")
@click.option("--key", default=None, help="the field holding each row's key (default: the table's `key`)")
def load(pipeline_file: str, name: str, source: str, key: str | None) -> None:
    """Produce the rows of a file into table NAME's topic, keyed by its key field."""
    from pathlib import Path

    from stylus.cli.main import load_or_exit
    from stylus.kafka.admin import create_topics, pipeline_topics
    from stylus.runtime.runner import resolved_bootstrap
    from stylus.tables.load import load_rows, read_rows

    pipeline = load_or_exit(pipeline_file)
    with resolved_bootstrap(pipeline) as bootstrap:
        create_topics(bootstrap, pipeline_topics(pipeline), pipeline)
        count = load_rows(bootstrap, pipeline, name, read_rows(Path(source)), key)
    click.echo(f"loaded {count} rows into table {name} (topic {pipeline.tables[name].topic})")


@click.command()
@click.argument("pipeline_file", type=click.Path())
@click.option("--port", type=int, default=8090, show_default=True, help="port to listen on (0: a free one)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--advertise", default=None, metavar="HOST:PORT",
              help="where the other instances reach this one (default: the listening address)")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default="./.stylus/tables", show_default=True,
              help="where the tables' local copies live")
def serve(pipeline_file: str, port: int, host: str, advertise: str | None, directory: str) -> None:
    """Serve the pipeline's tables: GET /tables/NAME/KEY answers the value as JSON, 404 when absent."""
    import signal
    import sys
    from pathlib import Path

    from stylus.cli.main import load_or_exit
    from stylus.extras import require
    from stylus.kafka.admin import create_topics
    from stylus.runtime.runner import resolved_bootstrap

    require("serve", "stylus serve")
    from stylus.tables.http import TableServer
    from stylus.tables.serving import ServingInstance

    pipeline = load_or_exit(pipeline_file)
    if not pipeline.tables:
        raise click.ClickException(f"{pipeline_file} declares no `tables:`; nothing to serve (docs/tables.md)")
    if advertise is None and host in ("0.0.0.0", "::", ""):
        raise click.ClickException(f"listening on {host!r}, the other instances need an address to forward to: "
                                   "pass --advertise HOST:PORT")
    with resolved_bootstrap(pipeline) as bootstrap:
        topics = {t.topic for t in pipeline.tables.values()}
        create_topics(bootstrap, {t: pipeline.topics[t] for t in topics}, pipeline)
        server = TableServer(host, port)
        instance = ServingInstance(pipeline, bootstrap, Path(directory), advertise or f"{host}:{server.port}")
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: instance.stop.set())
        server.start()  # answers 503 until the tables are loaded
        try:
            instance.start()
            server.instance = instance
            click.echo(f"serving tables {', '.join(sorted(pipeline.tables))} at http://{host}:{server.port}")
            sys.stdout.flush()
            instance.run()
        finally:
            server.stop()
            instance.close()
