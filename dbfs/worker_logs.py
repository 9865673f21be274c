"""Where the Dask detail of a command goes: a log file that the one-line error names, not the terminal.

Contract
--------
- The CLI calls :func:`configure` with a function naming the folder of the
  log files (``dbfs`` uses ``<datasets root>/.dbfs-logs``, or
  ``$DBFS_LOGS``). Without it (the Python API, the tests) nothing here
  changes where Dask logs.
- :meth:`DaskLog.create` makes a fresh file ``<command>-<UTC time>-<pid>.log``
  in that folder (None when not configured or not writable).
  While a :class:`DaskLog` is entered, the Dask loggers of THIS process
  (``distributed``: client, scheduler and the nannies of a local cluster;
  ``tornado``, ``asyncio``, ``bokeh``, ``dask_jobqueue``, ``dask_cuda``;
  and logging's last-resort handler) write to the file instead of stderr:
  warnings and errors, tracebacks included, and the nannies' "Worker process
  ... was killed by signal N" lines. :meth:`DaskLog.local_cluster_config` is
  the Dask config that makes the worker processes of a local cluster started
  under it write their stderr (their log records, warnings, tracebacks) to
  the same file (:func:`dask_setup`, a worker preload), and so does
  multiprocessing's resource tracker if it starts then (it warns about what
  killed workers leaked). On exit the previous handlers come back (with
  ``configure(..., until_exit=True)``, the CLI's choice, only when the
  process ends: Dask logs while it closes too); an empty file is removed and
  only the newest :data:`KEEP` files of the folder are kept.
- :meth:`DaskLog.note` is ``" (Dask details: PATH)"`` when the file holds
  something, else ``""``: the tail :func:`dbfs.cluster.client_for` adds to
  the one-line error that ends a command.
- :class:`DropSyncCancelRace` (on ``tornado.application``, from :func:`configure`)
  drops the record of distributed's ``sync`` cancel race at Ctrl-C.
- :class:`QuietDbfsErrors` is a Dask ``WorkerPlugin`` for clusters whose
  worker output is NOT routed to a file (the Python API): on each worker it
  adds :class:`DropDbfsTaskErrors` to the ``distributed.worker`` logger,
  which drops distributed's "Compute Failed" record (key, task, exception,
  traceback) of a task that raised :class:`dbfs.errors.DbfsError`; that error
  reaches the client with the task's result and is said there once. Every
  other record is kept.

Method: the file is opened in append mode by every process (the client
process and each worker process, restarted ones included); a worker makes
its file descriptor 2 the log file before it connects (a preload's
``dask_setup``), so whatever the worker process prints lands there.
"Compute Failed" is recognised by its message text, which distributed
formats as ``"Compute Failed ... Exception: <repr of the exception>"``.

Reference: distributed's preloads and ``WorkerPlugin``
(https://distributed.dask.org/en/stable/plugins.html), ``Nanny``
(``WorkerProcess._death_message``).
"""
from __future__ import annotations

import atexit
import logging
import os
import time
import traceback
from pathlib import Path

__all__ = ["configure", "DaskLog", "current", "dask_setup", "QuietDbfsErrors", "DropDbfsTaskErrors",
           "DropSyncCancelRace", "NAME", "CONFIG_KEY", "KEEP"]

NAME = "dbfs-quiet-task-errors"
CONFIG_KEY = "dbfs-log-file"     # the Dask config key naming the file in a local cluster's worker processes
KEEP = 20                        # log files kept per folder (the newest)
_ROUTED = ("distributed", "tornado", "asyncio", "bokeh", "dask_jobqueue", "dask_cuda")
_DEATHS = ("Worker process", "memory budget")     # the nannies' INFO lines about a worker's end (kept)

_where = None
_until_exit = False
_current: "DaskLog | None" = None


def configure(where, until_exit: bool = False) -> None:
    """``where()`` -> (folder, command name) of the next log file, or None: no file (Dask logs as usual).
    ``until_exit``: a :class:`DaskLog` keeps the Dask loggers on its file after its block, until the
    process ends (the CLI: one command per process). Also drops :class:`DropSyncCancelRace`'s record."""
    global _where, _until_exit
    _where, _until_exit = where, until_exit
    log = logging.getLogger("tornado.application")
    if not any(isinstance(f, DropSyncCancelRace) for f in log.filters):
        log.addFilter(DropSyncCancelRace())


class DropSyncCancelRace(logging.Filter):
    """Drops tornado's record of a NameError raised by the ``cancel`` callback of ``distributed.utils.sync``: a
    SIGINT that lands while ``sync`` waits, before its coroutine has made the future, schedules ``cancel`` on
    the event loop, which then reads the unbound future (distributed's race; seen at Ctrl-C, with its
    traceback printed at the command's exit, after the log file has let go of the loggers). The interrupt is
    said by the command itself; every other record is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        ei = record.exc_info
        if not ei or not isinstance(ei[1], NameError) or ei[2] is None:
            return True
        tb = ei[2]
        while tb.tb_next is not None:
            tb = tb.tb_next
        code = tb.tb_frame.f_code
        return not (code.co_name == "cancel" and Path(code.co_filename).parts[-2:] == ("distributed", "utils.py"))


def current() -> "DaskLog | None":
    """The :class:`DaskLog` entered now, if any."""
    return _current


class _ToFile(logging.Handler):
    """Warnings and above, plus the nannies' worker-end lines, appended to the log file."""

    def __init__(self, stream):
        super().__init__(logging.INFO)
        self.stream = stream
        self.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"))

    def emit(self, record):
        try:
            if record.levelno < logging.WARNING and not any(m in record.getMessage() for m in _DEATHS):
                return
            self.stream.write(self.format(record) + "\n")
            self.stream.flush()
        except Exception:  # noqa: BLE001 (logging must never raise into Dask)
            self.handleError(record)


