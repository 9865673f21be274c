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

Method: a bounded deque of ``(monotonic time, message)``; the handler keeps
only the nanny's exit and memory-restart messages, at INFO and above (the
local cluster's ``silence_logs`` lowers what its stream handlers print, not
what the loggers emit). The handler adds nothing to distributed's own output.

Reference: distributed's ``Nanny`` (``WorkerProcess._death_message``) and
``NannyMemoryManager`` (the 95% ``terminate`` threshold).
"""
from __future__ import annotations

import collections
import logging
import threading
import time

__all__ = ["watch", "said_since", "why"]

_KEEP = 64
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
