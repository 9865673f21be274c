"""Graph kinds other than Kronecker: uniform G(n, M), grid lattices, imported files.

Each kind is checked for counts, degrees, determinism (same bytes for any
split of the edge range and any thread count) and a small hand-written golden.
"""
import hashlib
import os

import numba
import numpy as np
import pytest

from dbfs.errors import DbfsError
from dbfs.generate.grid import grid_counts, grid_dims, grid_edges
from dbfs.generate.importer import file_digest, read_edges
from dbfs.generate.uniform import uniform_counts, uniform_edges

# --------------------------------------------------------------------------
# helpers


def _splits(m, rng, n_cuts):
    cuts = np.sort(rng.integers(0, m + 1, size=n_cuts))
    return [0, *cuts.tolist(), m]


def _check_splits(gen, m, seed=0):
    """Any split of [0, m) into ranges concatenates to the whole array."""
    whole = gen(0, None)
    assert whole.shape == (m, 2) and whole.dtype == np.int64
    rng = np.random.default_rng(seed)
    for n_cuts in (1, 3, 17):
        b = _splits(m, rng, n_cuts)
        parts = [gen(lo, hi) for lo, hi in zip(b[:-1], b[1:])]
        assert all(p.shape == (hi - lo, 2) for p, lo, hi in zip(parts, b[:-1], b[1:]))
        np.testing.assert_array_equal(np.concatenate(parts), whole)
    return whole


def _with_threads(n, fn):
    old = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        return fn()
    finally:
        numba.set_num_threads(old)


def _degrees(edges, n):
    return np.bincount(edges.ravel(), minlength=n)


# --------------------------------------------------------------------------
# uniform: a pure-Python splitmix64 written from the module docstring, kept
# independent of dbfs.generate.uniform so the two check each other

_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def _ref_mix(z):
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _ref_uniform_edge(scale, seed1, seed2, ei):
    key = _ref_mix(_ref_mix(seed1 ^ 0x5DEECE66D2B7E151) ^ seed2)
    mask = (1 << scale) - 1
    u = _ref_mix(key + (2 * ei + 1) * _GAMMA) & mask
    v = _ref_mix(key + (2 * ei + 2) * _GAMMA) & mask
    return [u, v]


def test_uniform_golden_first_edges():
    expected = [[13, 2], [1, 13], [3, 4], [11, 3]]
    assert [_ref_uniform_edge(4, 2, 3, i) for i in range(4)] == expected
    assert uniform_edges(4, 2, seed1=2, seed2=3)[:4].tolist() == expected


@pytest.mark.parametrize(
    "scale, edgefactor, seed1, seed2, start",
    [
        (20, 16, 2, 3, 0),
        (10, 16, 0, 0, 100),
        (30, 64, (1 << 64) - 1, 12345, 1 << 33),
        (62, 1, 7, (1 << 63) + 5, 10**15),
    ],
)
def test_uniform_matches_python_reference(scale, edgefactor, seed1, seed2, start):
    got = uniform_edges(scale, edgefactor, seed1, seed2, start=start, stop=start + 50)
    assert got.tolist() == [_ref_uniform_edge(scale, seed1, seed2, start + i) for i in range(50)]


def test_uniform_counts():
    assert uniform_counts(10, 16) == (1024, 16384)
    assert uniform_counts(1, 1) == (2, 2)
    assert uniform_counts(20) == (1 << 20, 16 << 20)
    assert uniform_edges(8, 3).shape == (768, 2)


def test_uniform_degrees_and_range():
    n, m = uniform_counts(14, 16)
    e = uniform_edges(14, 16)
    assert e.min() >= 0 and e.max() < n
    deg = _degrees(e, n)
    assert deg.sum() == 2 * m and deg.mean() == 2 * 16
    # every 1/16 of the id range holds 1/16 of the endpoints, within 10%,
    # for u, for v and for both together
    for col in (e[:, 0], e[:, 1], e.ravel()):
        buckets = np.bincount(col >> (14 - 4), minlength=16)
        expect = col.size / 16
        assert np.all(np.abs(buckets - expect) < 0.1 * expect), buckets
    # low bits too (the mask keeps them): even vs odd ids balanced
    assert abs(np.count_nonzero(e & 1) / e.size - 0.5) < 0.01
    # self-loops and duplicates are kept, at about their expected rates
    assert 0 < np.count_nonzero(e[:, 0] == e[:, 1]) < 4 * m / n


