"""Check that each processor's `state.dir` can be written before its worker starts.

RocksDB opens a partition's database only once the partition is assigned, on the worker's thread: a
directory it cannot write would end there in a traceback. Checked up front, it is one message naming
the setting, the path and the fix.
"""

from __future__ import annotations

import getpass
import tempfile
from pathlib import Path

from stylus.config.model import Pipeline, ProcessorSpec
from stylus.config.profiles import active_profile
from stylus.errors import ClearError


class StateDirUnwritable(ClearError):
    """A processor's local state directory cannot be created or written."""


def uses_local_state(spec: ProcessorSpec) -> bool:
    """RocksDB under `state.dir`: stateful processors on the rocksdb backend, and exactly-once output
    (whose checkpoints are staged there even for a stateless processor)."""
    return spec.state.backend == "rocksdb" and (spec.stateful or spec.semantics.output == "exactly_once")


def check_state_dirs(pipeline: Pipeline, names: list[str]) -> None:
    for name in names:
        spec = pipeline.processors[name]
        if uses_local_state(spec):
            check_state_dir(pipeline, name)


def check_state_dir(pipeline: Pipeline, name: str) -> None:
    """Create `{state.dir}/{pipeline}/{name}` and write a file in it, or raise `StateDirUnwritable`."""
    configured = pipeline.processors[name].state.dir
    path = Path(configured) / pipeline.pipeline / name
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".stylus-write-check-"):
            pass
    except OSError as exc:
        where = f" at {exc.filename}" if exc.filename and str(exc.filename) != configured else ""
        raise StateDirUnwritable(
            f"processors.{name}.state.dir: cannot write the state directory {configured} "
            f"({exc.strerror or exc}{where}), set in {_origin(pipeline, name)}; fix: point `state.dir` of "
            f"`{name}` at a directory that user {getpass.getuser()} can create and write "
            f"(e.g. `state: {{dir: ./.stylus/state}}`), or make {configured} writable"
        ) from exc


def _origin(pipeline: Pipeline, name: str) -> str:
    """The YAML, or the profile whose `defaults.state_dir` filled the unset setting."""
    profile = active_profile()
    if profile is not None and profile.defaults.state_dir == pipeline.processors[name].state.dir:
        return f"the profile `{profile.profile}` (defaults.state_dir) or {pipeline.source}"
    return pipeline.source
