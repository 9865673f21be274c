"""What a run publishes to the cluster it runs on: stage, search and level events.

Contract
--------
Every event is ONE Dask event (``log_event``) under the topic :data:`TOPIC`
whose message is a flat dict of plain values (str, int, float, bool, None),
so it travels as msgpack and nothing is unpickled where it arrives. The
scheduler plugin (:mod:`dbfs.monitor.state`) folds them into the run's state.
Publishing never fails a run and never waits inside a timed search:

- :class:`Publisher` (client side): ``run``, ``stage``, ``levels`` and
  ``search`` events, each one ``Client.log_event`` call made between the
  timed parts, bounded by :data:`SEND_TIMEOUT_S`; a failed or late call
  stops the publisher with one line on stderr.
- :class:`LevelPublisher` (worker side, a ``WorkerPlugin``): attaches
  :meth:`LevelPublisher.level` to the distributed BFS's per-level seam
  (``MeshPlugin.level_listeners``, :mod:`dbfs.bfs.dask.mesh.plugin`) of its
  worker, also on a worker that joins or restarts later (checked at each
  task start). After each level the search thread only appends the record
  to a deque; the worker's event loop sends what was kept as one event
  every :data:`FLUSH_MS` and when a task ends (before its result), through
  the worker's batched stream. (Calling ``Worker.log_event`` from the search
  thread at every level would wake the event loop each time, inside the
  level loop: docs/BENCHMARKS.md, "Monitoring", has the measurements.)

Encoding (``kind`` and its keys)
--------------------------------
- ``run``: dataset, scale, n_vertices, n_edges, backend, algorithm, n_roots, partitions.
- ``stage``: stage (``generate | kernel1 | load | warm-up | search | validate | done | failed``),
  k (1-based search number or 0), of (searches), root (or -1).
- ``levels``: source (the worker's address, or ``client``), records: a list
  of level records, each widx (mesh worker), level, direction (``td | bu``),
  frontier, edges, discovered, time, kernel, exchange (seconds; exchange 0
  for a single-process backend), sent (bytes this worker sent to its peers
  in the level; 0 for a single-process backend and for a record that does
  not carry it). A record of level 0 starts a search.
- ``search``: k, root, seconds, nedge, valid (True, False, or None when unvalidated).

Reference: Dask's structured events (``Worker.log_event``,
``SchedulerPlugin.log_event``; distributed.dask.org "Scheduler plugins").
"""
from __future__ import annotations

import collections

from distributed.diagnostics.plugin import WorkerPlugin
from tornado.ioloop import PeriodicCallback

from dbfs.progress import say

__all__ = ["TOPIC", "STAGES", "FLUSH_MS", "Publisher", "LevelPublisher", "level_record", "levels_event"]

TOPIC = "dbfs"
#: ``dbfs.bfs.dask.mesh.plugin.NAME`` (spelled out: importing that package would load the BFS kernels
#: into the scheduler; tests/test_monitor.py checks the two agree)
MESH_PLUGIN = "dbfs-mesh"
SEND_TIMEOUT_S = 5   # a client-side event not delivered by then stops the publisher (one line)
FLUSH_MS = 100   # a worker's kept level records go out at least this often (and when a search task ends)
STAGES = ("generate", "kernel1", "load", "warm-up", "search", "validate", "done", "failed")


def level_record(rec: dict) -> dict:
    """One level record in plain values (from ``dbfs.bfs`` level stats or the dask level seam's record)."""
    return {"widx": int(rec.get("worker", 0)), "level": int(rec["level"]), "direction": str(rec.get("direction", "")),
            "frontier": int(rec["frontier"]), "edges": int(rec["edges"]), "discovered": int(rec.get("discovered", 0)),
            "time": float(rec["time"]), "kernel": float(rec.get("kernel", rec["time"])),
            "exchange": float(rec.get("exchange", 0.0)), "sent": int(rec.get("sent", 0))}


def levels_event(records: list, source: str) -> dict:
    """The ``levels`` event of ``records`` (:func:`level_record` dicts) from ``source``."""
    return {"kind": "levels", "source": source, "records": records}


class Publisher:
    """Client-side events of one run (module docstring); a no-op without a cluster."""

    def __init__(self, client=None, quiet: bool = False):
        self.client = client
        self.quiet = quiet

    @property
    def active(self) -> bool:
        return self.client is not None

    def detach(self) -> None:
        """Stop publishing (the cluster is about to close)."""
        self.client = None

    def _send(self, msg: dict) -> None:
        if self.client is None:
            return
        try:    # Client.log_event, bounded: a lost scheduler never holds the run up
            self.client.sync(self.client.scheduler.log_event, topic=TOPIC, msg=msg, callback_timeout=SEND_TIMEOUT_S)
        except Exception as e:  # monitoring never fails a benchmark run
            self.client = None
            say(f"monitoring stopped ({type(e).__name__}: {e}): the run goes on without the dbfs page",
                self.quiet)

    def run(self, ds, cfg, n_roots: int) -> None:
        self._send({"kind": "run", "dataset": str(ds.name), "scale": int(ds.scale), "n_vertices": int(ds.n_vertices),
                    "n_edges": int(ds.n_edges), "backend": str(cfg.backend), "algorithm": str(cfg.algorithm),
                    "n_roots": int(n_roots), "partitions": int(cfg.partitions)})

    def stage(self, stage: str, k: int = 0, of: int = 0, root: int = -1) -> None:
        assert stage in STAGES, stage
        self._send({"kind": "stage", "stage": stage, "k": int(k), "of": int(of), "root": int(root)})

    def levels(self, level_stats) -> None:
        """A single-process backend's level records of the search that just ended (one event)."""
        if level_stats:
            self._send(levels_event([level_record(r) for r in level_stats], "client"))

    def search(self, k: int, root: int, seconds: float, nedge: int, valid) -> None:
        self._send({"kind": "search", "k": int(k), "root": int(root), "seconds": float(seconds),
                    "nedge": int(nedge), "valid": None if valid is None else bool(valid)})


class LevelPublisher(WorkerPlugin):
    """Worker side: publishes each level of a distributed search as it ends (module docstring)."""

    name = "dbfs-monitor"
    idempotent = True

    def setup(self, worker):
        self.worker = worker
        self.buffer = collections.deque()
        self.flusher = PeriodicCallback(self.flush, FLUSH_MS)
        self.flusher.start()
        self._attach()

    def teardown(self, worker):
        self.flusher.stop()
        mesh = worker.plugins.get(MESH_PLUGIN)
        if mesh is not None and self.level in mesh.level_listeners:
            mesh.level_listeners.remove(self.level)
        self.flush()

    def transition(self, key, start, finish, **kwargs):
        if finish == "executing":
            self._attach()
        elif start == "executing":
            self.flush()       # a search task ended: its last levels go before its result does

    def _attach(self) -> None:
        mesh = self.worker.plugins.get(MESH_PLUGIN)
        if mesh is not None and self.level not in mesh.level_listeners:
            mesh.level_listeners.append(self.level)

    def level(self, level, ranks, record) -> None:
        """``fn(level, ranks, record)`` of the level seam: keep the record, return (no lock, no I/O)."""
        self.buffer.append(record)

    def flush(self) -> None:
        """(worker event loop) one ``levels`` event with the records kept since the last flush."""
        recs = []
        while self.buffer:
            recs.append(self.buffer.popleft())
        if recs:
            self.worker.log_event(TOPIC, levels_event([level_record(r) for r in recs], str(self.worker.address)))
