"""`dbfs run` / `dbfs bfs` without `--relabel` search the backend's default CSR variant.

What is checked: `--relabel auto` (the default) resolves per backend in one
place (dbfs.backends.resolve_relabel): the plain CSR for `--backend cpu`
and `--backend dask` on CPU workers, the degree-relabelled one for
`--backend gpu` (its choice tested as a function, no GPU needed) and for
dask GPU workers at P = 1 (a real LocalCluster whose worker declares the
GPU resource; nothing runs on it), the plain one for them at P > 1; each
choice is the one `benchmarks/relabel_rule.py` computes from the committed
records (Kernel 1 + 64 searches); `--placement degree*` takes the degree
order; `--relabel none` opts out; the choice is one line
on stderr and in the JSON's `config` (and README's command, with no
`--backend`, says so where a GPU and CuPy are visible); parents of a relabelled default
search validate against the input edges in the user's ids; `dbfs bfs NAME`
searches the variant NAME has stored when the default one is not, and
`dbfs build` still builds the plain variant by default.
"""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

from dbfs.backends import RunConfig, get_backend, resolve_relabel
from dbfs.cli.search import _gpu_visible, gpu_hint
from dbfs.store import open_dataset

_RULE = importlib.util.spec_from_file_location(
    "relabel_rule", Path(__file__).resolve().parent.parent / "benchmarks" / "relabel_rule.py")
relabel_rule = importlib.util.module_from_spec(_RULE)
_RULE.loader.exec_module(relabel_rule)


def _config(path):
    return json.loads(path.read_text())["config"]


def test_cpu_default_is_plain_and_said(tmp_path, dbfs_cli):
    js = tmp_path / "r.json"
    res = dbfs_cli("run", "--scale", 10, "--roots", 2, "--datasets", tmp_path, "--scheduler", "threads",
                   "--json", js)
    said = [ln for ln in res.stderr.splitlines() if "CSR variant" in ln and "default for --backend cpu" in ln]
    assert len(said) == 1 and "p1-block" in said[0] and "--relabel none|degree" in said[0], res.stderr
    c = _config(js)
    assert (c["variant"], c["relabel"], c["relabel_default"]) == ("p1-block", "none", True)
    assert ("--backend gpu runs this on the GPU" in res.stderr) == _gpu_visible(), res.stderr   # README's command


def test_gpu_hint_only_without_backend_and_with_a_gpu():
    assert "--backend gpu" in gpu_hint(set(), True)
    assert gpu_hint({"backend"}, True) is None and gpu_hint(set(), False) is None


def test_degree_ordered_dask_search_is_valid_in_original_ids(tmp_path, dbfs_cli):
    js, out = tmp_path / "r.json", tmp_path / "p.npy"
    common = ("--scale", 10, "--datasets", tmp_path, "--backend", "dask", "--workers", 1)
    res = dbfs_cli("run", *common, "--roots", 4, "--relabel", "degree", "--json", js)
    c = _config(js)
    assert (c["variant"], c["relabel"], c["relabel_default"]) == ("p1-block-deg", "degree", False)
    rec = json.loads(js.read_text())
    assert rec["validated"] and all(s["valid"] for s in rec["searches"])     # against the input edges
    # one search's parents, in the user's ids: the key is its own parent and the tree validates
    root = rec["searches"][0]["root"]
    name = rec["dataset"]
    res = dbfs_cli("bfs", name, "--root", root, "--datasets", tmp_path, "--backend", "dask", "--workers", 1,
                   "--out", out)      # the default (plain) is not stored; the stored degree-ordered one is searched
    assert "CSR variant p1-block-deg" in res.stderr, res.stderr
    parent = np.load(out)
    assert parent[root] == root and (parent >= 0).sum() > 1
    res = dbfs_cli("validate", name, "--root", root, "--parent", out, "--datasets", tmp_path)
    assert res.exit_code == 0, res.output


def test_relabel_none_opts_out(tmp_path, dbfs_cli):
    js = tmp_path / "r.json"
    res = dbfs_cli("run", "--scale", 10, "--roots", 2, "--datasets", tmp_path, "--backend", "dask", "--workers", 1,
                   "--relabel", "none", "--json", js)
    assert "default for --backend" not in res.stderr
    c = _config(js)
    assert (c["variant"], c["relabel"], c["relabel_default"]) == ("p1-block", "none", False)
    assert c["relabel_why"] == "--relabel none given"


def test_gpu_and_placement_resolution_without_a_gpu():
    gpu = resolve_relabel(RunConfig(backend="gpu", relabel="auto", quiet=True))
    assert gpu.relabel == "degree" and gpu.relabel_why.startswith("default for --backend gpu")
    assert resolve_relabel(RunConfig(backend="gpu", relabel="none", quiet=True)).relabel == "none"  # never changed
    placed = resolve_relabel(RunConfig(backend="cpu", relabel="auto", placement="degree-low", quiet=True))
    assert placed.relabel == "degree" and "--placement degree-low" in placed.relabel_why
    get_backend("cpu").check(RunConfig(relabel="auto", placement="degree-low", device_memory_limit=1 << 20))


