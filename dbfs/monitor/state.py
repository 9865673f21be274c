"""The scheduler's view of dbfs runs: a SchedulerPlugin that folds dbfs events into state.

Contract
--------
:class:`MonitorPlugin` (registered once per cluster under :data:`NAME`,
``idempotent``: a second run on a joined cluster keeps its counters) receives
every event of topic ``dbfs`` (:mod:`dbfs.monitor.events`) through
``SchedulerPlugin.log_event`` and keeps:

- ``run``: the current run's description (dataset, backend, ...), reset by a ``run`` event;
- ``stage``: the current stage and, while searching, k of n and the root;
- ``searches``: per search of the current run: k, root, seconds, nedge, GTEPS, validation;
- ``levels``: the current search's levels (the records of mesh worker 0, or the
  client's), from its level 0 on;
- ``workers``: per worker, its kernel and exchange seconds and the bytes it sent
  in the last level it ended;
- ``totals``: counters over every run the scheduler saw (searches, levels, level
  seconds, level records from every worker, exchange seconds, bytes the
  workers sent in the exchange, validation failures, rejected events).

A level record's ``sent`` (bytes) is optional: a record without it (an
older worker's) counts as 0 bytes; one with it must hold a whole number >= 0.

``version`` grows with every change, so readers (the dashboard page,
:mod:`dbfs.monitor.metrics`) redraw only when something happened. Events
are checked field by field (kind, types); anything else is counted in
``totals["rejected"]`` and dropped, never raised into the scheduler.
``start`` adds the ``dbfs`` dashboard page (:mod:`dbfs.monitor.dashboard`)
and the Prometheus collector (:mod:`dbfs.monitor.metrics`) when their
libraries are importable.

Everything runs on the scheduler's event loop (events, the Bokeh page's
callbacks and the ``/metrics`` handler), so no lock is needed.

Reference: distributed's ``SchedulerPlugin`` (``log_event`` hook; the events
broker of distributed/broker.py).
"""
from __future__ import annotations

import logging
import time

from distributed.diagnostics.plugin import SchedulerPlugin

from dbfs.monitor.events import STAGES, TOPIC

__all__ = ["MonitorPlugin", "NAME", "hmean_gteps"]

NAME = "dbfs-monitor"
log = logging.getLogger("dbfs.monitor")

_NUM = (int, float)
#: the fields of one record of a ``levels`` event
_RECORD = {"widx": int, "level": int, "direction": str, "frontier": int, "edges": int, "discovered": int,
           "time": _NUM, "kernel": _NUM, "exchange": _NUM}
#: optional fields of a level record (absent or None: 0)
_RECORD_OPTIONAL = {"sent": int}
#: kind -> field -> accepted types (bool is an int: checked apart where it matters)
_FIELDS = {
    "run": {"dataset": str, "scale": int, "n_vertices": int, "n_edges": int, "backend": str, "algorithm": str,
            "n_roots": int, "partitions": int},
    "stage": {"stage": str, "k": int, "of": int, "root": int},
    "levels": {"source": str, "records": (list, tuple)},   # msgpack turns lists into tuples
    "search": {"k": int, "root": int, "seconds": _NUM, "nedge": int, "valid": (bool, type(None))},
}


def hmean_gteps(searches) -> float | None:
    """Harmonic mean of the searches' GTEPS (the Graph500 headline statistic), None without any."""
    g = [s["gteps"] for s in searches if s["gteps"] > 0]
    return len(g) / sum(1.0 / x for x in g) if g else None


def _checked(msg):
    """``msg`` when it is a well-formed dbfs event, else None."""
    if not isinstance(msg, dict) or msg.get("kind") not in _FIELDS:
        return None
    for k, typ in _FIELDS[msg["kind"]].items():
        if not isinstance(msg.get(k), typ):
            return None
    if msg["kind"] == "stage" and msg["stage"] not in STAGES:
        return None
    if msg["kind"] == "levels" and not all(_record_ok(r) for r in msg["records"]):
        return None
    return msg


