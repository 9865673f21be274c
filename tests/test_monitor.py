"""dbfs.monitor without a browser: the scheduler state's folding of events, the
checks on what arrives, the report's SVG, the --report path errors, the task names."""
import xml.etree.ElementTree as ET

import pytest

from dbfs.monitor.events import MESH_PLUGIN, TOPIC, level_record, levels_event
from dbfs.monitor.state import MonitorPlugin, hmean_gteps


def _levels(levels, widx=0, source="w0", t=0.001):
    return levels_event([level_record({"level": lv, "worker": widx, "direction": "td" if lv < 2 else "bu",
                                       "frontier": 10 ** lv, "edges": 3 * 10 ** lv, "discovered": 7, "time": t,
                                       "kernel": t / 2, "exchange": t / 4}) for lv in levels], source)


def test_mesh_plugin_name_is_the_seams():
    from dbfs.bfs.dask.mesh.plugin import NAME

    assert MESH_PLUGIN == NAME


def test_state_folds_a_run():
    p = MonitorPlugin()
    p.log_event(TOPIC, {"kind": "run", "dataset": "d", "scale": 10, "n_vertices": 1024, "n_edges": 16384,
                        "backend": "dask", "algorithm": "do", "n_roots": 2, "partitions": 2})
    p.log_event(TOPIC, {"kind": "stage", "stage": "search", "k": 1, "of": 2, "root": 5})
    assert p.stage_text() == "search 1 of 2 (root 5)"
    p.log_event(TOPIC, _levels([0, 1], 0, "tcp://a"))
    p.log_event(TOPIC, _levels([0, 1, 2], 1, "tcp://b", t=0.002))
    p.log_event(TOPIC, _levels([2], 0, "tcp://a"))
    assert [x["level"] for x in p.levels] == [0, 1, 2]          # mesh worker 0's records only
    assert p.workers["tcp://b"]["level"] == 2 and p.workers["tcp://b"]["exchange"] == pytest.approx(0.0005)
    p.log_event(TOPIC, {"kind": "search", "k": 1, "root": 5, "seconds": 0.5, "nedge": 10 ** 9, "valid": True})
    p.log_event(TOPIC, {"kind": "stage", "stage": "search", "k": 2, "of": 2, "root": 6})
    p.log_event(TOPIC, _levels([0], 0, "tcp://a"))
    assert [x["level"] for x in p.levels] == [0]                # level 0 starts the next search's table
    p.log_event(TOPIC, {"kind": "search", "k": 2, "root": 6, "seconds": 0.25, "nedge": 10 ** 9, "valid": False})
    assert [s["gteps"] for s in p.searches] == pytest.approx([2.0, 4.0])
    assert hmean_gteps(p.searches) == pytest.approx(2 / (1 / 2 + 1 / 4))
    assert p.totals["searches"] == 2 and p.totals["validation_failures"] == 1 and p.totals["levels"] == 4
    assert p.totals["level_records"] == 7
    assert p.totals["rejected"] == 0


@pytest.mark.parametrize("msg", [
    "text", {"kind": "nosuch"}, {"kind": "stage", "stage": "format-disk", "k": 0, "of": 0, "root": -1},
    {"kind": "search", "k": 1, "root": 5, "seconds": "0.1", "nedge": 1, "valid": True},
    {"kind": "levels", "source": "w"},
    {"kind": "levels", "source": "w", "records": [{"widx": 0, "level": 0}]},
    {"kind": "levels", "source": "w", "records": ["x"]},
], ids=["not-a-dict", "unknown-kind", "unknown-stage", "wrong-type", "no-records", "short-record", "bad-record"])
def test_state_drops_malformed_events(msg):
    p = MonitorPlugin()
    v = p.version
    p.log_event(TOPIC, msg)
    assert p.totals["rejected"] == 1 and p.version == v and p.searches == [] and p.stage["stage"] == "idle"
    p.log_event("some-other-topic", msg)                        # other topics are not ours to judge
    assert p.totals["rejected"] == 1


def test_levels_svg_is_svg():
    from dbfs.monitor.report_html import levels_svg

    svg = levels_svg([{"level": i, "frontier": 10 ** i, "edges": 5 * 10 ** i, "direction": "bu" if i else "td"}
                      for i in range(4)])
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 2
    assert sum(1 for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text == "bu") == 3


@pytest.mark.parametrize("where", ["missing-folder", "a-folder"])
def test_report_path_refused_before_any_work(tmp_path, dbfs_cli, where):
    bad = tmp_path / "nope" / "run.html" if where == "missing-folder" else tmp_path
    res = dbfs_cli("run", "--scale", 8, "--datasets", tmp_path / "ds", "--scheduler", "threads",
                   "--report", bad, ok=False)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dbfs: error: --report") and "pass a" in lines[0]
    assert not (tmp_path / "ds").exists()                       # nothing generated


