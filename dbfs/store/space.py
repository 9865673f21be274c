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

:func:`choose_edges` decides where ``dbfs generate --edges auto`` puts an edge
list: ``stored`` when the free space holds the raw edge bytes plus a quarter
of them plus the 64 MiB margin (room left for what the next stages write),
``virtual`` (:mod:`.virtual`) otherwise, with the reason as a sentence.

Free space is the filesystem's (``shutil.disk_usage``), capped by
``$DBFS_DISK_BUDGET`` (a size such as ``8MiB``) when set: a documented way
to run with less room than the disk has, e.g. to keep a shared disk free
or to exercise the short-space paths in tests. Every check here honours it.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from dbfs.errors import DbfsError
from dbfs.units import human, parse_size

__all__ = ["check_room", "is_no_space", "no_space", "free_bytes", "choose_edges", "ENV_BUDGET"]

MARGIN = 64 << 20
ENV_BUDGET = "DBFS_DISK_BUDGET"


def _budget() -> int | None:
    """``$DBFS_DISK_BUDGET`` in bytes, or None when unset (a bad value is a one-line DbfsError)."""
    text = os.environ.get(ENV_BUDGET, "").strip()
    return parse_size(text, f"${ENV_BUDGET}") if text else None


def free_bytes(path) -> int:
    """Free bytes of the filesystem holding ``path`` (its nearest existing ancestor), capped by
    ``$DBFS_DISK_BUDGET`` when set."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        free = int(shutil.disk_usage(p).free)
    except OSError:
        free = 0
    cap = _budget()
    return free if cap is None else min(free, cap)


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


def check_room(root: Path, need: int, margin: int = MARGIN) -> None:
    """Create ``root`` and refuse, before any write, when it cannot take ``need`` bytes.

    Parameters
    ----------
    root : pathlib.Path
        The datasets root.
    need : int
        Upper bound of the bytes to be written.
    margin : int
        Room kept free beyond ``need`` (64 MiB; a virtual dataset, which
        writes only its attributes, passes 0).

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
    free = free_bytes(root)
    if free < need + margin:
        raise DbfsError(f"datasets directory {root} has {free / 2**30:.2f} GiB free ({human(free)}) but this dataset "
                        f"needs up to {(need + margin) / 2**30:.2f} GiB ({human(need + margin)}): free space or pass "
                        f"--datasets DIR on a larger disk")


def choose_edges(root: Path, need: int) -> tuple[str, str]:
    """Where ``--edges auto`` puts an edge list of ``need`` raw bytes under ``root``.

    Parameters
    ----------
    root : pathlib.Path
        The datasets root.
    need : int
        Upper bound of the stored edge bytes.

    Returns
    -------
    (str, str)
        ``"stored"`` or ``"virtual"``, and the reason (free and needed bytes).
    """
    free = free_bytes(root)
    want = need + need // 4 + MARGIN
    verdict = "stored" if free >= want else "virtual"
    capped = f" (capped by ${ENV_BUDGET})" if _budget() is not None else ""
    return verdict, (f"{human(free)} free{capped}, the edges need {human(need)} + 25% + {human(MARGIN)} margin "
                     f"= {human(want)}")
