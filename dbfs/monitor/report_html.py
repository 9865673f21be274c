"""The self-contained HTML report of a run (``dbfs run --report run.html``).

Contract
--------
:func:`write_report` writes ONE HTML file that opens offline (no script,
style or image from elsewhere): the Graph500 output block (``<pre
id="graph500">``; for an invalid run the validation failures instead, as
the reference prints no results), the run's per-level plot and TEPS
histogram (the PNG of :func:`dbfs.report.plot_run`, embedded as a data
URI), one per-level plot per search (inline SVG, ``class="search-plot"``:
frontier and edges examined per level on a log scale, bottom-up levels
marked ``bu``), on a distributed run the slowest levels of every search
(:func:`dbfs.report.record.slowest_levels`: one ``table.slow-level`` per
level, per worker its kernel ms, exchange ms and bytes sent; the section,
``id="slow-levels"``, is left out when no level carries a per-worker
breakdown), the machine (:func:`dbfs.report.machine`) and the cluster
the run used, the stage wall times, and Dask's ``performance_report`` of the
cluster's part of the run (inline BokehJS) in an ``<iframe srcdoc>``. The
file is written atomically (temporary file, then rename).

Encoding: a level record is a dict with ``level``, ``frontier``, ``edges``
and ``direction`` (``"td"`` or ``"bu"``), as the backends' ``level_stats``
(the dask backend's also ``time`` and ``workers``: :func:`dbfs.report.record.slowest_levels`).

Reference: the per-level table of S. Beamer, K. Asanovic, D. Patterson,
"Direction-Optimizing Breadth-First Search", SC 2012; Dask's
``distributed.performance_report``.
"""
from __future__ import annotations

import base64
import math
import os
import tempfile
from html import escape
from pathlib import Path

from dbfs.report import machine, plot_run
from dbfs.report.record import TOP, slowest_levels

__all__ = ["write_report", "levels_svg"]

_CSS = """body{font-family:sans-serif;margin:1.5em;max-width:1300px}pre{background:#f4f4f4;padding:.6em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
th{background:#eee}.plots{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0;border:1px solid #ddd;padding:4px}
figcaption{font-size:12px}
caption{text-align:left;font-weight:bold;padding:6px 0 2px;white-space:nowrap}.slow-level{margin-bottom:8px}
iframe{width:100%;height:1100px;border:1px solid #ccc}.bad{color:#b00}"""


def levels_svg(levels, width: int = 300, height: int = 190) -> str:
    """An inline SVG of one search's levels: frontier (blue) and edges examined (orange), log10 scale."""
    pad_l, pad_r, pad_t, pad_b = 40, 8, 8, 28
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    vals = [max(1, d["frontier"]) for d in levels] + [max(1, d["edges"]) for d in levels]
    top = math.ceil(math.log10(max(vals))) if vals else 1
    top = max(top, 1)
    n = max(1, len(levels) - 1)

    def xy(i, v):
        return pad_l + w * i / n, pad_t + h * (1 - math.log10(max(1, v)) / top)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="10">',
           f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    for e in range(0, top + 1, max(1, top // 4)):
        y = pad_t + h * (1 - e / top)
        out.append(f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{pad_l - 3}" y="{y + 3:.1f}" text-anchor="end">1e{e}</text>')
    for i, d in enumerate(levels):
        x, _ = xy(i, 1)
        out.append(f'<text x="{x:.1f}" y="{pad_t + h + 12}" text-anchor="middle">{d["level"]}</text>')
    for key, colour in (("frontier", "#1f77b4"), ("edges", "#ff7f0e")):
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, d[key]) for i, d in enumerate(levels)))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for i, d in enumerate(levels):
            x, y = xy(i, d[key])
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>')
    for i, d in enumerate(levels):
        if d.get("direction") == "bu":
            x, y = xy(i, d["edges"])
            out.append(f'<text x="{x:.1f}" y="{y - 5:.1f}" text-anchor="middle" fill="#ff7f0e">bu</text>')
    out.append(f'<text x="{pad_l + w / 2}" y="{height - 2}" text-anchor="middle">level</text></svg>')
    return "".join(out)


def _kv_table(rows) -> str:
    return "<table>" + "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>" for k, v in rows) \
        + "</table>"


def _overview_png(res) -> str:
    """The run's plot_run PNG (first root's levels, TEPS histogram) as a data URI."""
    with tempfile.TemporaryDirectory() as d:
        p = plot_run(Path(d) / "run.png", res,
                     {f"{res.config['algorithm']} ({res.config['backend']})": res.levels[0] if res.levels else []})
        return "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode()


def _searches(res) -> str:
    figs = []
    for i, r in enumerate(res.roots):
        t = res.times[i]
        gteps = res.nedges[i] / t / 1e9 if t > 0 else 0.0
        v = "" if not res.validated else (" valid" if res.valid[i] else " <b class='bad'>INVALID</b>")
        figs.append(f'<figure class="search-plot" data-root="{int(r)}">{levels_svg(res.levels[i])}<figcaption>'
                    f"search {i + 1}: root {int(r)}, {t * 1e3:.3f} ms, {gteps:.4f} GTEPS, "
                    f"{len(res.levels[i])} levels{v}</figcaption></figure>")
    return ("<p>per level: <span style='color:#1f77b4'>frontier (vertices)</span> and "
            "<span style='color:#ff7f0e'>edges examined</span>, log scale; <i>bu</i>: bottom-up level</p>"
            f"<div class='plots'>{''.join(figs)}</div>")


