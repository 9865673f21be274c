"""Bounded waits of the client on a Dask cluster: a deadline on every wait, a lost worker noticed.

Contract
--------
:func:`wait_watched` (futures to finish), :func:`gather_watched` (their
results) and :func:`run_within` (a function on workers, ``client.run``)
never block past a deadline, and notice a lost worker within about
:data:`SLICE` seconds of the scheduler removing it (on one host the
scheduler sees a killed worker process within a second):

- one of the ``watch`` workers (those holding the partitions, parents or
  search tasks waited for) left the cluster, or a waited-for future's
  result was lost with its worker (status ``"lost"``: a task pinned to a
  dead worker would otherwise wait for it forever): :class:`WorkerLost`,
  naming the workers and, on a local cluster, why (what its nanny said:
  killed by signal 9, over the memory budget; :mod:`dbfs.worker_deaths`);
  the caller reloads and redoes the step, or fails with one line
  (:mod:`dbfs.bfs.dask.layout.recovery`);
- no future finished for ``timeout`` seconds (a stalled cluster):
  :class:`~dbfs.errors.DbfsError` naming what was waited for and the fix.

A task that raised is left to the caller (its future holds the error;
:func:`gather_watched` raises it, a lost peer as :class:`WorkerLost`).

Method: every wait runs in slices of :data:`SLICE` seconds
(``distributed.wait`` with a timeout; a gather or a ``client.run`` as a
coroutine on the client's event loop, polled), so the main thread handles
signals (Ctrl-C) between slices, and checks the watched workers when a
slice passes without progress (and at least every :data:`CHECK_EVERY`
seconds). A gather starts only once every future has finished.
"""
from __future__ import annotations

import asyncio
import time

from distributed import wait

from dbfs.bfs.dask.mesh.transport import _PeerLost
from dbfs.errors import DbfsError
from dbfs.worker_deaths import why
from dbfs.workers_info import workers_info

__all__ = ["SLICE", "CHECK_EVERY", "LOOK_BACK", "NANNY_WAIT", "WorkerLost", "alive_workers", "wait_watched", "gather_watched", "run_within",
           "is_peer_loss"]

SLICE = 0.5           # seconds a wait blocks before it checks the watched workers (and handles signals)
LOOK_BACK = 30.0      # seconds before a wait whose worker deaths its WorkerLost message names
NANNY_WAIT = 2.0      # seconds a WorkerLost waits for a local nanny to say why (dbfs.worker_deaths)
CHECK_EVERY = 2.0     # seconds between checks of the watched workers while futures keep finishing


class WorkerLost(_PeerLost):
    """A worker holding what a wait needs left the cluster (or its result was lost with it).

    ``workers``: the addresses known to be gone (may be empty when only a
    lost result was seen).
    """

    def __init__(self, message: str, workers=()):
        super().__init__(message)
        self.workers = sorted(workers)


def alive_workers(client) -> set:
    """Addresses of the workers the scheduler knows now."""
    return set(workers_info(client))


def is_peer_loss(exc) -> bool:
    """Whether ``exc`` (from a task or a wait) means a lost worker or peer (retry), not a genuine error."""
    return isinstance(exc, (_PeerLost, ConnectionError)) or type(exc).__name__ in ("KilledWorker",
                                                                                    "CommClosedError")


def _check(client, futs, watch, what: str, since: float | None = None) -> None:
    """WorkerLost when a watched worker is gone (with what a local cluster's nanny said about it since
    monotonic time ``since``: :mod:`dbfs.worker_deaths`) or a future's result was lost."""
    if watch:
        gone = set(watch) - alive_workers(client)
        if gone:
            raise WorkerLost(f"worker(s) {', '.join(sorted(gone))} left the cluster during {what}"
                             f"{why(_since(since), wait=NANNY_WAIT)}", gone)
    lost = [f for f in futs if f.status == "lost"]
    if lost:
        raise WorkerLost(f"{len(lost)} result(s) of {what} were lost with their worker"
                         f"{why(_since(since), wait=NANNY_WAIT)}")


def _since(since: float | None) -> float:
    return (time.monotonic() if since is None else since) - LOOK_BACK


