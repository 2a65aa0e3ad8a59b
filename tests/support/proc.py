"""What a running process uses, read from /proc (memory tests and the soak)."""

from __future__ import annotations

from pathlib import Path


def rss_mb(pid: int) -> float | None:
    """Resident memory in MB; None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
