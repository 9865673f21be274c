"""Data safety of the store (issue 34, items 1 and 2).

1. ``dbfs datasets rm NAME`` removes only a dataset dbfs wrote: any other folder under the datasets root
   (``--datasets .`` or ``DBFS_DATASETS=$HOME``), a file or a symbolic link is refused in one line (exit 2)
   and left exactly as it was; links are never followed.
2. Every array dbfs writes (``edges``, ``original_ids``, CSR ``indptr``/``indices``, ``perm``) records a
   position-keyed digest per stored chunk, so a reorder, swap or edit made through zarr (every chunk's
   CRC fresh and valid, even the order-free sums updated) is caught by ``dbfs datasets verify`` (exit 1,
   naming the array and the chunk) and by the load before any search (the one-line error).
"""
import json
import os
import shutil

import numpy as np
import pytest
import zarr

from dbfs import store
from dbfs.checksum import combine, partial_checksum
from _cli_helpers import one_line_error, run
from dbfs.cli import cli

DIGESTS = "dbfs_digests"  # the array attribute holding the chunk digests (dbfs.store.integrity.DIGESTS)

NAME = "kron-s10-ef16-s2-3"
CHUNK = 4096  # edge rows per chunk: 4 chunks at SCALE 10


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A SCALE 10 dataset with CSR p1-block and the relabelled p1-block-deg, copied per test."""
    root = tmp_path_factory.mktemp("template")
    assert run("-q", "generate", "--datasets", root, "--scale", 10, "--chunk-edges", CHUNK,
               "--scheduler", "threads").exit_code == 0
    for extra in ([], ["--relabel", "degree"]):
        assert run("-q", "build", NAME, "--datasets", root, "--scheduler", "threads", *extra).exit_code == 0
    return root


@pytest.fixture
def root(template, tmp_path):
    dst = tmp_path / "ds"
    shutil.copytree(template, dst, symlinks=True)
    return dst


def tree(path):
    """Every file under ``path`` (links not followed) with its bytes: to prove nothing changed."""
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for f in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, path)] = os.readlink(p) if os.path.islink(p) else open(p, "rb").read()
    return out


# ---- 1. datasets rm removes only what dbfs wrote --------------------------------------------------------
def user_folder(root, name="Documents"):
    d = root / name
    (d / "taxes").mkdir(parents=True)
    (d / "letter.txt").write_text("dear user\n")
    (d / "taxes" / "2025.csv").write_text("a,b\n1,2\n")
    return d


@pytest.mark.parametrize("kind", ["folder", "zarr-group", "file"])
def test_rm_refuses_what_is_not_a_dataset(tmp_path, kind):
    root = tmp_path / "home"
    root.mkdir()
    if kind == "folder":
        path = user_folder(root)
    elif kind == "zarr-group":                       # someone else's zarr data: a group without dbfs's attributes
        path = root / "Documents"
        zarr.open_group(str(path), mode="w").create_array("edges", shape=(4, 2), dtype="i8")[:] = 1
    else:
        path = root / "Documents"
        path.write_text("notes\n")
    before = tree(root)
    one_line_error(run("datasets", "rm", "Documents", "--datasets", root), f"{path} is not a dbfs dataset",
                   "nothing was removed")
    assert tree(root) == before and not [p for p in os.listdir(root) if p.startswith(".")]


def test_rm_refuses_a_users_folder_under_the_env_root(tmp_path, monkeypatch):
    """``DBFS_DATASETS=$HOME`` then ``dbfs datasets rm Documents``: refused, the folder intact."""
    home = tmp_path / "home"
    home.mkdir()
    docs = user_folder(home)
    before = tree(home)
    monkeypatch.setenv("DBFS_DATASETS", str(home))
    one_line_error(run("datasets", "rm", "Documents"), "not a dbfs dataset")
    monkeypatch.chdir(home)                            # `--datasets .`
    one_line_error(run("datasets", "rm", "Documents", "--datasets", "."), "not a dbfs dataset")
    assert tree(home) == before and (docs / "letter.txt").read_text() == "dear user\n"


@pytest.mark.parametrize("target", ["folder", "dataset"])
def test_rm_refuses_a_symlink_and_leaves_link_and_target(root, tmp_path, target):
    """A link to a folder, even to a real dataset elsewhere, is refused: the link and its target stay as they
    were and no hidden ``.link.rm-...`` is left behind."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = user_folder(elsewhere) if target == "folder" else shutil.move(str(root / NAME), elsewhere / NAME)
    (root / "link").symlink_to(dest, target_is_directory=True)
    before_root, before_dest = tree(root), tree(dest)
    one_line_error(run("datasets", "rm", "link", "--datasets", root), "is a symbolic link", "nothing was removed")
    assert (root / "link").is_symlink() and os.readlink(root / "link") == str(dest)
    assert tree(root) == before_root and tree(dest) == before_dest
    assert not [p for p in os.listdir(root) if p.startswith(".") and "rm-" in p]


