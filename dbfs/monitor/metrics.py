"""dbfs metrics on the scheduler's Prometheus endpoint (``/metrics``).

Contract
--------
:func:`register` (called by :class:`dbfs.monitor.state.MonitorPlugin` when it
starts; needs ``prometheus_client``, else ImportError and no metrics) adds
ONE collector per process to ``prometheus_client.REGISTRY``, the registry
Dask's ``/metrics`` handler renders; it reads the plugin that started last
in this process. Metrics (all prefixed ``dbfs_``):

========================================  =======  ==============================================
name                                      type     value
========================================  =======  ==============================================
``dbfs_runs_total``                       counter  runs announced to this scheduler
``dbfs_searches_total``                   counter  timed searches finished (every run)
``dbfs_validation_failures_total``        counter  searches whose validation failed
``dbfs_levels_total``                     counter  BFS levels finished
``dbfs_level_seconds_total``              counter  seconds spent in those levels
``dbfs_exchange_seconds_total``           counter  worker seconds in frontier exchange (dask backend)
``dbfs_exchange_bytes_total``             counter  bytes the workers sent in frontier exchange (dask backend)
``dbfs_rejected_events_total``            counter  malformed dbfs events dropped
``dbfs_last_gteps``                       gauge    GTEPS of the last search
``dbfs_hmean_gteps``                      gauge    harmonic-mean GTEPS of the current run's searches
``dbfs_run_searches``                     gauge    searches done in the current run
``dbfs_run_roots``                        gauge    searches the current run will do
``dbfs_stage``                            gauge    1 for the current stage (label ``stage``), else 0
========================================  =======  ==============================================

``dbfs_exchange_bytes_total`` sums the ``sent`` bytes of every worker's level
record (:mod:`dbfs.monitor.events`); a record without them counts 0.

Reference: prometheus_client custom collectors
(prometheus.github.io/client_python "Custom Collectors").
"""
from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from dbfs.monitor.events import STAGES
from dbfs.monitor.state import hmean_gteps

__all__ = ["register", "DbfsCollector"]


class DbfsCollector:
    """The dbfs metrics of the plugin in ``self.plugin`` (module docstring)."""

    def __init__(self):
        self.plugin = None

    def describe(self):
        return []     # metric families vary with the state: collected on each scrape, none at registration

    def collect(self):
        p = self.plugin
        if p is None:
            return

        t = p.totals
        for name, key, doc in (("runs", "runs", "dbfs runs announced to this scheduler"),
                               ("searches", "searches", "timed BFS searches finished"),
                               ("validation_failures", "validation_failures", "searches whose validation failed"),
                               ("levels", "levels", "BFS levels finished"),
                               ("level_seconds", "level_seconds", "seconds spent in BFS levels"),
                               ("exchange_seconds", "exchange_seconds",
                                "worker seconds in frontier exchange (dask backend)"),
                               ("exchange_bytes", "exchange_bytes",
                                "bytes the workers sent in frontier exchange (dask backend)"),
                               ("rejected_events", "rejected", "malformed dbfs events dropped")):
            yield CounterMetricFamily(f"dbfs_{name}", doc, value=t[key])
        s = p.searches
        yield GaugeMetricFamily("dbfs_last_gteps", "GTEPS of the last search", value=s[-1]["gteps"] if s else 0.0)
        yield GaugeMetricFamily("dbfs_hmean_gteps", "harmonic-mean GTEPS of the current run's searches",
                                value=hmean_gteps(s) or 0.0)
        yield GaugeMetricFamily("dbfs_run_searches", "searches done in the current run", value=len(s))
        yield GaugeMetricFamily("dbfs_run_roots", "searches the current run will do", value=p.stage["of"] or p.run.get("n_roots", 0))
        g = GaugeMetricFamily("dbfs_stage", "1 for the current dbfs stage", labels=["stage"])
        for st in ("idle",) + STAGES:
            g.add_metric([st], 1.0 if p.stage["stage"] == st else 0.0)
        yield g


_COLLECTOR = None


def register(plugin) -> DbfsCollector:
    """Point this process's collector at ``plugin`` (registering the collector on first use)."""
    global _COLLECTOR
    if _COLLECTOR is None:
        _COLLECTOR = DbfsCollector()
        REGISTRY.register(_COLLECTOR)
    _COLLECTOR.plugin = plugin
    return _COLLECTOR