def test_uniform_determinism():
    a = uniform_edges(12, 8, 5, 6)
    assert a.tobytes() == uniform_edges(12, 8, 5, 6).tobytes()
    assert not np.array_equal(a, uniform_edges(12, 8, 6, 6))
    assert not np.array_equal(a, uniform_edges(12, 8, 5, 7))
    assert not np.array_equal(uniform_edges(12, 8, 0, 1), uniform_edges(12, 8, 1, 0))
    # a smaller edgefactor is a prefix: edge ei does not depend on M
    np.testing.assert_array_equal(uniform_edges(12, 4, 5, 6), a[: 4 << 12])
    _, m = uniform_counts(12, 8)
    _check_splits(lambda lo, hi: uniform_edges(12, 8, 5, 6, start=lo, stop=hi), m)
    one = _with_threads(1, lambda: uniform_edges(12, 8, 5, 6))
    two = _with_threads(2, lambda: uniform_edges(12, 8, 5, 6))
    assert one.tobytes() == two.tobytes() == a.tobytes()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(scale=0), "scale"),
        (dict(scale=63), "scale"),
        (dict(scale=2.5), "scale"),
        (dict(scale=10, edgefactor=0), "edgefactor"),
        (dict(scale=60, edgefactor=16), "2\\*\\*63"),
        (dict(scale=10, seed1=-1), "seed1"),
        (dict(scale=10, seed2=1 << 64), "seed2"),
        (dict(scale=4, edgefactor=2, start=5, stop=4), "range"),
        (dict(scale=4, edgefactor=2, start=0, stop=33), "range"),
        (dict(scale=4, edgefactor=2, start=-1), "range"),
    ],
)
def test_uniform_bad_parameters(kwargs, match):
    with pytest.raises(DbfsError, match=match):
        uniform_edges(**kwargs)


# --------------------------------------------------------------------------
# grids


def _numpy_grid(dims):
    """Independent oracle: lattice edges by array slicing, x then y then z."""
    ids = np.arange(int(np.prod(dims))).reshape(dims)
    parts = []
    for axis in reversed(range(len(dims))):  # x is the last (fastest) axis
        lo = np.take(ids, np.arange(dims[axis] - 1), axis=axis)
        hi = np.take(ids, np.arange(1, dims[axis]), axis=axis)
        parts.append(np.column_stack([lo.ravel(), hi.ravel()]))
    return np.concatenate(parts).astype(np.int64)


def _degree_histogram(dims):
    """Exact degree histogram: per-axis neighbour counts, convolved over axes."""
    hist = np.array([1])
    for n in dims:
        axis = np.zeros(3, dtype=np.int64)  # vertices with 0, 1, 2 neighbours on this axis
        if n == 1:
            axis[0] = 1
        else:
            axis[1], axis[2] = 2, n - 2
        hist = np.convolve(hist, axis)
    return hist


def test_grid_dims():
    assert grid_dims("grid2d", 1) == (2, 1)
    assert grid_dims("grid2d", 2) == (2, 2)
    assert grid_dims("grid2d", 5) == (8, 4)
    assert grid_dims("grid2d", 20) == (1024, 1024)
    assert grid_dims("grid3d", 1) == (2, 1, 1)
    assert grid_dims("grid3d", 3) == (2, 2, 2)
    assert grid_dims("grid3d", 4) == (4, 2, 2)
    assert grid_dims("grid3d", 5) == (4, 4, 2)
    assert grid_dims("grid3d", 21) == (128, 128, 128)
    for kind in ("grid2d", "grid3d"):
        for scale in range(1, 40):
            assert int(np.prod(grid_dims(kind, scale))) == 1 << scale


def test_grid_golden_2d_scale2():
    # 2 x 2: 0 1 / 2 3; x edges then y edges
    assert grid_edges("grid2d", 2).tolist() == [[0, 1], [2, 3], [0, 2], [1, 3]]
    assert grid_counts("grid2d", 2) == (4, 4)


