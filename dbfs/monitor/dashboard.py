"""The ``dbfs`` page of the Dask dashboard: a live Bokeh document on the scheduler.

Contract
--------
:func:`add_page` (called by :class:`dbfs.monitor.state.MonitorPlugin` when
it starts on a scheduler) serves :func:`dbfs_doc` at ``<prefix>dbfs`` of the
scheduler's dashboard and adds ``dbfs`` to the dashboard's navigation bar.
The page shows, redrawn every :data:`REFRESH_MS` when the plugin's state
changed:

- a header: dataset, backend, algorithm, the stage (generate / Kernel 1 /
  search k of n / validate), searches done, harmonic-mean GTEPS, validation failures;
- the searches: a table (k, root, ms, GTEPS, validation) and GTEPS per search
  (tables are HTML in ``Div`` models named ``dbfs-searches``, ``dbfs-levels``,
  ``dbfs-workers``: one ``tr.row`` per row);
- the current search's levels: a table (level, direction, frontier, edges
  examined, discovered, ms) and seconds per level, coloured by direction;
- per worker, kernel vs exchange seconds and the bytes it sent in the last
  level it ended (a table: worker, level, kernel ms, exchange ms, bytes
  sent; and a bar per worker, kernel and exchange ms stacked).

Method: the page is added the way ``distributed.dashboard.scheduler.connect``
adds Dask's own: a ``BokehTornado`` application (``BokehApplication``) added
to the scheduler's ``RoutingApplication`` and started on the scheduler's
event loop; it uses Dask's page template and theme, so it reads like the
other pages. The page only reads the plugin's state (no socket input).

Reference: Bokeh server applications (docs.bokeh.org "Bokeh server"),
distributed/dashboard/scheduler.py.
"""
from __future__ import annotations

from html import escape

from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, Div
from bokeh.plotting import figure
from bokeh.transform import factor_cmap
from distributed.dashboard.components.scheduler import BOKEH_THEME, env
from distributed.dashboard.core import BokehApplication
from distributed.dashboard.scheduler import template_variables
from tornado.ioloop import IOLoop

from dbfs.monitor.state import NAME, hmean_gteps

__all__ = ["add_page", "dbfs_doc", "REFRESH_MS", "PATH"]

REFRESH_MS = 500
PATH = "/dbfs"
_DIRS = ["td", "bu"]


def add_page(scheduler) -> None:
    """Serve :func:`dbfs_doc` on ``scheduler``'s dashboard (once per scheduler)."""
    from bokeh.server.tornado import BokehTornado  # deferred: bokeh

    http = getattr(scheduler, "http_application", None)
    dask_pages = [a for a in getattr(http, "applications", ()) if isinstance(a, BokehTornado)]
    if not dask_pages:
        raise RuntimeError("the scheduler serves no Bokeh dashboard")
    if getattr(scheduler, "_dbfs_page", False):
        return
    prefix = getattr(dask_pages[0], "_prefix", "") or "/"
    tv = template_variables(scheduler)      # memoized: the dict every dashboard page renders its menu from
    app = BokehApplication({PATH: dbfs_doc}, scheduler, prefix=prefix, template_variables=tv)
    http.add_application(app)
    app.initialize(IOLoop.current())
    app.start()
    if "dbfs" not in tv["pages"]:
        tv["pages"].append("dbfs")
    scheduler._dbfs_page = True


def dbfs_doc(scheduler, extra, doc):
    """The Bokeh document of the page (module docstring)."""
    page = _Page(scheduler.plugins.get(NAME))
    page.update()
    doc.add_periodic_callback(page.update, REFRESH_MS)
    doc.title = "Dask: dbfs"
    doc.add_root(page.root)
    doc.template = env.get_template("simple.html")
    doc.template_variables.update(extra)
    doc.theme = BOKEH_THEME


_TABLE_CSS = ("<style>.dbfs-t{border-collapse:collapse;font-size:12px}.dbfs-t td,.dbfs-t th{border-bottom:1px solid #ddd;"
              "padding:2px 8px;text-align:right}.dbfs-t th{background:#f0f0f0}</style>")


def _html_table(cols, rows) -> str:
    """An HTML table (a Div's text): ``cols`` = [(title, format)], ``rows`` of values; one ``tr.row`` per row."""
    head = "".join(f"<th>{escape(t)}</th>" for t, _ in cols)
    body = "".join("<tr class='row'>" + "".join(f"<td>{escape(fmt.format(v))}</td>" for (_, fmt), v in zip(cols, r))
                   + "</tr>" for r in rows)
    return f"{_TABLE_CSS}<table class='dbfs-t'><tr>{head}</tr>{body}</table>"


