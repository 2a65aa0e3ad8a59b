"""`stylus backup list|restore PIPELINE --processor NAME`: inspect and restore RocksDB state backups."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from stylus.config.model import Pipeline, ProcessorSpec
from stylus.state.backup.manager import local_offset, pin_restored
from stylus.state.backup.repository import Manifest, PartitionBackups
from stylus.state.backup.target import target_for
from stylus.state.kv import RocksKV, StoreLocked


def output_option(func: Any) -> Any:
    return click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                        help="write the result to FILE instead of standard output")(func)


def _emit(text: str, output: str | None) -> None:
    from stylus.cli.main import emit_result

    emit_result(text, output)


def _load(path: str) -> Pipeline:
    from stylus.cli.main import load_or_exit

    return load_or_exit(path)


def _processor(pipeline: Pipeline, name: str) -> ProcessorSpec:
    if name not in pipeline.processors:
        raise click.BadParameter(f"no processor `{name}`; the pipeline has {sorted(pipeline.processors)}",
                                 param_hint="--processor")
    spec = pipeline.processors[name]
    if spec.state.backup is None:
        raise click.ClickException(f"processor `{name}` has no state.backup configured")
    return spec


def _repos(pipeline: Pipeline, name: str, spec: ProcessorSpec, partition: int | None) -> list[PartitionBackups]:
    assert spec.state.backup is not None
    target = target_for(spec.state.backup.uri, timeout=spec.state.backup.timeout)
    repos = []
    for topic in spec.inputs:
        count = pipeline.topics[topic].partitions
        if partition is not None and not 0 <= partition < count:
            raise click.BadParameter(f"topic `{topic}` has partitions 0..{count - 1}", param_hint="--partition")
        for p in range(count) if partition is None else [partition]:
            repos.append(PartitionBackups(target, pipeline.pipeline, name, topic, p))
    return repos


def _when(manifest: Manifest) -> str:
    return datetime.fromtimestamp(manifest.created_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


@click.group()
def backup() -> None:
    """List or restore RocksDB state backups (state.backup)."""


@backup.command("list")
@click.argument("pipeline_file", type=click.Path())
@click.option("--processor", "name", required=True, help="the stateful processor")
@click.option("--partition", type=int, default=None, help="only this input partition")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@output_option
def backup_list(pipeline_file: str, name: str, partition: int | None, as_json: bool, output: str | None) -> None:
    """Backups per input partition, newest first."""
    pipeline = _load(pipeline_file)
    spec = _processor(pipeline, name)
    rows = []
    for repo in _repos(pipeline, name, spec, partition):
        for manifest in repo.manifests():
            rows.append(manifest)
    if as_json:
        _emit(json.dumps([{"id": m.id, "topic": m.topic, "partition": m.partition, "offset": m.offset,
                                 "created_ms": m.created_ms, "files": len(m.files), "bytes": m.size}
                                for m in rows], indent=2) + "\n", output)
        return
    assert spec.state.backup is not None
    if not rows:
        _emit(f"no backups of `{name}` at {spec.state.backup.uri}\n", output)
        return
    width = max(len(f"{m.topic}[{m.partition}]") for m in rows)
    lines = [f"{'partition':<{width}}  {'backup id':<40}  {'offset':>10}  {'created (UTC)':<19}  {'files':>5}  size"]
    lines += [f"{f'{m.topic}[{m.partition}]':<{width}}  {m.id:<40}  {m.offset if m.offset is not None else '-':>10}"
              f"  {_when(m)}  {len(m.files):>5}  {m.size / 1e6:.1f} MB" for m in rows]
    _emit("\n".join(lines) + "\n", output)


@backup.command("restore")
@click.argument("pipeline_file", type=click.Path())
@click.option("--processor", "name", required=True, help="the stateful processor")
@click.option("--partition", type=int, default=None, help="only this input partition (default: all)")
@click.option("--backup", "backup_id", default=None, help="this backup id (default: the newest usable one)")
@click.option("--threads", type=int, default=4, show_default=True, help="parallel file downloads")
@click.option("--drop-newer", is_flag=True, help="delete the backups newer than the one restored (a rollback)")
@click.option("--yes", "-y", is_flag=True, help="do not ask before --drop-newer deletes backups")
@output_option
def backup_restore(pipeline_file: str, name: str, partition: int | None, backup_id: str | None, threads: int,
                   drop_newer: bool, yes: bool, output: str | None) -> None:
    """Replace the local state of the processor's partitions by a backup. The processor must be stopped;
    when it starts, it keeps this state (even if newer backups exist) and replays from the backup's offset
    to the group's committed offset, output suppressed. --drop-newer also deletes the newer backups, so a
    machine lost before the next backup cannot bring back the state rolled back from."""
    pipeline = _load(pipeline_file)
    spec = _processor(pipeline, name)
    repos = _repos(pipeline, name, spec, partition)
    if backup_id is not None and len(repos) != 1:
        raise click.BadParameter("--backup needs --partition (ids are per partition)", param_hint="--backup")
    lines = []
    for repo in repos:
        dest = Path(spec.state.dir) / pipeline.pipeline / name / f"{repo.topic}-{repo.partition}"
        if (dest / "CURRENT").exists():
            try:  # refuse to pull the database from under a running instance
                RocksKV(dest, lock_wait=0).close()
            except StoreLocked as exc:
                raise click.ClickException(f"{dest} is in use by a running instance; stop it first") from exc
        before = local_offset(dest)
        bar: list[Any] = []  # the current file-set's progress bar (a new one when a backup is skipped)
        started = time.monotonic()

        def on_start(manifest: Manifest, bar: list[Any] = bar, repo: PartitionBackups = repo) -> None:
            if bar:
                bar[0].render_finish()
                bar.clear()
            stderr: Any = sys.stderr
            bar.append(click.progressbar(length=manifest.size, label=f"{repo.label} {manifest.id}", file=stderr,
                                         show_pos=True))
            bar[0].render_progress()  # shown at once, not only after the first chunk

        def progress(n: int, bar: list[Any] = bar) -> None:
            if bar:
                bar[0].update(n)

        restored = repo.restore(dest, backup_id=backup_id, threads=threads, progress=progress, on_start=on_start)
        if bar:
            bar[0].render_finish()
        if restored is None:
            raise click.ClickException(f"{repo.label}: no usable backup"
                                       + (f" with id {backup_id}" if backup_id else ""))
        pin_restored(dest, restored)  # the worker keeps it rather than restoring a newer backup
        seconds = time.monotonic() - started
        lines.append(f"{repo.label}: restored {restored.id} (offset {restored.offset}; local state was "
                     f"{'missing' if before is None else f'at offset {before}'}) {restored.size / 1e6:.1f} MB in "
                     f"{seconds:.2f}s")
        newer = [i for i in repo.manifest_ids() if i > restored.id]
        if drop_newer and newer:
            if not yes:
                click.confirm(f"{repo.label}: delete {len(newer)} newer backups ({', '.join(newer)})?", abort=True,
                              err=True)
            for dropped in newer:
                repo.drop(dropped)
            lines.append(f"{repo.label}: dropped {len(newer)} newer backups: {', '.join(newer)}")
    _emit("\n".join(lines) + "\n", output)
