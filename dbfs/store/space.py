"""Disk space: checks before a write and the one-line error when a disk fills during one.

Contract
--------
:func:`check_room` refuses, before anything is written, a write whose
upper-bound size (plus a 64 MiB margin) exceeds the free space of the
target's filesystem. :func:`no_space` turns an ``OSError`` with errno
``ENOSPC`` (or ``EDQUOT``, or a short write) raised at any writing stage into a one-line
:class:`~dbfs.errors.DbfsError` naming the path, the bytes the stage needs
and the bytes free; the callers remove their temporaries first, so the
free figure is what the user can work with and stored data is as it was.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from dbfs.errors import DbfsError
from dbfs.units import human

__all__ = ["check_room", "is_no_space", "no_space", "free_bytes"]

MARGIN = 64 << 20


def free_bytes(path) -> int:
    """Free bytes of the filesystem holding ``path`` (its nearest existing ancestor)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return int(shutil.disk_usage(p).free)
    except OSError:
        return 0


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a full disk or quota (``ENOSPC``, ``EDQUOT``), or a short write without an
    errno (``numpy.ndarray.tofile``: ``"N requested and K written"``), which on a local file means the same."""
    if not isinstance(exc, OSError):
        return False
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return exc.errno is None and bool(re.search(r"\d+ requested and \d+ written", str(exc)))


def no_space(exc: OSError, path, need: int, what: str, fix: str = "free space or pass --datasets DIR on a larger disk"
             ) -> DbfsError:
    """The one-line error for a disk that filled while writing ``what`` under ``path``.

    Parameters
    ----------
    exc : OSError
        The ``ENOSPC`` error (its ``filename`` is named when set).
    path : path-like
        Where the stage writes (named when the error has no file name).
    need : int
        Upper bound of the bytes the stage writes.
    what : str
        The stage, e.g. ``"dataset kron-s20-ef16-s2-3"``.
    fix : str
        The last part of the message.

    Returns
    -------
    DbfsError
    """
    where = exc.filename or path
    free = free_bytes(path)
    return DbfsError(f"no space left on device writing {what} at {where}: it needs up to {human(need)} "
                     f"({need:,} B), {human(free)} ({free:,} B) are free; temporary files were removed: {fix}")


def check_room(root: Path, need: int) -> None:
    """Create ``root`` and refuse, before any write, when it cannot take ``need`` bytes.

    Parameters
    ----------
    root : pathlib.Path
        The datasets root.
    need : int
        Upper bound of the bytes to be written.

    Raises
    ------
    DbfsError
        Naming the directory, the free and the needed space, and the fix.
    """
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DbfsError(f"cannot create datasets directory {root} ({e.strerror}): pass --datasets DIR on a writable disk") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DbfsError(f"datasets directory {root} is not writable: pass --datasets DIR on a writable disk")
    free = shutil.disk_usage(root).free
    if free < need + MARGIN:
        raise DbfsError(f"datasets directory {root} has {free / 2**30:.2f} GiB free but this dataset needs up to "
                        f"{(need + MARGIN) / 2**30:.2f} GiB: free space or pass --datasets DIR on a larger disk")