class _Page:
    """The page's models and its update from the plugin state."""

    def __init__(self, plugin):
        self.plugin = plugin
        self.seen = -1
        self.header = Div(text="", width=1100, name="dbfs-header")
        self.searches = ColumnDataSource({"k": [], "root": [], "ms": [], "gteps": [], "valid": []})
        self.levels = ColumnDataSource({"level": [], "direction": [], "frontier": [], "edges": [],
                                        "discovered": [], "ms": []})
        self.workers = ColumnDataSource({"worker": [], "level": [], "kernel_ms": [], "exchange_ms": [], "sent": []})
        # tables are HTML in Divs: a Bokeh DataTable kept showing stale cells after updates (headless chromium)
        self.t_s = Div(text="", width=560, name="dbfs-searches")
        self.t_l = Div(text="", width=560, name="dbfs-levels")
        self.t_w = Div(text="", width=560, name="dbfs-workers")
        t_s, t_l, t_w = self.t_s, self.t_l, self.t_w
        f_g = figure(title="GTEPS per search", height=260, width=520, x_axis_label="search", y_axis_label="GTEPS",
                     tools="")
        f_g.scatter("k", "gteps", source=self.searches, size=7)
        f_l = figure(title="current search: ms per level", height=260, width=520, x_axis_label="level",
                     y_axis_label="ms", tools="")
        f_l.vbar(x="level", top="ms", width=0.8, source=self.levels, legend_field="direction",
                 fill_color=factor_cmap("direction", palette=["#1f77b4", "#ff7f0e"], factors=_DIRS))
        self.f_w = figure(title="last level per worker: kernel vs exchange ms", height=220, width=520,
                          y_range=[], x_axis_label="ms", tools="")
        self.f_w.hbar_stack(["kernel_ms", "exchange_ms"], y="worker", height=0.7, source=self.workers,
                            color=["#2ca02c", "#d62728"], legend_label=["kernel", "exchange"])
        self.root = column(self.header, row(t_s, f_g), row(t_l, f_l), row(t_w, self.f_w), sizing_mode="fixed")

    def update(self):
        p = self.plugin
        if p is None:
            self.header.text = "<p>the dbfs monitor plugin is not on this scheduler</p>"
            return
        if p.version == self.seen:
            return
        self.seen = p.version
        self.header.text = _header(p)
        s = p.searches
        self.t_s.text = _html_table([("search", "{}"), ("root", "{}"), ("ms", "{:,.3f}"), ("GTEPS", "{:.4f}"),
                                     ("validation", "{}")],
                                    [(x["k"], x["root"], x["seconds"] * 1e3, x["gteps"],
                                      {True: "valid", False: "INVALID", None: "unvalidated"}[x["valid"]]) for x in s])
        self.searches.data = ({"k": [x["k"] for x in s], "root": [x["root"] for x in s],
                              "ms": [x["seconds"] * 1e3 for x in s], "gteps": [x["gteps"] for x in s],
                              "valid": [{True: "valid", False: "INVALID", None: "unvalidated"}[x["valid"]] for x in s]})
        lv = p.levels
        self.t_l.text = _html_table([("level", "{}"), ("dir", "{}"), ("frontier", "{:,}"), ("edges examined", "{:,}"),
                                     ("discovered", "{:,}"), ("ms", "{:,.3f}")],
                                    [(x["level"], x["direction"], x["frontier"], x["edges"], x["discovered"],
                                      x["time"] * 1e3) for x in lv])
        self.levels.data = ({"level": [x["level"] for x in lv], "direction": [x["direction"] for x in lv],
                           "frontier": [x["frontier"] for x in lv], "edges": [x["edges"] for x in lv],
                           "discovered": [x["discovered"] for x in lv], "ms": [x["time"] * 1e3 for x in lv]})
        ws = sorted(p.workers.items(), key=lambda kv: (kv[1]["widx"], kv[0]))
        names = [f"{v['widx']}: {k}" for k, v in ws]
        self.t_w.text = _html_table([("worker", "{}"), ("level", "{}"), ("kernel ms", "{:,.3f}"),
                                     ("exchange ms", "{:,.3f}"), ("bytes sent", "{:,}")],
                                    [(n, v["level"], v["kernel"] * 1e3, v["exchange"] * 1e3, v.get("sent", 0))
                                     for n, (_, v) in zip(names, ws)])
        self.workers.data = ({"worker": names, "level": [v["level"] for _, v in ws],
                            "kernel_ms": [v["kernel"] * 1e3 for _, v in ws],
                            "exchange_ms": [v["exchange"] * 1e3 for _, v in ws],
                            "sent": [v.get("sent", 0) for _, v in ws]})
        self.f_w.y_range.factors = names


def _header(p) -> str:
    r = p.run
    what = (f"{escape(r['dataset'])} (SCALE {r['scale']}, {r['n_vertices']:,} vertices, {r['n_edges']:,} edges), "
            f"backend {escape(r['backend'])}, algorithm {escape(r['algorithm'])}, {r['n_roots']} roots"
            if r else "no dbfs run yet")
    hm = hmean_gteps(p.searches)
    done = (f"{len(p.searches)} searches done" + (f", harmonic mean {hm:.4f} GTEPS" if hm else "")
            + f", {sum(1 for s in p.searches if s['valid'] is False)} validation failures")
    return (f"<h2 style='margin:4px 0'>dbfs</h2><div>{what}</div>"
            f"<div style='font-size:1.3em;margin:6px 0'>stage: <b id='dbfs-stage'>{escape(p.stage_text())}</b>"
            f"</div><div>{done}</div>")
