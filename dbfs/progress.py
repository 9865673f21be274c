"""Progress and status output: the one place dbfs writes to stderr.

Contract
--------
- :func:`say` prints ``dbfs: <message>`` on stderr, unless quiet (the call's
  ``quiet`` argument, or :func:`set_quiet` for the whole process: ``dbfs -q``).
- :func:`compute` computes dask collections with a progress display: a live
  bar when stderr is a terminal; otherwise (a log, CI, SLURM output) exactly
  one line when the stage starts and one when it ends, no carriage returns.
- :func:`bar` is the same rule for loops this process drives itself (tqdm on a
  terminal, start/end lines otherwise).

stdout is never written here: it is reserved for results (the Graph500 block).
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

__all__ = ["say", "set_quiet", "is_quiet", "compute", "bar"]

_QUIET = False


def set_quiet(quiet: bool) -> None:
    """Silence (or restore) every status line of this process."""
    global _QUIET
    _QUIET = bool(quiet)


def is_quiet(quiet: bool = False) -> bool:
    return quiet or _QUIET


def say(msg: str, quiet: bool = False) -> None:
    """One status line on stderr: ``dbfs: msg``."""
    if not is_quiet(quiet):
        print(f"dbfs: {msg}", file=sys.stderr, flush=True)


def _tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def _stage(label: str, quiet: bool):
    """Start and end lines of a stage (the non-terminal form of a bar)."""
    say(f"{label} ...", quiet)
    t0 = time.perf_counter()
    yield
    say(f"{label}: done in {time.perf_counter() - t0:.1f} s", quiet)


def _threaded(tasks):
    """``dask.compute`` on a pool of this call's own, joined before returning
    even when a task failed: no task still writes after the caller cleans up."""
    from multiprocessing.pool import ThreadPool  # deferred: multiprocessing (CLI start)

    import dask  # deferred: dask (CLI start)

    pool = ThreadPool(os.cpu_count() or 1)
    try:
        return dask.compute(*tasks, scheduler="threads", pool=pool)
    finally:
        pool.close()
        pool.join()


def _gathered(client, futures):
    """``client.gather(futures)`` after every future finished (failed ones included),
    so no task still writes when a failure reaches the caller."""
    from distributed import wait  # deferred: distributed (CLI start)

    wait(futures)
    return client.gather(futures)


def compute(tasks, client, label: str, quiet: bool = False):
    """``dask.compute(*tasks)`` on ``client`` (None: the threaded scheduler),
    showing progress as the module docstring says; returns the results in order.
    Every task has finished when this returns or raises."""
    tasks = list(tasks)
    if client is None:
        if is_quiet(quiet) or not _tty():
            with _stage(label, quiet):
                return _threaded(tasks)
        from dask.diagnostics import ProgressBar  # deferred: dask (CLI start)

        say(label)
        with ProgressBar(out=sys.stderr, minimum=0.5):
            return _threaded(tasks)
    futures = client.compute(tasks)
    if is_quiet(quiet) or not _tty():
        with _stage(label, quiet):
            return _gathered(client, futures)
    from distributed import progress  # deferred: distributed (CLI start)

    say(label)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is reserved for results
        progress(futures, notebook=False)
    print("", file=sys.stderr, flush=True)
    return _gathered(client, futures)


class _Lines:
    """``bar`` off a terminal: start and end lines, ``update`` counts silently."""

    def __init__(self, total, label, quiet):
        self.total, self.label, self.quiet, self.n = total, label, quiet, 0

    def __enter__(self):
        self.t0 = time.perf_counter()
        say(f"{self.label} ...", self.quiet)
        return self

    def update(self, k: int = 1) -> None:
        self.n += k

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            say(f"{self.label}: {self.n}/{self.total} done in {time.perf_counter() - self.t0:.1f} s", self.quiet)


def bar(total: int, label: str, quiet: bool = False, unit: str = "chunk"):
    """A context manager with ``update(k)``: tqdm on a terminal, else start/end lines."""
    if is_quiet(quiet) or not _tty():
        return _Lines(total, label, quiet)
    from tqdm import tqdm  # deferred: tqdm (CLI start)

    return tqdm(total=total, desc=f"dbfs: {label}", unit=unit, file=sys.stderr, leave=False)