def test_grid_golden_2d_scale3():
    # 4 rows x 2 cols
    assert grid_edges("grid2d", 3).tolist() == [
        [0, 1], [2, 3], [4, 5], [6, 7],
        [0, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7],
    ]


def test_grid_golden_3d_scale3():
    # the cube 2 x 2 x 2: x edges, y edges, z edges
    assert grid_edges("grid3d", 3).tolist() == [
        [0, 1], [2, 3], [4, 5], [6, 7],
        [0, 2], [1, 3], [4, 6], [5, 7],
        [0, 4], [1, 5], [2, 6], [3, 7],
    ]
    assert grid_counts("grid3d", 3) == (8, 12)


def test_grid_degenerate_dimensions():
    assert grid_edges("grid2d", 1).tolist() == [[0, 1]]
    assert grid_edges("grid3d", 1).tolist() == [[0, 1]]
    assert grid_edges("grid3d", 2).tolist() == [[0, 1], [2, 3], [0, 2], [1, 3]]
    assert grid_counts("grid3d", 2) == (4, 4)


@pytest.mark.parametrize("kind", ["grid2d", "grid3d"])
@pytest.mark.parametrize("scale", [1, 2, 3, 4, 5, 7, 10, 13])
def test_grid_matches_numpy_oracle(kind, scale):
    dims = grid_dims(kind, scale)
    n, m = grid_counts(kind, scale)
    expected = _numpy_grid(dims)
    assert (n, m) == (1 << scale, expected.shape[0])
    np.testing.assert_array_equal(grid_edges(kind, scale), expected)


@pytest.mark.parametrize("kind", ["grid2d", "grid3d"])
@pytest.mark.parametrize("scale", [1, 4, 6, 9, 12])
def test_grid_degrees(kind, scale):
    dims = grid_dims(kind, scale)
    n, m = grid_counts(kind, scale)
    e = grid_edges(kind, scale)
    assert np.all(e[:, 0] < e[:, 1])
    assert np.unique(e, axis=0).shape[0] == m  # each lattice edge once
    # endpoints differ by one step along exactly one axis
    diff = np.abs(np.array(np.unravel_index(e[:, 1], dims)) - np.array(np.unravel_index(e[:, 0], dims)))
    assert np.all(diff.sum(axis=0) == 1)
    hist = np.bincount(_degrees(e, n))
    expected = _degree_histogram(dims)
    np.testing.assert_array_equal(np.trim_zeros(hist, "b"), np.trim_zeros(expected, "b"))


def test_grid_degree_histogram_by_hand():
    # 4 x 4 square: 4 corners of degree 2, 8 border vertices of 3, 4 inside of 4
    assert np.bincount(_degrees(grid_edges("grid2d", 4), 16)).tolist() == [0, 0, 4, 8, 4]
    # 4 x 4 x 4 cube: 8 corners (3), 24 edge (4), 24 face (5), 8 interior (6)
    assert np.bincount(_degrees(grid_edges("grid3d", 6), 64)).tolist() == [0, 0, 0, 8, 24, 24, 8]
    # large: interior degree 4 / 6 dominates
    deg2 = np.bincount(_degrees(grid_edges("grid2d", 12), 1 << 12))
    assert deg2.tolist() == [0, 0, 4, 4 * 62, 62 * 62]
    deg3 = np.bincount(_degrees(grid_edges("grid3d", 12), 1 << 12))
    assert deg3.tolist() == [0, 0, 0, 8, 12 * 14, 6 * 14 * 14, 14**3]


@pytest.mark.parametrize("kind", ["grid2d", "grid3d"])
def test_grid_determinism(kind):
    n, m = grid_counts(kind, 11)
    whole = _check_splits(lambda lo, hi: grid_edges(kind, 11, lo, hi), m, seed=1)
    assert whole.tobytes() == grid_edges(kind, 11).tobytes()
    one = _with_threads(1, lambda: grid_edges(kind, 11))
    assert one.tobytes() == whole.tobytes()


