"""What the workers of a cluster dbfs starts log about a task that failed with a dbfs error.

Contract
--------
:class:`QuietDbfsErrors` is a Dask ``WorkerPlugin`` that
:func:`dbfs.cluster.client_for` registers on the clusters it starts (local,
local GPU, SLURM; not on a cluster it joins). On each worker, it adds
:class:`DropDbfsTaskErrors` to the ``distributed.worker`` logger. That
filter drops distributed's "Compute Failed" record (key, task, exception,
traceback) when the task raised :class:`dbfs.errors.DbfsError`. Such an
error reaches the client with the task's result and is said there once,
as the run's one-line error; without the filter a local cluster's worker
processes print a multi-line block on the same terminal first. Every other
record, a task's non-dbfs exception included, is kept.

Method: a ``logging.Filter`` on the message text, which distributed formats
as ``"Compute Failed ... Exception: <repr of the exception>"`` (the
exception object is not attached to the record). Idempotent per worker.

Reference: distributed's ``Worker._handle_compute_task`` failure log and
``WorkerPlugin`` (https://distributed.dask.org/en/stable/plugins.html).
"""
from __future__ import annotations

import logging

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["QuietDbfsErrors", "DropDbfsTaskErrors", "NAME"]

NAME = "dbfs-quiet-task-errors"


class DropDbfsTaskErrors(logging.Filter):
    """Drops distributed's "Compute Failed" record of a task that raised a DbfsError (module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 (a malformed record is not ours to judge)
            return True
        return not (msg.startswith("Compute Failed") and "DbfsError(" in msg)


class QuietDbfsErrors(WorkerPlugin):
    """Adds :class:`DropDbfsTaskErrors` to the worker's ``distributed.worker`` logger (once)."""

    idempotent = True

    def setup(self, worker):
        log = logging.getLogger("distributed.worker")
        if not any(isinstance(f, DropDbfsTaskErrors) for f in log.filters):
            log.addFilter(DropDbfsTaskErrors())
