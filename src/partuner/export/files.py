"""Files partuner writes: whole or not at all (a temporary file renamed), with the mode the
user's umask gives, not ``tempfile``'s private one."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "default_mode"]


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc), else set and
    restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(path: str | Path) -> None:
    """Give ``path`` the mode ``open()`` or ``mkdir()`` would have given it under the umask
    (``tempfile`` makes its files 0600 and folders 0700)."""
    p = Path(path)
    p.chmod((0o777 if p.is_dir() else 0o666) & ~_umask())


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (no half-written file).

    The file gets the mode an existing ``path`` has, else the one ``open()`` gives under the
    umask."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else None
    except OSError:
        mode = None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        if mode is None:
            default_mode(tmp)
        else:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
