"""Writer locks: one writer per dataset and per CSR variant, across processes and hosts.

Contract
--------
:func:`writer_lock` holds the lock file of a dataset (:func:`dataset_lock`)
or of a CSR variant (:func:`variant_lock`) while the block runs. An
exclusive holder (generation, removal, a variant's build) excludes every
other holder; shared holders (builders of variants, which read the dataset's
edges) exclude only exclusive ones, so ``generate --force`` never replaces a
dataset under a running build. A second writer waits, saying once on stderr
whom it waits for, and then re-checks what the first one left (the callers
reuse a complete result). Nobody removes another writer's temporary
directory: temporaries are cleaned only by the holder of the lock.

Encoding: the lock file ``<root>/.<dataset>.lock`` (or
``<root>/.<dataset>.csr-<variant>.lock``) holds one JSON object naming the
exclusive owner: ``pid``, ``host``, ``started`` (UTC ISO), ``what``. Lock
files live in the datasets root, never inside a zarr group.

Method: ``flock(2)`` on the lock file. The kernel drops the lock when its
holder exits, however it exits, so a lock whose owner pid is gone is free
(stale) by construction and the next writer takes it at once; the JSON only
names the owner. An exclusive holder unlinks the file before it lets go, and
a taker that finds its file unlinked or replaced retries (the usual
lock-file-with-unlink protocol). On a filesystem without ``flock`` the
block runs unlocked after a one-line warning.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

from dbfs.errors import DbfsError
from dbfs.progress import say

__all__ = ["dataset_lock", "variant_lock", "writer_lock", "owner_line"]

_POLL = 0.2  # seconds between attempts while waiting
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def dataset_lock(root, name: str) -> Path:
    """The lock file of dataset ``name`` under datasets root ``root``."""
    return Path(root) / f".{name}.lock"


def variant_lock(dataset_path, variant: str) -> Path:
    """The lock file of CSR variant ``variant`` of the dataset at ``dataset_path``."""
    p = Path(dataset_path)
    return p.parent / f".{p.name}.csr-{variant}.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_line(lock: Path) -> str:
    """Who holds ``lock``, as the JSON in it says (for status lines and errors)."""
    try:
        doc = json.loads(Path(lock).read_text() or "{}")
    except (OSError, ValueError):
        doc = {}
    pid, host = doc.get("pid"), doc.get("host")
    if not isinstance(pid, int) or not host:
        return f"another process (lock file {lock})"
    if host == socket.gethostname() and not _alive(pid):
        return f"a process started by pid {pid}, which is gone (lock file {lock})"
    return f"pid {pid} on {host} (since {doc.get('started', '?')})"


def _take(lock: Path, mode: int):
    """One attempt: an open fd holding ``mode`` on the current file at ``lock``, or None when busy."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder we waited for unlinked it: take the new file


def _write_owner(fd: int, what: str) -> None:
    doc = {"pid": os.getpid(), "host": socket.gethostname(), "what": what,
           "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(doc).encode(), 0)
    except OSError:
        pass  # a full disk: the lock holds without its note


def _acquire(lock: Path, mode: int, what: str, wait: bool, quiet: bool):
    """(fd, seconds waited); fd None when locking is unsupported here."""
    t0 = time.monotonic()
    told = False
    while True:
        try:
            fd = _take(lock, mode)
        except OSError as e:
            if e.errno in _NO_FLOCK:
                say(f"cannot lock {lock} ({e.strerror}): concurrent writers of {what} are not excluded here",
                    quiet)
                return None, 0.0
            raise
        if fd is not None:
            if not told:
                return fd, 0.0
            waited = time.monotonic() - t0
            say(f"lock on {what} free after {waited:.1f} s", quiet)
            return fd, max(waited, 1e-9)
        if not wait:
            raise DbfsError(f"{what} is being written by {owner_line(lock)}: wait for it to finish "
                            f"(or stop that process) and try again")
        if not told:
            say(f"waiting for {owner_line(lock)}, which is writing {what}", quiet)
            told = True
        time.sleep(_POLL)


@contextlib.contextmanager
def writer_lock(lock, what: str, shared: bool = False, wait: bool = True, quiet: bool = False):
    """Hold ``lock`` while the block runs (see the module docstring).

    Parameters
    ----------
    lock : path-like
        The lock file (:func:`dataset_lock`, :func:`variant_lock`); its
        directory must exist.
    what : str
        What is being written, for status lines (``"dataset kron-s16-..."``).
    shared : bool
        Take it shared (readers of the dataset that write beside it).
    wait : bool
        Wait for a holder (with one status line); False raises DbfsError.
    quiet : bool
        No status lines.

    Yields
    ------
    float
        Seconds spent waiting (0.0 when the lock was free).
    """
    lock = Path(lock)
    try:
        fd, waited = _acquire(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, what, wait, quiet)
    except PermissionError:
        raise DbfsError(f"cannot create the lock file {lock} (permission denied): pass --datasets DIR "
                        f"on a writable disk") from None
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DbfsError(f"no space left on device creating the lock file {lock}: free space or pass "
                            f"--datasets DIR on a larger disk") from None
        raise
    if fd is None:
        yield 0.0
        return
    try:
        if not shared:
            _write_owner(fd, what)
        yield waited
    finally:
        if not shared:
            with contextlib.suppress(OSError):
                os.unlink(lock)
        os.close(fd)
