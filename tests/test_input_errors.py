"""Input a new user can give that must end in one line (exit 2) or in visible, bounded work.

What is checked:

- work whose size is unbounded is planned in bounded batches: ``dbfs generate
  --scale 42`` (inside the documented SCALE range) shows its progress line at
  once and holds its memory flat (a real subprocess, stopped with Ctrl-C,
  which leaves nothing behind); generation runs a bounded window of chunk
  tasks on the threaded scheduler and on a LocalCluster, with the same
  checksum as one big batch;
- ``--partitions`` beyond ``N // 64`` (every partition owns at least 64
  vertices) is refused before any work by ``run``, ``bfs``, ``build`` and the
  dask backend;
- one-line errors (exit 2) where a traceback or ``Aborted!`` came: a
  non-finite R-MAT initiator, ``--plot``/``--report``/``--out`` names with the
  wrong suffix (before any work), an empty, non-.npy or truncated parent file;
- imported ids: every int64 id is read (``--compact-ids`` makes 2**63 - 2
  usable), a larger one is refused naming the int64 limit;
- the Python API raises ``ValueError`` (:class:`dbfs.ArgumentError`) naming the
  argument for a root that is not an integer and a ``graph500_roots`` SCALE out
  of range; NumPy integer roots still work.
"""
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import dbfs
from dbfs import store
from dbfs.errors import ArgumentError, DbfsError
from dbfs.spec import GraphSpec


def one_line(res, *words):
    """``res`` (a click Result) is exit 2 with exactly one ``dbfs: error:`` line holding ``words``."""
    err = res.stderr.strip()
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert len(err.splitlines()) == 1 and err.startswith("dbfs: error: "), err
    for w in words:
        assert w in err, (w, err)
    return err