def _stalled(what: str, timeout: float) -> DbfsError:
    return DbfsError(f"{what}: no Dask task finished within {timeout:.0f} s and no worker was lost: check the "
                     f"cluster (dashboard, workers' logs) and rerun")


def wait_watched(client, futs, watch, what: str, timeout: float, stop_on_error: bool = True) -> None:
    """Wait until every future in ``futs`` is finished (or, ``stop_on_error``, one failed).

    Parameters
    ----------
    client : distributed.Client
    futs : sequence of distributed.Future
    watch : collection of str
        Workers whose loss ends the wait (:class:`WorkerLost`).
    what : str
        What is waited for, for the messages ("the search from root 5", ...).
    timeout : float
        Seconds without any future finishing before the wait fails (DbfsError).
    stop_on_error : bool
        Return as soon as a future failed (its error stays on the future).
    """
    futs = list(futs)
    pending = [f for f in futs if f.status == "pending"]
    start = progress = checked = time.monotonic()
    while True:
        lost = any(f.status == "lost" for f in futs)
        if lost or time.monotonic() - checked > CHECK_EVERY:
            _check(client, futs, watch, what, start)
            checked = time.monotonic()
        if not pending or (stop_on_error and any(f.status == "error" for f in futs)):
            return
        try:
            pending = list(wait(pending, timeout=SLICE, return_when="FIRST_COMPLETED").not_done)
            progress = time.monotonic()
        except TimeoutError as exc:
            # distributed's sync() keeps this error in a closure cell that its own traceback reaches: a cycle
            # through this frame and its callers', which would hold their futures (a search's parents in
            # device memory) until a full collection. Dropping the traceback breaks it.
            exc.__traceback__ = None
            _check(client, futs, watch, what, start)
            checked = time.monotonic()
            if checked - progress > timeout:
                raise _stalled(what, timeout) from None


def _polled(client, coro, watch, what: str, timeout: float):
    """Run ``coro`` on the client's event loop; poll it in slices (watching ``watch``) until ``timeout``."""
    cf = asyncio.run_coroutine_threadsafe(coro, client.loop.asyncio_loop)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return cf.result(timeout=SLICE)
            except TimeoutError:
                pass
            _check(client, (), watch, what)
            if time.monotonic() > deadline:
                raise _stalled(what, timeout)
    finally:
        if not cf.done():
            cf.cancel()


def gather_watched(client, futs, watch, what: str, timeout: float) -> list:
    """The results of ``futs`` (bounded: see the module docstring).

    Parameters
    ----------
    client, futs, watch, what, timeout
        As :func:`wait_watched`.

    Returns
    -------
    list
        The results, in the order of ``futs``; a task's error is raised
        (a lost peer or worker as :class:`WorkerLost`).
    """
    futs = list(futs)
    wait_watched(client, futs, watch, what, timeout)
    bad = [f for f in futs if f.status == "error"]
    if bad:
        exc = bad[0].exception()
        if is_peer_loss(exc):
            raise WorkerLost(f"{what}: {type(exc).__name__}: {exc}")
        raise exc
    return _polled(client, client.gather(futs, asynchronous=True), watch, what, timeout)


def run_within(client, fn, *args, workers, timeout: float, what: str, on_error: str = "return",
               watch: bool = True) -> dict:
    """``client.run(fn, *args, workers=workers, on_error=on_error)`` with a deadline.

    Parameters
    ----------
    client : distributed.Client
    fn : callable
        Run on each worker (``dask_worker`` is passed when it takes one).
    workers : list of str
    timeout : float
        Seconds before the call fails (DbfsError).
    what : str
        For the message.
    on_error : {"return", "raise", "ignore"}
        As ``client.run``'s.
    watch : bool
        Raise :class:`WorkerLost` as soon as one of ``workers`` left the
        cluster (the scheduler would otherwise keep trying to connect to it).

    Returns
    -------
    dict
        worker address -> result (or the exception, ``on_error="return"``).
    """
    coro = client.run(fn, *args, workers=list(workers), on_error=on_error, asynchronous=True)
    return _polled(client, coro, set(workers) if watch else (), what, timeout)