def _slow_levels(res) -> str:
    """The slowest levels' per-worker tables (section ``slow-levels``), or "" without a breakdown."""
    slow = slowest_levels(res.roots, res.levels, TOP)
    if not slow:
        return ""
    out = [f"<p>the {len(slow)} slowest levels of the run (every search), slowest first: per worker, the "
           "milliseconds in its kernel and in the frontier exchange (sending, and waiting for its peers), and the "
           "bytes it sent to them; bold: the longest kernel, the worker the others waited for</p>"]
    for s in slow:
        ws = s["workers"]
        busiest = max(range(len(ws)), key=lambda j: ws[j]["kernel"])
        rows = []
        for j, w in enumerate(ws):
            cells = (str(w["worker"]), escape(w["kind"]), f"{w['kernel'] * 1e3:,.3f}", f"{w['exchange'] * 1e3:,.3f}",
                     f"{w['sent_bytes']:,}")
            if j == busiest:
                cells = tuple(f"<b>{c}</b>" for c in cells)
            rows.append("<tr class='row'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        out.append(f"<table class='slow-level' data-search='{s['search']}' data-level='{s['level']}'>"
                   f"<caption>search {s['search']} (root {s['root']}), level {s['level']} "
                   f"({escape(s['direction'] or '?')}), frontier {s['frontier']:,}: {s['time'] * 1e3:,.3f} ms, "
                   f"{sum(w['sent_bytes'] for w in ws):,} bytes sent</caption>"
                   "<tr><th>worker</th><th>kind</th><th>kernel ms</th><th>exchange ms</th><th>bytes sent</th></tr>"
                   + "".join(rows) + "</table>")
    return ("<section id='slow-levels'><h2>Slowest levels: where the time went</h2>" + "".join(out)
            + "</section>")


def _cluster(c) -> str:
    if not c:
        return "<p>no Dask cluster: every stage ran in this process</p>"
    if "error" in c:
        return f"<p>cluster not described: {escape(c['error'])}</p>"
    rows = [("scheduler", c["scheduler"]), ("dashboard", c["dashboard"]), ("workers", c["n_workers"]),
            ("threads", c["threads"]), ("memory limit (bytes)", f"{c['memory_limit']:,}")]
    ws = "".join(f"<tr><td>{escape(w['address'])}</td><td>{w['threads']}</td><td>{w['memory_limit']:,}</td></tr>"
                 for w in c["workers"])
    return _kv_table(rows) + f"<h3>workers</h3><table><tr><th>address</th><th>threads</th><th>memory limit</th>" \
                             f"</tr>{ws}</table>"


def _perf(perf_html) -> str:
    if not perf_html:
        return ("<p>no Dask performance report: no Dask cluster ran a stage of this run "
                "(everything was stored, or --scheduler threads)</p>")
    return f'<iframe id="dask-performance-report" srcdoc="{escape(perf_html, quote=True)}"></iframe>'


def write_report(path, res, graph500_text: str | None, perf_html: str | None = None) -> Path:
    """Write the report of run ``res`` (a :class:`dbfs.pipeline.RunResult`) to ``path`` (module docstring).

    ``graph500_text``: the Graph500 block as printed (None for an invalid run: its failures are shown);
    ``perf_html``: Dask's performance report (HTML text) or None.
    """
    if graph500_text is not None:
        block = f'<pre id="graph500">{escape(graph500_text)}</pre>'
    else:
        block = "<p class='bad'>invalid run: no Graph500 results (validation failed)</p><ul>" + "".join(
            f"<li>root {f['root']}: {escape(str(f['summary']))}</li>" for f in res.failures) + "</ul>"
    m = machine()
    mrows = [("host", m["host"]), ("platform", m["platform"]), ("cpu", m["cpu"]), ("cores", m["cores"]),
             ("memory (bytes)", f"{m['memory_bytes']:,}" if m["memory_bytes"] else "?")] + \
        [(f"version {k}", v) for k, v in m["versions"].items()]
    stages = [("generation_time (stored)", f"{res.generation_time:.3f} s"),
              ("construction_time (Kernel 1 + prepare)", f"{res.construction_time:.3f} s"),
              ("load_time", f"{res.load_time:.3f} s")] + \
        [(f"{k} (wall, this run)", f"{v:.3f} s") for k, v in res.stages.items()]
    title = f"dbfs run: {res.dataset}, {res.config['algorithm']} on {res.config['backend']}"
    html = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>"
            f"<p>{res.n_vertices:,} vertices, {res.n_edges:,} edge tuples, {len(res.roots)} searches</p>"
            f"<h2>Graph500 output</h2>{block}"
            f"<h2>Per-level work and TEPS</h2><img alt='per-level work and TEPS' src='{_overview_png(res)}' "
            f"style='max-width:100%'>"
            f"<h2>Searches</h2>{_searches(res)}"
            f"{_slow_levels(res)}"
            f"<h2>Stage times</h2>{_kv_table(stages)}"
            f"<h2>Machine</h2>{_kv_table(mrows)}"
            f"<h2>Cluster</h2>{_cluster(res.cluster)}"
            f"<h2>Dask performance report</h2>{_perf(perf_html)}</body></html>")
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, path)
    return path