def test_validation_task_keys():
    """The validation's tasks are named validate-chunk-<step> (Dask's task prefix, as the dashboard groups them)."""
    from dask.utils import key_split

    from dbfs.validate import dask as vd

    keys = {key_split(vd._key(s)) for s in ("join", "edges", "or")}
    assert keys == {"validate-chunk-join", "validate-chunk-edges", "validate-chunk-or"}
    assert vd._key("edges") != vd._key("edges")


def test_publisher_stops_in_one_line_when_the_scheduler_is_gone(capsys):
    """Monitoring never fails a run: a lost scheduler stops the publisher with one stderr line."""
    from distributed import Client, LocalCluster

    from dbfs.monitor import install

    with LocalCluster(n_workers=0, processes=False, dashboard_address="127.0.0.1:0") as cluster:
        client = Client(cluster)
        pub = install(client)
        pub.stage("search", 1, 2, 5)
        state = cluster.scheduler.plugins["dbfs-monitor"]
        assert state.stage_text() == "search 1 of 2 (root 5)"
    pub.stage("validate", 1, 2, 5)                              # the cluster is closed
    client.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert not pub.active and len(err) == 1 and err[0].startswith("dbfs: monitoring stopped (")
    pub.search(1, 5, 0.1, 10, True)                             # no more lines, no error
    assert capsys.readouterr().err == ""


def _sent_levels(source, widx, level, sent, t=0.004):
    rec = level_record({"level": level, "worker": widx, "direction": "td", "frontier": 5, "edges": 9, "discovered": 3,
                        "time": t, "kernel": t / 2, "exchange": t / 4, "sent": sent})
    return levels_event([rec], source)


def test_state_carries_bytes_sent_and_old_records_count_zero():
    p = MonitorPlugin()
    p.log_event(TOPIC, _sent_levels("tcp://a", 0, 0, 1000))
    p.log_event(TOPIC, _sent_levels("tcp://b", 1, 0, 250))
    p.log_event(TOPIC, _sent_levels("tcp://a", 0, 1, 1_234_567))
    assert p.workers["tcp://a"]["sent"] == 1_234_567 and p.workers["tcp://b"]["sent"] == 250
    assert p.totals["exchange_bytes"] == 1000 + 250 + 1_234_567
    old = dict(_sent_levels("tcp://b", 1, 1, 0)["records"][0])
    del old["sent"]                                             # a worker from before "sent" existed
    p.log_event(TOPIC, levels_event([old], "tcp://b"))
    assert p.totals["rejected"] == 0 and p.workers["tcp://b"]["sent"] == 0 and p.workers["tcp://b"]["level"] == 1
    assert p.totals["exchange_bytes"] == 1000 + 250 + 1_234_567
    assert level_record({"level": 0, "frontier": 1, "edges": 2, "time": 0.1})["sent"] == 0


@pytest.mark.parametrize("sent", ["12", -1, True, 1.5], ids=["text", "negative", "bool", "float"])
def test_state_drops_a_bad_bytes_sent(sent):
    p = MonitorPlugin()
    rec = dict(_sent_levels("tcp://a", 0, 0, 0)["records"][0], sent=sent)
    p.log_event(TOPIC, levels_event([rec], "tcp://a"))
    assert p.totals["rejected"] == 1 and p.workers == {} and p.totals["exchange_bytes"] == 0


def _cells(html):
    import re

    return [re.findall(r"<t[dh]>(.*?)</t[dh]>", r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", html)]


def test_dashboard_shows_bytes_sent_per_worker():
    from dbfs.monitor.dashboard import _Page

    p = MonitorPlugin()
    p.log_event(TOPIC, _sent_levels("tcp://a", 0, 3, 1_234_567))
    p.log_event(TOPIC, _sent_levels("tcp://b", 1, 3, 0, t=0.008))
    page = _Page(p)
    page.update()
    head, a, b = _cells(page.t_w.text)
    assert head == ["worker", "level", "kernel ms", "exchange ms", "bytes sent"]
    assert a == ["0: tcp://a", "3", "2.000", "1.000", "1,234,567"]
    assert b == ["1: tcp://b", "3", "4.000", "2.000", "0"]
    assert page.workers.data["sent"] == [1_234_567, 0]


def test_metrics_export_exchange_bytes():
    from dbfs.monitor.metrics import DbfsCollector

    p = MonitorPlugin()
    p.log_event(TOPIC, _sent_levels("tcp://a", 0, 0, 4096))
    p.log_event(TOPIC, _sent_levels("tcp://b", 1, 0, 1024))
    c = DbfsCollector()
    c.plugin = p
    got = {s.name: s.value for fam in c.collect() for s in fam.samples}
    assert got["dbfs_exchange_bytes_total"] == 5120
    from dbfs.monitor import metrics

    assert "``dbfs_exchange_bytes_total``" in metrics.__doc__