def test_rm_removes_a_dataset_complete_incomplete_or_damaged(root):
    assert run("datasets", "rm", NAME, "--datasets", root).exit_code == 0
    assert not (root / NAME).exists() and not [p for p in os.listdir(root) if "rm-" in p]
    assert run("-q", "generate", "--datasets", root, "--scale", 8, "--scheduler", "threads").exit_code == 0
    name8 = "kron-s8-ef16-s2-3"
    meta = root / name8 / "zarr.json"
    doc = json.loads(meta.read_text())
    del doc["attributes"]["complete"]                 # interrupted: no complete marker
    meta.write_text(json.dumps(doc))
    assert store.status(root / name8)[0] == "incomplete"
    res = run("datasets", "rm", name8, "--datasets", root)
    assert res.exit_code == 0 and not (root / name8).exists(), res.stderr
    assert run("-q", "generate", "--datasets", root, "--scale", 8, "--scheduler", "threads").exit_code == 0
    meta.write_text("{not json")                      # its marker damaged: still dbfs's layout
    res = run("datasets", "rm", name8, "--datasets", root)
    assert res.exit_code == 0 and not (root / name8).exists(), res.stderr


def test_generate_never_replaces_a_users_folder_of_a_datasets_name(tmp_path):
    """A folder that happens to carry a dataset's name but is not a dataset is refused, not rebuilt over."""
    mine = tmp_path / "kron-s6-ef16-s2-3"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    res = run("generate", "--scale", 6, "--datasets", tmp_path, "--scheduler", "threads")
    one_line_error(res, "is not a dbfs dataset", "another --datasets root")
    assert (mine / "thesis.txt").read_text() == "years of work" and sorted(os.listdir(mine)) == ["thesis.txt"]


def test_listing_shows_datasets_only(root):
    user_folder(root)
    names = [r["name"] for r in json.loads(run("datasets", "list", "--json", "--datasets", root).stdout)]
    assert names == [NAME]


# ---- 2. order-sensitive digests: caught by verify and before a run -----------------------------------------
def swap(path, i, j):
    """Swap entries i and j of a stored array through zarr: its chunks get fresh, valid CRCs."""
    z = zarr.open_array(str(path), mode="r+")
    a, b = z[i], z[j]
    assert np.any(a != b)
    z[i], z[j] = b, a


def verify(root):
    res = run("datasets", "verify", NAME, "--datasets", root)
    bad = [l for l in res.stdout.splitlines() if l.startswith("corrupt:")]
    return res, bad


def test_swapped_csr_indices_fail_verify_and_the_run(root):
    part = root / NAME / "csr" / "p1-block" / "part-0000"
    indptr = zarr.open_array(str(part / "indptr"), mode="r")[:]
    i, j = int(indptr[2]), int(indptr[700])          # entries of two different rows: a different graph
    assert j < zarr.open_array(str(part / "indices"), mode="r").chunks[0]
    fresh = root.parent / "fresh"
    shutil.copytree(root, fresh)
    for r in (root, fresh):
        swap(r / NAME / "csr" / "p1-block" / "part-0000" / "indices", i, j)
    res, bad = verify(root)
    assert res.exit_code == 1 and len(bad) == 1, res.stdout + res.stderr
    assert "csr/p1-block/part-0000/indices chunk 0 (entries" in bad[0] and "digest" in bad[0]
    res = run("run", NAME, "--datasets", fresh, "--backend", "cpu", "--roots", 8)   # never verified: the load
    one_line_error(res, "CSR variant p1-block", "part-0000/indices chunk 0", "digest",
                   f"dbfs build {NAME} --partitions 1")
    assert "search 1/8" not in res.stderr and "TEPS" not in res.stdout
    info = json.loads(run("datasets", "info", NAME, "--datasets", fresh).stdout)
    assert "csr:p1-block(corrupt)" in info["stages"]


def test_shuffled_edges_chunk_with_its_checksum_updated_fails_verify(root):
    path = root / NAME
    z = zarr.open_array(str(path / "edges"), mode="r+")
    rows = z[CHUNK:2 * CHUNK]
    z[CHUNK:2 * CHUNK] = rows[np.random.default_rng(7).permutation(CHUNK)]
    g = zarr.open_group(str(path), mode="r+")
    g.attrs["edges_checksum"] = combine([partial_checksum(z[:], 0)])   # the sum-type checksum made to match
    res, bad = verify(root)
    assert res.exit_code == 1 and len(bad) == 1, res.stdout + res.stderr
    assert f"edges chunk 1 (rows {CHUNK}..{2 * CHUNK - 1})" in bad[0] and "digest" in bad[0]
    one_line_error(run("export", NAME, "--datasets", root, "--out", root.parent / "x.npy"), "edges chunk 1",
                   "digest")


