"""Monitoring a run: the live ``dbfs`` dashboard page, Prometheus metrics, the HTML run report.

Contract
--------
:func:`install` (called by the pipeline whenever a run starts on or joins a
cluster) registers, once per cluster, the scheduler plugin
(:class:`dbfs.monitor.state.MonitorPlugin`: the ``dbfs`` page and the
``/metrics`` collector) and the worker plugin
(:class:`dbfs.monitor.events.LevelPublisher`: live level records of the
distributed search), and returns the run's client-side
:class:`~dbfs.monitor.events.Publisher`. Without a client, or when the
cluster cannot load the plugins (a scheduler without dbfs installed), it
returns a Publisher that publishes nothing and says why in one line.

Modules, by job::

    events       what a run publishes (topic ``dbfs``; client and worker side)
    state        the scheduler plugin folding events into the run's state
    dashboard    the Bokeh page served by the scheduler's dashboard
    metrics      dbfs metrics on the scheduler's /metrics (prometheus_client)
    report_html  the self-contained HTML report of ``dbfs run --report``

docs/MONITORING.md describes what a user sees.
"""
from __future__ import annotations

from dbfs.monitor.events import TOPIC, LevelPublisher, Publisher
from dbfs.monitor.state import MonitorPlugin
from dbfs.progress import say
from dbfs.workers_info import scheduler_identity

__all__ = ["install", "Publisher", "TOPIC", "dashboard_url", "describe_cluster"]


def install(client, quiet: bool = False) -> Publisher:
    """Register the dbfs plugins on ``client``'s cluster (idempotent); the run's Publisher."""
    if client is None:
        return Publisher(None, quiet)

    try:
        client.register_plugin(MonitorPlugin())
        client.register_plugin(LevelPublisher())
    except Exception as e:  # the run does not depend on its monitor
        say(f"no dbfs dashboard page: the cluster could not load dbfs.monitor ({type(e).__name__}: {e})",
            quiet)
        return Publisher(None, quiet)
    return Publisher(client, quiet)


def dashboard_url(client) -> str | None:
    """The ``dbfs`` page's address on ``client``'s dashboard, or None without one."""
    link = getattr(client, "dashboard_link", None) if client is not None else None
    if not link:
        return None
    return link.rsplit("/", 1)[0] + "/dbfs"


def describe_cluster(client) -> dict | None:
    """The cluster a run used: scheduler, dashboard, workers (address, threads, memory limit), totals."""
    if client is None:
        return None
    try:
        info = scheduler_identity(client)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    ws = info.get("workers", {})
    workers = [{"address": a, "threads": int(w.get("nthreads", 0)), "memory_limit": int(w.get("memory_limit") or 0),
                "host": w.get("host", "")} for a, w in sorted(ws.items())]
    return {"scheduler": info.get("address"), "dashboard": getattr(client, "dashboard_link", None),
            "workers": workers, "n_workers": len(workers), "threads": sum(w["threads"] for w in workers),
            "memory_limit": sum(w["memory_limit"] for w in workers)}