class DaskLog:
    """One command's Dask log file (module docstring); a context manager."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._saved: list = []
        self._stream = None

    @classmethod
    def create(cls) -> "DaskLog | None":
        if _where is None:
            return None
        try:
            got = _where()
            if got is None:
                return None
            folder, command = Path(got[0]).expanduser(), got[1] or "dbfs"
            folder.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            path = folder / f"{command}-{stamp}-{os.getpid()}.log"
            path.touch()
        except OSError:
            return None             # an unwritable folder: Dask logs where it always did
        return cls(path.resolve())

    def local_cluster_config(self) -> dict:
        """Dask config for the nannies of a local cluster: their workers preload this module, which sends
        the worker process's stderr to the file."""
        return {"distributed.worker.preload": [__name__], CONFIG_KEY: str(self.path)}

    def __enter__(self):
        global _current
        # its import adds a stderr handler to its loggers: first, then replaced
        import distributed  # deferred: distributed (CLI start)  # noqa: F401

        self._stream = open(self.path, "a", encoding="utf-8", errors="replace")
        h = _ToFile(self._stream)
        for name in _ROUTED:
            lg = logging.getLogger(name)
            self._saved.append((lg, lg.handlers[:], lg.propagate))
            lg.handlers, lg.propagate = [h], False
        self._saved_last, logging.lastResort = logging.lastResort, h
        if _until_exit:     # the CLI: the tracker lives as long as the process
            _tracker_writes_to(self._stream)
        _current = self
        return self

    def __exit__(self, *exc):
        global _current
        _current = None
        if _until_exit:     # what Dask logs while the process ends (closing nannies, finalizers) goes here too
            atexit.register(self._tidy)
            return False
        logging.lastResort = self._saved_last
        for lg, handlers, propagate in reversed(self._saved):
            lg.handlers, lg.propagate = handlers, propagate
        self._saved = []
        self._stream.close()
        self._tidy()
        return False

    def _tidy(self) -> None:
        """An empty file removed, the newest :data:`KEEP` of the folder kept."""
        try:
            if not self._stream.closed:
                self._stream.flush()
            if self.path.stat().st_size == 0:
                self.path.unlink()
            _prune(self.path.parent)
        except (OSError, ValueError):
            pass

    def add_exception(self, exc: BaseException) -> None:
        """The traceback of the error that ends the command, appended to the file (entered only)."""
        self._stream.write("dbfs: the command ended with this error:\n"
                           + "".join(traceback.format_exception(exc)))
        self._stream.flush()

    def note(self) -> str:
        """``" (Dask details: PATH)"`` when the file holds something, else ``""``."""
        try:
            return f" (Dask details: {self.path})" if self.path.stat().st_size > 0 else ""
        except OSError:
            return ""


def _tracker_writes_to(stream) -> None:
    """multiprocessing's resource tracker (a process of its own, started once, which warns on stderr
    about what killed workers leaked) gets the log file as its stderr, if it is not running yet."""
    from multiprocessing import resource_tracker  # deferred: multiprocessing (CLI start)

    saved = os.dup(2)
    try:
        os.dup2(stream.fileno(), 2)
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _prune(folder: Path) -> None:
    logs = sorted(folder.glob("*.log"), key=lambda p: p.stat().st_mtime)
    for p in logs[:-KEEP]:
        p.unlink(missing_ok=True)


def dask_setup(worker) -> None:
    """Worker preload: this worker process's stderr (file descriptor 2) becomes the log file that
    :data:`CONFIG_KEY` names in its Dask config (nothing happens without it)."""
    import dask  # deferred: dask (CLI start)

    path = dask.config.get(CONFIG_KEY, None)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return
    os.dup2(fd, 2)
    os.close(fd)


class DropDbfsTaskErrors(logging.Filter):
    """Drops distributed's "Compute Failed" record of a task that raised a DbfsError (module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 (a malformed record is not ours to judge)
            return True
        return not (msg.startswith("Compute Failed") and "DbfsError(" in msg)


def _plugin_class():
    from distributed.diagnostics.plugin import WorkerPlugin  # deferred: distributed (CLI start)

    class QuietDbfsErrors(WorkerPlugin):
        """Adds :class:`DropDbfsTaskErrors` to the worker's ``distributed.worker`` logger (once)."""

        idempotent = True

        def setup(self, worker):
            log = logging.getLogger("distributed.worker")
            if not any(isinstance(f, DropDbfsTaskErrors) for f in log.filters):
                log.addFilter(DropDbfsTaskErrors())

    QuietDbfsErrors.__module__ = __name__
    QuietDbfsErrors.__qualname__ = "QuietDbfsErrors"
    return QuietDbfsErrors


def __getattr__(name):     # QuietDbfsErrors imports distributed only when asked for
    if name == "QuietDbfsErrors":
        cls = _plugin_class()
        globals()["QuietDbfsErrors"] = cls
        return cls
    raise AttributeError(name)
