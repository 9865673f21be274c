"""The ``dbfs`` command (click): wiring only; the work lives in the stage modules.

Every user error is a :class:`~dbfs.errors.DbfsError`, printed as one line
``dbfs: error: <problem>: <fix>`` with exit code 2. Results go to stdout,
progress and the dashboard link to stderr; the Dask detail of a cluster
(worker, nanny and scheduler logs, tracebacks) goes to a log file,
``<datasets root>/.dbfs-logs/<command>-<time>-<pid>.log`` (``$DBFS_LOGS``:
another folder), which the one-line error names when it holds something
(:mod:`dbfs.worker_logs`). A Ctrl-C that Python raised inside a finalizer
is delivered again, not lost (:func:`_keep_interrupts`). The commands live in
:mod:`dbfs.cli.data` (generate, datasets, export, build, validate),
:mod:`dbfs.cli.search` (run, bfs) and :mod:`dbfs.cli.admin` (cluster,
algorithms, pipeline); importing them registers them on :data:`cli`.
"""
from __future__ import annotations

import _thread
import os
import sys
import threading

import click

from dbfs import worker_logs
from dbfs.cli import admin, data, search  # noqa: F401  (registers the commands)
from dbfs.cli.common import cli

__all__ = ["cli", "main", "LOGS_ENV"]

LOGS_ENV = "DBFS_LOGS"

#: seconds after an interrupt lost in a finalizer until it is delivered again (:func:`_keep_interrupts`)
REDELIVER_S = 0.05


def _log_place():
    """(folder, name) of the running command's Dask log: ``$DBFS_LOGS``, else ``.dbfs-logs`` in the
    command's datasets root (``--datasets``, ``$DBFS_DATASETS``, ``./datasets``)."""
    ctx = click.get_current_context(silent=True)
    name = "-".join(ctx.command_path.split()[1:]) if ctx is not None else "dbfs"
    if os.environ.get(LOGS_ENV):
        return os.environ[LOGS_ENV], name
    from dbfs.store import datasets_root  # deferred: distributed (CLI start)

    return datasets_root(ctx.params.get("datasets") if ctx is not None else None) / ".dbfs-logs", name


def _keep_interrupts() -> None:
    """A Ctrl-C whose KeyboardInterrupt Python raised inside a finalizer (``__del__``, a weakref callback:
    "Exception ignored") would be lost and the run would go on: delivered again to the main thread instead,
    without the ignored traceback; any other unraisable exception goes to the hook there was."""
    before = sys.unraisablehook

    def hook(unraisable):
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            # from another thread a moment later: the main thread takes it once out of the finalizer
            t = threading.Timer(REDELIVER_S, _thread.interrupt_main)
            t.daemon = True
            t.start()
            return
        before(unraisable)

    sys.unraisablehook = hook


def main(argv=None):  # console-script entry point
    worker_logs.configure(_log_place, until_exit=True)
    if threading.current_thread() is threading.main_thread():
        _keep_interrupts()
    return cli.main(args=argv, prog_name="dbfs")