def test_grid_huge_range_without_materialising():
    # scale 40: ~5.5e12 edges; a range deep inside, checked against coordinates
    n, m = grid_counts("grid3d", 40)
    dims = grid_dims("grid3d", 40)
    start = m - 1000
    e = grid_edges("grid3d", 40, start, m)
    assert e.shape == (1000, 2)
    # the last block is z: (id, id + nx*ny) for the last 1000 lower endpoints
    plane = dims[1] * dims[2]
    np.testing.assert_array_equal(e[:, 1] - e[:, 0], plane)
    assert e[-1, 1] == n - 1


@pytest.mark.parametrize(
    "args, match",
    [
        (("grid4d", 4), "grid kind"),
        (("grid2d", 0), "scale"),
        (("grid3d", 63), "scale"),
        (("grid2d", 4, 0, 25), "range"),
        (("grid2d", 4, 3, 2), "range"),
    ],
)
def test_grid_bad_parameters(args, match):
    with pytest.raises(DbfsError, match=match):
        grid_edges(*args)


# --------------------------------------------------------------------------
# import


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_edgelist_golden(tmp_path):
    p = _write(
        tmp_path,
        "g.txt",
        "# a SNAP-style header\n"
        "% another comment\n"
        "\n"
        "0 1\n"
        "  1\t2   0.75\n"  # leading blanks, tab, a weight column
        "2 0 # trailing comment\r\n"
        "   \n"
        "5 5",  # self-loop, no final newline
    )
    edges, n = read_edges(p)
    assert edges.dtype == np.int64
    assert edges.tolist() == [[0, 1], [1, 2], [2, 0], [5, 5]]
    assert n == 6
    assert read_edges(str(p), fmt="edgelist")[0].tolist() == edges.tolist()


def test_mtx_golden_general(tmp_path):
    p = _write(
        tmp_path,
        "g.mtx",
        "%%MatrixMarket matrix coordinate real general\n"
        "% comment\n"
        "%\n"
        "3 5 4\n"
        "1 1 1.5\n"
        "1 5 -2e3\n"
        "3 2 0\n"
        "2 4 7\n",
    )
    edges, n = read_edges(p)
    assert edges.tolist() == [[0, 0], [0, 4], [2, 1], [1, 3]]
    assert n == 5  # max(rows, cols)


def test_mtx_golden_symmetric_pattern(tmp_path):
    # only the stored (lower) triangle becomes edges; isolated vertex 4 counts
    p = _write(
        tmp_path,
        "s.mtx",
        "%%MatrixMarket matrix coordinate pattern symmetric\n4 4 3\n2 1\n3 1\n3 3\n",
    )
    edges, n = read_edges(p)
    assert edges.tolist() == [[1, 0], [2, 0], [2, 2]]
    assert n == 4