def _record_ok(r) -> bool:
    """A well-formed level record: every field of ``_RECORD``, the optional ones absent or well-typed."""
    if not isinstance(r, dict) or not all(isinstance(r.get(k), t) for k, t in _RECORD.items()):
        return False
    for k, t in _RECORD_OPTIONAL.items():
        v = r.get(k)
        if v is not None and (not isinstance(v, t) or isinstance(v, bool) or v < 0):
            return False
    return True


class MonitorPlugin(SchedulerPlugin):
    """State of the dbfs runs on this scheduler (module docstring)."""

    name = NAME
    idempotent = True

    def __init__(self):
        self.run = {}
        self.stage = {"stage": "idle", "k": 0, "of": 0, "root": -1, "since": time.time()}
        self.searches = []
        self.levels = []
        self.workers = {}
        self.totals = {"runs": 0, "searches": 0, "levels": 0, "level_records": 0, "level_seconds": 0.0,
                       "exchange_seconds": 0.0, "exchange_bytes": 0, "validation_failures": 0, "rejected": 0}
        self.version = 0
        self.scheduler = None

    async def start(self, scheduler):
        self.scheduler = scheduler
        try:
            from dbfs.monitor.dashboard import add_page  # deferred: bokeh

            add_page(scheduler)
        except Exception as e:  # no dashboard (disabled, or bokeh missing): events and metrics still work
            log.warning("dbfs: no dbfs dashboard page: %s: %s", type(e).__name__, e)
        try:
            from dbfs.monitor.metrics import register  # deferred: prometheus_client

            register(self)
        except ImportError:
            pass

    def log_event(self, topic, msg):
        if topic != TOPIC:
            return
        ev = _checked(msg)
        if ev is None:
            self.totals["rejected"] += 1
            return
        getattr(self, f"_on_{ev['kind']}")(ev)
        self.version += 1

    def _on_run(self, ev):
        self.run = {k: ev[k] for k in _FIELDS["run"]}
        self.run["started"] = time.time()
        self.searches, self.levels, self.workers = [], [], {}
        self.totals["runs"] += 1

    def _on_stage(self, ev):
        self.stage = {k: ev[k] for k in _FIELDS["stage"]}
        self.stage["since"] = time.time()

    def _on_levels(self, ev):
        for r in ev["records"]:
            w = self.workers.setdefault(ev["source"], {})
            sent = int(r.get("sent") or 0)
            w.update(widx=r["widx"], level=r["level"], kernel=float(r["kernel"]), exchange=float(r["exchange"]),
                     sent=sent, when=time.time())
            self.totals["exchange_seconds"] += float(r["exchange"])
            self.totals["exchange_bytes"] += sent
            self.totals["level_records"] += 1
            if r["widx"] != 0:
                continue
            if r["level"] == 0:          # a new search: its level table starts empty
                self.levels = []
            self.levels.append({k: r[k] for k in ("level", "direction", "frontier", "edges", "discovered", "time")})
            self.totals["levels"] += 1
            self.totals["level_seconds"] += float(r["time"])

    def _on_search(self, ev):
        s = {k: ev[k] for k in _FIELDS["search"]}
        s["gteps"] = ev["nedge"] / ev["seconds"] / 1e9 if ev["seconds"] > 0 else 0.0
        self.searches.append(s)
        self.totals["searches"] += 1
        if ev["valid"] is False:
            self.totals["validation_failures"] += 1

    def stage_text(self) -> str:
        """One line: the stage, k of n and the root while searching."""
        st = self.stage
        name = {"kernel1": "Kernel 1", "warm-up": "warm-up search"}.get(st["stage"], st["stage"])
        if st["stage"] in ("search", "validate") and st["of"]:
            return f"{name} {st['k']} of {st['of']} (root {st['root']})"
        return name