@pytest.mark.parametrize("array", ["part-0000/indptr", "perm"])
def test_every_csr_array_is_digested(root, array):
    """``indptr`` (two rows' ends swapped) and ``perm`` of a relabelled variant (two ids swapped)."""
    swap(root / NAME / "csr" / "p1-block-deg" / array, 3, 9)
    res, bad = verify(root)
    assert res.exit_code == 1 and len(bad) == 1, res.stdout + res.stderr
    assert f"csr/p1-block-deg/{array} chunk 0" in bad[0] and "digest" in bad[0]


def test_original_ids_are_digested(tmp_path):
    src = tmp_path / "sparse.txt"
    src.write_text("".join(f"{10 * k} {10 * k + 1000}\n" for k in range(50)))
    res = run("generate", "--datasets", tmp_path / "ds", "--kind", "import", "--input", src, "--compact-ids",
              "--scheduler", "threads")
    assert res.exit_code == 0, res.stderr
    name = res.stdout.strip()
    swap(tmp_path / "ds" / name / "original_ids", 1, 2)
    res = run("datasets", "verify", name, "--datasets", tmp_path / "ds")
    bad = [l for l in res.stdout.splitlines() if l.startswith("corrupt:")]
    assert res.exit_code == 1 and len(bad) == 1 and "original_ids chunk 0" in bad[0], res.stdout


def test_verify_names_every_array_it_checked_against_digests(root):
    from dbfs.store.integrity import read_digests

    res, bad = verify(root)
    assert res.exit_code == 0 and not bad
    assert "position-keyed chunk digests match (6 arrays)" in res.stdout     # edges, 2 x (indptr, indices), perm
    for arr in ("edges", "csr/p1-block/part-0000/indices", "csr/p1-block-deg/perm"):
        z = zarr.open_array(str(root / NAME / arr), mode="r")
        assert read_digests(z).shape == (z.nchunks,)


def test_a_store_without_digests_reads_and_verifies_as_before(root):
    """Written before digests: no ``dbfs_digests`` attribute anywhere. verify passes and says so; a run works."""
    for meta in (root / NAME).rglob("zarr.json"):
        doc = json.loads(meta.read_text())
        if doc.get("node_type") == "array":
            doc.get("attributes", {}).pop(DIGESTS, None)
            meta.write_text(json.dumps(doc))
    res, bad = verify(root)
    assert res.exit_code == 0 and not bad and "no digests for edges" in res.stdout, res.stdout
    res = run("run", NAME, "--datasets", root, "--backend", "cpu", "--roots", 2)
    assert res.exit_code == 0, res.stderr


# ---- digests are per stored chunk: the cut of the writes never changes them -----------------------------
def test_digests_do_not_depend_on_how_the_writes_were_cut(tmp_path):
    from dbfs.checksum import chunk_digests
    from dbfs.store.integrity import read_digests, seal_digests, write_rows

    rng = np.random.default_rng(3)
    for shape, dtype in (((10_000, 2), np.uint32), ((10_000,), np.int64)):
        data = rng.integers(0, 1 << 20, shape).astype(dtype)
        want = chunk_digests(data, 0, 1000)
        if data.ndim == 2:
            assert int(want.sum(dtype=np.uint64)) == partial_checksum(data, 0)
        for cuts in ([0, 10_000], [0, 1000, 3000, 10_000], [0, 1, 999, 1500, 4321, 9999, 10_000]):
            path = tmp_path / f"a{len(cuts)}-{data.ndim}"
            z = zarr.create_array(str(path), shape=shape, chunks=(1000,) + shape[1:], dtype=dtype)
            for a, b in zip(cuts[:-1], cuts[1:]):
                write_rows(z, path, a, data[a:b])
            assert seal_digests(path) == 0                     # every chunk covered by the records
            np.testing.assert_array_equal(read_digests(zarr.open_array(str(path), mode="r")), want)
            assert not (tmp_path / f".{path.name}.digests").exists()


def test_same_dataset_same_digests_whatever_the_generation_tasks(tmp_path, monkeypatch):
    """Generated twice with the same chunking, once with the write tasks cut at other rows: same digests."""
    from dbfs.store import write as store_write
    from dbfs.store.integrity import read_digests

    assert run("-q", "generate", "--datasets", tmp_path / "a", "--scale", 10, "--chunk-edges", CHUNK,
               "--scheduler", "threads").exit_code == 0
    real = store_write._write_block

    def in_odd_pieces(path, block, start):             # each task's rows written in uneven pieces
        cuts = [0, 1, 777, len(block)] if len(block) > 777 else [0, len(block)]
        return sum(real(path, block[a:b], start + a) for a, b in zip(cuts[:-1], cuts[1:])) % (1 << 64)

    monkeypatch.setattr(store_write, "_write_block", in_odd_pieces)
    assert run("-q", "generate", "--datasets", tmp_path / "b", "--scale", 10, "--chunk-edges", CHUNK,
               "--scheduler", "threads").exit_code == 0
    a, b = (zarr.open_array(str(tmp_path / d / NAME / "edges"), mode="r") for d in "ab")
    np.testing.assert_array_equal(read_digests(a), read_digests(b))
    assert a.attrs[DIGESTS]["chunk"] == CHUNK
