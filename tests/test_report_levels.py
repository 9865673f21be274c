"""Where a slow level went: per worker kernel, exchange and bytes sent, from a real dask run.

One real run (``--backend dask``, 2 partitions on the ``client`` fixture's LocalCluster of 2 worker
processes, a SCALE 10 Kronecker graph on disk) feeds every check:

- the scheduler's monitor state (filled by the workers' ``LevelPublisher``): per worker, the kernel
  seconds and bytes sent of the last level equal the run's own per-level ``workers`` records, and
  the bytes counter covers every byte the timed searches sent;
- the JSON record and :func:`dbfs.report.slowest_levels` pick the same slowest levels;
- the HTML report (``dbfs run --report``) shows them, one table per level, slowest first, each
  worker's kernel ms, exchange ms and bytes sent as in the JSON;
- a single-process run's report (no per-worker data) has no such section.
"""
import json
import re
import time
from html import unescape

import pytest

from dbfs.pipeline import RunConfig, run_graph500
from dbfs.report import result_dict, slowest_levels, slowest_levels_of_record
from dbfs.spec import GraphSpec

pytestmark = pytest.mark.distributed

ROOTS = 4


@pytest.fixture(scope="module")
def dask_run(client, tmp_path_factory):
    root = tmp_path_factory.mktemp("slow-levels")
    # cyclic partitions: no shared memory between the workers, so the levels send their pairs and slices by the
    # mesh and the bytes counted are not all zero (block partitions on one host send none)
    res = run_graph500(GraphSpec.make("kronecker", 10), root,
                       RunConfig(backend="dask", partitions=2, partitioning="cyclic", n_roots=ROOTS, quiet=True),
                       client=client)
    assert res.validated and res.ok, res.failures
    return res


def _monitor_state(dask_scheduler):
    p = dask_scheduler.plugins["dbfs-monitor"]
    return {"workers": {a: dict(w) for a, w in p.workers.items()}, "totals": dict(p.totals)}


def test_monitor_state_has_each_workers_bytes_sent(client, dask_run):
    last = {w["worker"]: w for w in dask_run.levels[-1][-1]["workers"]}
    deadline = time.monotonic() + 10
    while True:     # the workers' last level records travel on their batched streams
        st = client.run_on_scheduler(_monitor_state)
        ws = st["workers"]
        if (len(ws) == 2 and all(w["level"] == dask_run.levels[-1][-1]["level"] for w in ws.values())) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(ws) == 2, ws
    for w in ws.values():
        mine = last[w["widx"]]
        assert w["sent"] == mine["sent_bytes"] and w["kernel"] == pytest.approx(mine["kernel"])
    timed = sum(w["sent_bytes"] for lv in dask_run.levels for d in lv for w in d["workers"])
    assert timed > 0 and st["totals"]["exchange_bytes"] >= timed


def test_json_record_and_slowest_levels_agree(dask_run):
    rec = json.loads(json.dumps(result_dict(dask_run, {}), default=str))
    slow = slowest_levels(dask_run.roots, dask_run.levels)
    assert slow == slowest_levels_of_record(rec)
    every = sorted(d["time"] for lv in dask_run.levels for d in lv)
    assert len(slow) == min(5, len(every)) and [s["time"] for s in slow] == every[::-1][:len(slow)]
    for s in slow:
        d = dask_run.levels[s["search"] - 1][s["level"]]
        assert s["root"] == int(dask_run.roots[s["search"] - 1]) and s["frontier"] == d["frontier"]
        assert [w["sent_bytes"] for w in s["workers"]] == [w["sent_bytes"] for w in d["workers"]]
    for lv in rec["searches"][0]["levels"]:     # a record written before bytes were counted: 0 bytes
        for w in lv["workers"]:
            del w["sent_bytes"]
    assert all(w["sent_bytes"] == 0 for s in slowest_levels_of_record(rec, n=100) if s["search"] == 1
               for w in s["workers"])


def _section(html):
    m = re.search(r"<section id='slow-levels'>(.*?)</section>", html, re.S)
    return m.group(1) if m else None


def test_report_shows_the_slowest_levels_per_worker(dask_run, tmp_path):
    from dbfs.monitor.report_html import write_report

    html = write_report(tmp_path / "run.html", dask_run, "graph500 block\n").read_text()
    sec = _section(html)
    assert sec is not None and "Slowest levels" in sec
    assert html.index("id='slow-levels'") > html.index("<h2>Searches</h2>")
    tables = re.findall(r"<table class='slow-level' data-search='(\d+)' data-level='(\d+)'>(.*?)</table>", sec, re.S)
    slow = slowest_levels(dask_run.roots, dask_run.levels)
    assert [(int(a), int(b)) for a, b, _ in tables] == [(s["search"], s["level"]) for s in slow]
    for (_, _, body), s in zip(tables, slow):
        cap = unescape(re.search(r"<caption>(.*?)</caption>", body).group(1))
        assert cap.startswith(f"search {s['search']} (root {s['root']}), level {s['level']} ({s['direction']}), "
                              f"frontier {s['frontier']:,}: {s['time'] * 1e3:,.3f} ms")
        head = re.findall(r"<th>(.*?)</th>", body)
        assert head == ["worker", "kind", "kernel ms", "exchange ms", "bytes sent"]
        rows = [[re.sub(r"</?b>", "", c) for c in re.findall(r"<td>(.*?)</td>", r)]
                for r in re.findall(r"<tr class='row'>(.*?)</tr>", body)]
        assert rows == [[str(w["worker"]), "cpu", f"{w['kernel'] * 1e3:,.3f}", f"{w['exchange'] * 1e3:,.3f}",
                         f"{w['sent_bytes']:,}"] for w in s["workers"]]
        assert body.count("<b>") == 5        # the longest kernel: the worker the others waited for
        k = max(range(len(s["workers"])), key=lambda j: s["workers"][j]["kernel"])
        assert re.findall(r"<tr class='row'>(.*?)</tr>", body)[k].startswith("<td><b>")


def test_single_process_report_has_no_slow_level_section(tmp_path):
    from dbfs.monitor.report_html import write_report

    res = run_graph500(GraphSpec.make("kronecker", 8), tmp_path, RunConfig(n_roots=2, quiet=True))
    assert res.levels and not any("workers" in d for lv in res.levels for d in lv)
    assert slowest_levels(res.roots, res.levels) == []
    html = write_report(tmp_path / "run.html", res, "graph500 block\n").read_text()
    assert "slow-levels" not in html and "<h2>Searches</h2>" in html
