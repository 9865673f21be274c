"""Why a worker of a local Dask cluster ended: what its nanny said, for the one-line errors.

Contract
--------
:func:`watch` (idempotent) attaches one logging handler to distributed's
``distributed.nanny`` logger (and so its ``distributed.nanny.memory`` child).
A local cluster's nannies run in THIS process, so the handler sees each
worker process's end as the nanny reports it: "Worker process 1234 was killed
by signal 9" (the kernel's OOM killer, a ``kill -9``), "... exited with status
N", or "Worker tcp://... (pid=1234) exceeded 95% memory budget. Restarting...".
:func:`said_since` returns those messages from a monotonic time on, and
:func:`why` formats them as the tail of a one-line error ("" when none). A
remote cluster's nannies (SLURM, ``--scheduler``) log elsewhere: nothing is
added there, and nothing is guessed.

:class:`NoWorkers` watches a local cluster's scheduler (in THIS process): when the
cluster has had no worker at all for ``after`` seconds (its nannies stopped
restarting them, e.g. after workers were killed while starting), it closes the
client, so that every wait on the cluster ends (Dask would otherwise wait for a
worker forever), and :attr:`NoWorkers.reason` says why in one line.

:func:`lost_work` lists the exceptions by which Dask says that work is lost for
good (a worker gone mid-task, a task whose workers kept dying, a closed
connection, cancelled futures); :func:`lost_work_line` is their one-line error.

Method: a bounded deque of ``(monotonic time, message)``; the handler keeps
only the nanny's exit and memory-restart messages, at INFO and above (the
local cluster's ``silence_logs`` lowers what its stream handlers print, not
what the loggers emit). The handler adds nothing to distributed's own output.

Reference: distributed's ``Nanny`` (``WorkerProcess._death_message``) and
``NannyMemoryManager`` (the 95% ``terminate`` threshold).
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time

from distributed.comm.core import CommClosedError
from distributed.scheduler import KilledWorker

__all__ = ["watch", "said_since", "why", "NoWorkers", "NO_WORKERS_S", "lost_work", "lost_work_line"]

_KEEP = 64
NO_WORKERS_S = 60.0     # seconds a local cluster may have no worker before its client is closed
_MARKERS = ("Worker process", "memory budget")


class _Said(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.said = collections.deque(maxlen=_KEEP)

    def emit(self, record):
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 (a malformed record is not ours to raise)
            return
        if any(m in msg for m in _MARKERS):
            self.said.append((time.monotonic(), " ".join(msg.split())))


_HANDLER = _Said()
_LOCK = threading.Lock()
_WATCHING = threading.Event()


def watch() -> None:
    """Attach the handler to ``distributed.nanny`` (once), its level lowered to INFO if it was above."""
    log = logging.getLogger("distributed.nanny")
    with _LOCK:
        if _HANDLER not in log.handlers:
            log.addHandler(_HANDLER)
        if log.getEffectiveLevel() > logging.INFO:
            log.setLevel(logging.INFO)
        _WATCHING.set()


def said_since(t0: float, wait: float = 0.0) -> list:
    """The nannies' messages about workers' ends since monotonic time ``t0``, oldest first; when there is
    none yet and :func:`watch` runs, wait up to ``wait`` seconds for one (the scheduler can notice a
    dead worker before its nanny has said why)."""
    deadline = time.monotonic() + wait
    while True:
        said = [m for t, m in list(_HANDLER.said) if t >= t0]
        if said or not _WATCHING.is_set() or time.monotonic() >= deadline:
            return said
        time.sleep(0.05)


def why(t0: float, most: int = 3, wait: float = 0.0) -> str:
    """``"; the nanny said: ..."`` with the last ``most`` messages since ``t0`` (:func:`said_since`), or ``""``."""
    said = said_since(t0, wait)[-most:]
    return f"; the nanny said: {' / '.join(said)}" if said else ""


class NoWorkers:
    """The watchdog of the module docstring, a daemon thread from construction until :meth:`stop`.

    Parameters
    ----------
    client : distributed.Client
        Of a cluster whose scheduler runs in this process (``client.cluster.scheduler``).
    after : float
        Seconds without any worker before the client is closed.
    """

    def __init__(self, client, after: float = NO_WORKERS_S):
        self.client, self.after = client, after
        self.reason: str | None = None
        self._stop = threading.Event()
        self._scheduler = getattr(getattr(client, "cluster", None), "scheduler", None)
        self._thread = threading.Thread(target=self._watch, name="dbfs-no-workers", daemon=True)
        if self._scheduler is not None:
            self._thread.start()

    def _watch(self) -> None:
        t0, empty_since = time.monotonic(), None
        while not self._stop.wait(0.5):
            try:
                n = len(self._scheduler.workers)
            except Exception:  # noqa: BLE001 (a scheduler closing meanwhile: nothing left to watch)
                return
            if n:
                empty_since = None
                continue
            empty_since = empty_since or time.monotonic()
            if time.monotonic() - empty_since >= self.after:
                self.reason = (f"every worker of the local Dask cluster died and none was restarted within "
                               f"{self.after:.0f} s{why(t0)}: rerun; if workers keep dying, give them more "
                               f"memory (fewer --workers, the profile's memory_limit)")
                try:
                    self.client.close()
                except Exception:  # noqa: BLE001 (closing is the point; a failure to close changes nothing)
                    pass
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


def lost_work() -> tuple:
    """What Dask raises when workers or the scheduler went away for good (a worker lost mid-task, a task
    whose workers kept dying, a closed connection)."""
    return ConnectionError, CommClosedError, KilledWorker, concurrent.futures.CancelledError


def lost_work_line(e: BaseException) -> str:
    """The one-line error of :func:`lost_work`'s exceptions (the CLI's; the traceback is in the Dask log)."""
    text = " ".join(str(e).split())
    return (f"the Dask cluster lost work it could not redo ({type(e).__name__}{': ' + text if text else ''}): "
            f"rerun; if workers keep dying, give them more memory (fewer --workers, the profile's memory_limit)")