def test_placement_degree_takes_auto_refuses_none(tmp_path, dbfs_cli):
    res = dbfs_cli("run", "--scale", 8, "--roots", 2, "--datasets", tmp_path, "--scheduler", "threads",
                   "--device-memory-limit", "1MiB", "--placement", "degree-low")
    assert "CSR variant p1-block-deg, degree-relabelled: --placement degree-low" in res.stderr, res.stderr
    res = dbfs_cli("run", "--scale", 8, "--datasets", tmp_path, "--backend", "cpu", "--device-memory-limit", "1MiB",
                   "--placement", "degree-low", "--relabel", "none", ok=False)
    assert res.exit_code == 2 and "--relabel degree" in res.stderr and "Traceback" not in res.output


def test_dask_gpu_workers_default_by_partitions():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                      resources={"GPU": 1}) as lc, Client(lc) as client:
        one = resolve_relabel(RunConfig(backend="dask", relabel="auto", quiet=True), client)
        two = resolve_relabel(RunConfig(backend="dask", relabel="auto", partitions=2, quiet=True), client)
        cyc = resolve_relabel(RunConfig(backend="dask", relabel="auto", partitions=2, partitioning="cyclic",
                                        quiet=True), client)
        lim = resolve_relabel(RunConfig(backend="dask", relabel="auto", partitions=2, device_memory_limit=1 << 30,
                                        quiet=True), client)
    assert one.relabel == "degree" and "GPU worker" in one.relabel_why
    assert two.relabel == "none" and "P > 1" in two.relabel_why
    assert cyc.relabel == "none" and "cyclic" in cyc.relabel_why
    assert lim.relabel == "none"


def test_bfs_name_searches_the_stored_variant_and_build_stays_plain(tmp_path, dbfs_cli):
    ds = ("--datasets", tmp_path)
    dbfs_cli("generate", "--scale", 10, *ds, "--scheduler", "threads")
    name = "kron-s10-ef16-s2-3"
    e = open_dataset(name, tmp_path).edges()[:]
    root = int(e[e[:, 0] != e[:, 1]][0, 0])
    dbfs_cli("build", name, "--relabel", "degree", *ds, "--scheduler", "threads")
    res = dbfs_cli("bfs", name, "--root", root, *ds, "--out", tmp_path / "p.npy")   # cpu default p1-block: not stored
    assert "CSR variant p1-block-deg" in res.stderr and "the variant stored (p1-block" in res.stderr, res.stderr
    assert dbfs_cli("validate", name, "--root", root, "--parent", tmp_path / "p.npy", *ds).exit_code == 0
    dbfs_cli("build", name, *ds, "--scheduler", "threads")                   # build's default: the plain variant
    assert (tmp_path / name / "csr" / "p1-block").is_dir()
    res = dbfs_cli("bfs", name, "--root", root, *ds)
    assert "CSR variant p1-block, not relabelled: default for --backend cpu" in res.stderr, res.stderr


def test_dask_cpu_workers_default_is_plain():
    one = resolve_relabel(RunConfig(backend="dask", relabel="auto", quiet=True))
    two = resolve_relabel(RunConfig(backend="dask", relabel="auto", partitions=2, quiet=True))
    assert one.relabel == two.relabel == "none" and "Kernel 1" in one.relabel_why


def test_every_default_is_the_one_the_records_measured_shorter(capsys):
    """Each place in benchmarks/relabel_rule.py resolves to the variant its committed record found shorter
    (Kernel 1 + 64 searches); a place where the two rules would disagree fails here."""
    rows = relabel_rule.choices()
    assert {r["takes"] for r in rows} == {"none", "degree"}          # the records hold both outcomes
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                      resources={"GPU": 1}) as lc, Client(lc) as gpu_client:
        for r in rows:
            backend, gpu_workers, P = r["key"]
            cfg = RunConfig(backend=backend, relabel="auto", partitions=P, quiet=True)
            got = resolve_relabel(cfg, gpu_client if gpu_workers else None).relabel
            assert got == r["takes"], (r["where"], r["record"], got)
    assert relabel_rule.main() == 0                                  # README's command: a line a place
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 + len(rows) and all(r["record"] in ln for r, ln in zip(rows, out[1:]))


@pytest.mark.parametrize("backend", ["cpu", "gpu", "dask"])
def test_every_backend_states_a_choice(backend):
    relabel, why = get_backend(backend).default_relabel(RunConfig(backend=backend))
    assert relabel in ("none", "degree") and why