# ---- item 3: bounded work ------------------------------------------------------------------------
def test_generate_scale_42_shows_progress_at_once_with_bounded_memory(tmp_path):
    """SCALE 42 has 67,108,864 chunks: the progress line comes within seconds, memory stays flat, Ctrl-C
    stops it in one line and removes the temporary dataset and the lock."""
    import psutil

    root = tmp_path / "ds"
    p = subprocess.Popen([sys.executable, "-m", "dbfs.cli", "generate", "--scale", "42", "--datasets", str(root),
                          "--scheduler", "threads"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    proc = psutil.Process(p.pid)
    try:
        seen, peak, t0 = [], 0, time.monotonic()
        import threading

        reader = threading.Thread(target=lambda: seen.extend(iter(p.stderr.readline, "")), daemon=True)
        reader.start()
        while not any("67,108,864 chunks" in line for line in seen):
            assert p.poll() is None, "".join(seen)
            peak = max(peak, proc.memory_info().rss)
            assert peak < 1 << 30, f"{peak / 2**20:.0f} MiB before the progress line: the work is planned whole"
            assert time.monotonic() - t0 < 60, f"no progress line in 60 s: {seen}"
            time.sleep(0.1)
        for _ in range(30):                      # 3 s of generation: memory does not grow with the chunks
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.1)
        assert p.poll() is None and peak < 1 << 30, peak
        p.send_signal(signal.SIGINT)
        assert p.wait(60) != 0
        reader.join(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert [x.name for x in root.iterdir()] == [], "a stopped generation leaves its temporary directory"


def _graph_sizes(fn):
    """The task count of every graph the threaded scheduler started during fn()."""
    from dask.callbacks import Callback

    sizes = []
    with Callback(start=lambda dsk: sizes.append(len(dsk))):
        fn()
    return sizes


@pytest.mark.parametrize("edges", ["stored", "virtual"])
def test_generation_runs_in_bounded_batches_on_threads(tmp_path, edges):
    spec = GraphSpec.make(scale=9)
    whole, _ = store.generate(spec, tmp_path / "whole", quiet=True, edges=edges)
    sizes = _graph_sizes(lambda: store.generate(spec, tmp_path / "cut", chunk_edges=10, quiet=True, edges=edges))
    assert sum(sizes) == 820 and max(sizes) <= 64, sizes           # 820 chunks, never all at once
    cut = store.open_dataset(spec.name, tmp_path / "cut")
    assert cut.attrs["edges_checksum"] == whole.attrs["edges_checksum"]
    if edges == "stored":
        assert np.array_equal(cut.edges()[:], whole.edges()[:])


@pytest.mark.distributed
def test_generation_runs_in_a_bounded_window_on_a_cluster(tmp_path):
    """On a LocalCluster the scheduler never holds the 820 chunk tasks at once; same checksum."""
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    class MostTasks(SchedulerPlugin):
        name = "most-tasks"

        def __init__(self):
            self.most = 0

        async def start(self, scheduler):
            self.scheduler = scheduler

        def transition(self, key, start, finish, *args, **kwargs):
            self.most = max(self.most, len(self.scheduler.tasks))

    spec = GraphSpec.make(scale=9)
    whole, _ = store.generate(spec, tmp_path / "whole", quiet=True, edges="virtual")
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        client.register_plugin(MostTasks())
        cut, _ = store.generate(spec, tmp_path / "cut", chunk_edges=10, client=client, quiet=True, edges="virtual")
        most = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins["most-tasks"].most)
    assert cut.attrs["edges_checksum"] == whole.attrs["edges_checksum"]
    assert 0 < most <= 200, most                                     # window 64 (+ releases in flight), not 820


def test_too_many_partitions_refused_before_any_work(tmp_path, dbfs_cli):
    """At least 64 vertices per partition: SCALE 10 (1,024 vertices) allows --partitions 16. The first
    case runs as a subprocess with a deadline (it used to load for minutes and search for longer)."""
    import os

    cmd = [sys.executable, "-m", "dbfs.cli", "run", "--scale", "10", "--backend", "dask", "--partitions", "5000",
           "--workers", "1", "--datasets", str(tmp_path / "ds")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 2 and out == "", (p.returncode, out, err)
    err = err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dbfs: error: --partitions 5000 is too many"), err
    assert "1,024 vertices" in err and "--partitions 16 or fewer" in err
    assert not (tmp_path / "ds").exists(), "refused before any work"
    ds = tmp_path / "ds"
    name = dbfs_cli("generate", "--scale", 10, "--datasets", ds, "--scheduler", "threads").stdout.strip()
    for args in (["run", name, "--backend", "dask"], ["bfs", name, "--root", 1, "--backend", "dask"],
                 ["build", name, "--scheduler", "threads"]):
        one_line(dbfs_cli(*args, "--partitions", 17, "--datasets", ds, ok=False), "--partitions 17 is too many",
                 "--partitions 16 or fewer")
    assert not (ds / name / "csr").exists()


def test_partition_rule_and_the_dask_backend_check():
    from dbfs.backends import RunConfig
    from dbfs.backends.dask import DaskBackend
    from dbfs.partition import check_partition_count, max_partitions

    assert [max_partitions(n) for n in (0, 63, 128, 1024, 1 << 30)] == [1, 1, 2, 16, 1 << 24]
    check_partition_count(16, 1024)
    check_partition_count(1, 1)
    with pytest.raises(DbfsError, match="--partitions 17 is too many for a graph of 1,024 vertices"):
        check_partition_count(17, 1024)

    class Tiny:                                     # the dataset attributes csr() reads first
        n_vertices, name, path = 1024, "tiny", None

    with pytest.raises(DbfsError, match="--partitions 5000 is too many"):
        DaskBackend.csr(Tiny(), RunConfig(backend="dask", partitions=5000), client=None)


# ---- item 4: one line instead of a traceback -----------------------------------------------------
@pytest.mark.parametrize("flag,value", [("--a", "nan"), ("--b", "inf"), ("--c", "-inf")])
def test_rmat_initiator_must_be_finite(tmp_path, dbfs_cli, flag, value):
    one_line(dbfs_cli("generate", "--kind", "rmat", "--scale", 6, f"{flag}={value}", "--datasets", tmp_path,
                      "--scheduler", "threads", ok=False), f"{flag} {value}", "finite")
    assert not any(tmp_path.iterdir())
    with pytest.raises(DbfsError, match="not a finite number"):
        GraphSpec.make(kind="rmat", scale=6, a=float("nan"))


@pytest.mark.parametrize("args,words", [
    (["run", "--scale", 8, "--plot", "x.txt"], ["--plot x.txt", ".png", "--plot x.png"]),
    (["run", "--scale", 8, "--plot", "x"], ["--plot x", ".png"]),
    (["run", "--scale", 8, "--report", "r.txt"], ["--report r.txt", ".html"]),
    (["bfs", "--scale", 8, "--root", 1, "--out", "p.txt"], ["--out p.txt", ".npy"]),
], ids=["plot-txt", "plot-nosuffix", "report-txt", "out-txt"])
def test_output_names_checked_before_any_work(tmp_path, dbfs_cli, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    one_line(dbfs_cli(*args, "--datasets", tmp_path / "ds", "--scheduler", "threads", ok=False), *words)
    assert not (tmp_path / "ds").exists()


@pytest.fixture(scope="module")
def s6(tmp_path_factory):
    from dbfs.cli import cli
    from click.testing import CliRunner

    root = tmp_path_factory.mktemp("s6")
    res = CliRunner().invoke(cli, ["generate", "--scale", "6", "--datasets", str(root), "--scheduler", "threads"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return root, res.stdout.strip()


def _npy_bytes(n):
    import io

    buf = io.BytesIO()
    np.save(buf, np.full(n, -1, np.int64))
    return buf.getvalue()


@pytest.mark.parametrize("content,words", [
    (b"", ["empty (0 bytes)"]),
    (b"1 2 3\n", ["not a .npy file"]),
    (_npy_bytes(64)[:-40], ["not a readable .npy array"]),
    (_npy_bytes(64)[:30], ["not a readable .npy array"]),
], ids=["empty", "text", "truncated-data", "truncated-header"])
def test_bad_parent_file_is_one_line(tmp_path, dbfs_cli, s6, content, words):
    root, name = s6
    p = tmp_path / "p.npy"
    p.write_bytes(content)
    one_line(dbfs_cli("validate", name, "--root", 1, "--parent", p, "--datasets", root, ok=False),
             "parent file", *words, "numpy.save")


def test_imported_ids_up_to_int64(tmp_path, dbfs_cli):
    from dbfs.generate.importer import read_edges

    big = (1 << 63) - 2
    f = tmp_path / "big.txt"
    f.write_text(f"0 1\n1 {big}\n00000000000000000000002 1\n")      # leading zeros: still 2
    edges, n = read_edges(f)
    assert edges.tolist() == [[0, 1], [1, big], [2, 1]] and n == big + 1
    ds = tmp_path / "ds"
    err = one_line(dbfs_cli("generate", "--input", f, "--datasets", ds, "--scheduler", "threads", ok=False),
                   "--compact-ids")
    assert "digits" not in err
    name = dbfs_cli("generate", "--input", f, "--compact-ids", "--datasets", ds, "--scheduler", "threads").stdout.strip()
    dbfs_cli("export", name, "--out", tmp_path / "e.npy", "--datasets", ds)
    assert np.load(tmp_path / "e.npy").tolist() == [[0, 1], [1, big], [2, 1]]
    f.write_text(f"0 1\n1 {1 << 63}\n")
    with pytest.raises(DbfsError, match=r"line 2 has a vertex id above 9,223,372,036,854,775,807 \(2\*\*63 - 1"):
        read_edges(f)


@pytest.fixture(scope="module")
def g8():
    edges = dbfs.kronecker_edges(8)
    return edges, dbfs.build_csr(edges, n_vertices=256)


@pytest.mark.parametrize("root", ["5", 5.7, 5.0, True, None, np.float64(5)])
def test_bfs_root_of_the_wrong_type_is_a_value_error(g8, root):
    with pytest.raises(ValueError, match=r"root .* is not an integer vertex id: pass an int 0 <= root < 256") as e:
        dbfs.bfs(g8[1], root)
    assert isinstance(e.value, DbfsError) and isinstance(e.value, ArgumentError)


def test_bfs_root_out_of_range_and_numpy_roots(g8):
    edges, g = g8
    with pytest.raises(ValueError, match="root 256 is out of range"):
        dbfs.bfs(g, 256)
    r = int(dbfs.graph500_roots(edges, 8, n=1)[0])
    ref = dbfs.bfs(g, r).parent
    for root in (np.int64(r), np.int32(r), np.uint16(r), np.array(r)):
        assert np.array_equal(dbfs.bfs(g, root).parent, ref)


@pytest.mark.parametrize("kw,words", [
    ({"scale": 99}, "scale=99 is invalid: pass an integer 1..62"),
    ({"scale": 8.0}, "scale=8.0 is invalid"),
    ({"scale": "8"}, "scale='8' is invalid"),
    ({"scale": 8, "n": 0}, "n=0 is invalid: pass an integer >= 1"),
    ({"scale": 8, "seed1": -1}, "seed1=-1 is invalid: pass an integer 0..2\\*\\*64-1"),
    ({"scale": 8, "n_vertices": 0}, "n_vertices=0 is invalid"),
])
def test_graph500_roots_arguments(g8, kw, words):
    with pytest.raises(ValueError, match=words):
        dbfs.graph500_roots(g8[0], **kw)
    assert dbfs.graph500_roots(g8[0], np.int64(8), n=np.int32(2)).shape == (2,)