def test_mtx_detected_by_header(tmp_path):
    p = _write(tmp_path, "graph.dat", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 9\n")
    assert read_edges(p)[0].tolist() == [[0, 1]]
    # forced edge list: the banner is a comment and '2 2 1' is an edge
    assert read_edges(p, fmt="edgelist")[0].tolist() == [[2, 2], [1, 2]]


def test_import_chunking_and_threads(tmp_path, monkeypatch):
    """Same rows for any chunk size and thread count, checked against numpy."""
    rng = np.random.default_rng(3)
    e = rng.integers(0, 10**12, size=(20000, 2))
    lines = [f"{u} {v} {w}" for (u, v), w in zip(e.tolist(), rng.integers(0, 9, 20000).tolist())]
    for i in rng.integers(0, len(lines), 300).tolist():  # sprinkle comments and blanks
        lines[i] = lines[i] + "\n# c\n\n"
    p = _write(tmp_path, "big.txt", "\n".join(lines) + "\n")
    from dbfs.generate import importer

    default = read_edges(p)[0]
    np.testing.assert_array_equal(default, e)
    for chunk in (7, 1000, 65536):
        monkeypatch.setattr(importer, "CHUNK_BYTES", chunk)
        for threads in (1, 2):
            got = _with_threads(threads, lambda: read_edges(p)[0])
            assert got.tobytes() == default.tobytes()


def test_import_error_line_number_in_later_chunk(tmp_path, monkeypatch):
    from dbfs.generate import importer

    lines = [f"{i} {i + 1}" for i in range(5000)]
    lines[3999] = "7 x"
    lines[4499] = "8"
    p = _write(tmp_path, "bad.txt", "\n".join(lines))
    monkeypatch.setattr(importer, "CHUNK_BYTES", 100)
    with pytest.raises(DbfsError, match=r"line 4000 has a vertex id that is not an integer"):
        read_edges(p)


def test_file_digest(tmp_path):
    p = _write(tmp_path, "g.txt", "0 1\n")
    assert file_digest(p) == hashlib.sha256(b"0 1\n").hexdigest()[:8]
    assert file_digest(p, 64) == hashlib.sha256(b"0 1\n").hexdigest()
    with pytest.raises(DbfsError, match="no such file"):
        file_digest(tmp_path / "nope.txt")


_MM = "%%MatrixMarket matrix coordinate real general\n"


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("cols.txt", "0 1\n1\n", r"line 2 has fewer than 2 columns"),
        ("cols2.txt", "0 1\n\n# c\n3 # 4\n", r"line 4 has fewer than 2 columns"),
        ("float.txt", "0 1\n1 2.5\n", r"line 2 has a vertex id that is not an integer"),
        ("word.txt", "# c\nfrom to\n", r"line 2 has a vertex id that is not an integer"),
        ("neg.txt", "0 1\n2 3\n-1 2\n", r"line 3 has a negative vertex id"),
        ("long.txt", "9223372036854775808 0\n", r"line 1 has a vertex id above 9,223,372,036,854,775,807 \(2\*\*63 - 1"),
        ("empty.txt", "", r"file is empty"),
        ("comments.txt", "# only\n% comments\n\n", r"no edges found"),
        ("array.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", r"unsupported Matrix Market header"),
        ("cplx.mtx", "%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1 0\n", r"unsupported .*complex"),
        ("herm.mtx", "%%MatrixMarket matrix coordinate real hermitian\n2 2 1\n1 2 1\n", r"unsupported"),
        ("few.mtx", _MM + "3 3 3\n1 2 1\n2 3 1\n", r"promises 3 entries but the file holds 2"),
        ("many.mtx", _MM + "3 3 1\n1 2 1\n2 3 1\n", r"promises 1 entries but the file holds 2"),
        ("zero.mtx", _MM + "3 3 0\n", r"no entries"),
        ("nosize.mtx", _MM + "% just comments\n", r"no size line"),
        ("badsize.mtx", _MM + "3 3\n1 2\n", r"line 2: bad Matrix Market size line"),
        ("index0.mtx", _MM + "3 3 1\n0 2 1\n", r"outside the 3 x 3 matrix.*1-based"),
        ("outside.mtx", _MM + "3 3 1\n4 2 1\n", r"outside the 3 x 3 matrix"),
        ("negmtx.mtx", _MM + "% c\n3 3 2\n1 2\n-1 2\n", r"line 5 has a negative vertex id"),
        ("nobanner.mtx", "1 2\n", r"not a Matrix Market file"),
    ],
)
def test_import_errors(tmp_path, name, text, match):
    p = _write(tmp_path, name, text)
    with pytest.raises(DbfsError, match=match) as info:
        read_edges(p)
    msg = str(info.value)
    assert "\n" not in msg and str(p) in msg and ";" in msg  # one line: problem; fix


def test_import_missing_and_unreadable(tmp_path):
    with pytest.raises(DbfsError, match="no such file; check the path"):
        read_edges(tmp_path / "missing.txt")
    with pytest.raises(DbfsError, match="is a directory"):
        read_edges(tmp_path)
    f = _write(tmp_path, "f.txt", "0 1\n")
    with pytest.raises(DbfsError, match="cannot read"):
        read_edges(f / "child.txt")  # a path through a file: NotADirectoryError
    if os.geteuid() != 0:  # root reads anything
        f.chmod(0)
        with pytest.raises(DbfsError, match="cannot read"):
            read_edges(f)


def test_import_bad_format_argument(tmp_path):
    p = _write(tmp_path, "g.txt", "0 1\n")
    with pytest.raises(DbfsError, match="unknown graph file format 'csv'"):
        read_edges(p, fmt="csv")
