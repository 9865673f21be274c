"""Import of real graphs: whitespace edge lists and Matrix Market files.

``read_edges(path, fmt=None) -> (edges, n_vertices)``; ``edges`` is int64,
shape (M, 2), one row per stored edge in file order, 0-based ids.

- ``edgelist``: one ``u v`` per line, separated by spaces or tabs; further
  columns (weights, timestamps) are ignored; lines whose first non-blank
  character is ``#`` or ``%`` are comments; blank lines and CRLF endings are
  fine. Ids are 0-based, any integer 0..2**63 - 1 (int64; leading zeros
  allowed); ``n_vertices = max id + 1``.
- ``mtx``: Matrix Market ``%%MatrixMarket matrix coordinate
  <real|integer|pattern> <general|symmetric>``; ``%`` comment lines, then the
  size line ``rows cols entries``, then ``entries`` lines ``i j [value]``
  (1-based; converted to 0-based). ``n_vertices = max(rows, cols)``. Only the
  stored entries become edges (a symmetric file stores one triangle, which is
  the undirected graph); diagonal entries become self-loops.

``fmt=None`` detects: a ``.mtx`` extension or a file starting with
``%%MatrixMarket`` is Matrix Market, anything else an edge list.

Parsing is a Numba byte parser. The file is read as bytes with a newline
appended, so every line ends in one (the parser needs no bounds checks); the
bytes are cut into chunks at line ends; each chunk's newlines are counted in
parallel (room for one row per line); each chunk is parsed in parallel into
its own slice of the output; the gaps left by comment lines are closed in
chunk order. The result never depends on the chunk or thread count. Every
problem is a one-line :class:`DbfsError` naming the file, the line number
where there is one, and the fix.

``file_digest(path)`` is the sha256 of the file bytes, shortened (8 hex
characters by default) for dataset names.

Sparse ids: ``n_vertices`` comes from the largest id, so ids such as ``0 1``
and ``1 4294967296`` would make a graph of 2**32 + 1 vertices.
``check_ids(edges, n_vertices, path)`` refuses a graph whose ``n_vertices``
exceeds ``4 * distinct ids + 1024`` with a one-line error naming
``--compact-ids``; ``compact_ids(edges)`` relabels the distinct ids to
``0..n-1`` in ascending order of the original id (so the relabelling keeps
the order of ids) and returns the int64 ``original_ids`` with
``original_ids[new] = old``.
"""
from __future__ import annotations

import hashlib
import os

import numba
import numpy as np
from numba import njit, prange

from dbfs.errors import DbfsError

FORMATS = ("edgelist", "mtx")
MM_BANNER = b"%%MatrixMarket"
MM_FIELDS = ("real", "integer", "pattern")
MM_SYMMETRIES = ("general", "symmetric")
MAX_ID = (1 << 63) - 1  # ids are int64: any value up to this is read (leading zeros too), larger ones are refused

# parser error codes (_parse_range) -> message stem
E_OK, E_COLUMNS, E_NOT_INT, E_NEGATIVE, E_TOO_BIG = 0, 1, 2, 3, 4
_ERRORS = {
    E_COLUMNS: "has fewer than 2 columns; each data line needs 'u v'",
    E_NOT_INT: "has a vertex id that is not an integer; ids must be whole numbers",
    E_NEGATIVE: "has a negative vertex id; ids must be >= 0",
    E_TOO_BIG: f"has a vertex id above {MAX_ID:,} (2**63 - 1, the int64 limit); ids must be 0..{MAX_ID:,}",
}

_NL, _CR, _SP, _TAB = 10, 13, 32, 9
_HASH, _PCT, _MINUS, _PLUS, _ZERO = 35, 37, 45, 43, 48
CHUNK_BYTES = 1 << 22  # target chunk size; chunks are cut at line ends


@njit(inline="always", nogil=True, cache=True)
def _is_blank(c):
    return c == _SP or c == _TAB or c == _CR


@njit(nogil=True, cache=True)
def _chunk_bounds(buf, n_chunks):
    """n_chunks + 1 offsets; each inner one just after a newline (or at the end)."""
    n = buf.shape[0]
    bounds = np.empty(n_chunks + 1, dtype=np.int64)
    bounds[0] = 0
    for c in range(1, n_chunks):
        p = max(bounds[c - 1], (n * c) // n_chunks)
        while p < n and (p == 0 or buf[p - 1] != _NL):
            p += 1
        bounds[c] = p
    bounds[n_chunks] = n
    return bounds


@njit(parallel=True, nogil=True, cache=True)
def _count_newlines(buf, bounds, n_newlines):
    """Per chunk: newline characters (a tight loop LLVM vectorises)."""
    for c in prange(bounds.shape[0] - 1):
        nls = 0
        for i in range(bounds[c], bounds[c + 1]):
            nls += buf[i] == _NL
        n_newlines[c] = nls


@njit(inline="always", nogil=True, cache=True)
def _parse_id(buf, p):
    """Parse the id token at p (not blank, not newline): (new p, value, error).

    No bounds checks: every line, the last included, ends in a newline.
    """
    c = buf[p]
    neg = c == _MINUS
    if neg or c == _PLUS:
        p += 1
    first = p
    value = 0
    big = False
    d = np.int64(buf[p]) - _ZERO
    while 0 <= d <= 9:
        if big or value > (MAX_ID - d) // 10:  # value * 10 + d would pass int64: stop growing it
            big = True
        else:
            value = value * 10 + d
        p += 1
        d = np.int64(buf[p]) - _ZERO
    c = buf[p]
    err = E_OK
    if p == first or not (_is_blank(c) or c == _NL):
        err = E_NOT_INT
    elif big:
        err = E_TOO_BIG
    elif neg and value != 0:
        err = E_NEGATIVE
    return p, value, err


@njit(nogil=True, cache=True)
def _parse_range(buf, p, end, out, row, line):
    """Parse the lines of buf[p:end] into out[row:], line being p's line number.

    buf[end - 1] is a newline. Returns (rows written, error code, line of the
    error); stops at the first error.
    """
    row0 = row
    while p < end:
        c = buf[p]
        while _is_blank(c):
            p += 1
            c = buf[p]
        if not (c == _NL or c == _HASH or c == _PCT):
            p, u, err = _parse_id(buf, p)
            v = 0
            if err == E_OK:
                c = buf[p]
                while _is_blank(c):
                    p += 1
                    c = buf[p]
                if c == _NL or c == _HASH or c == _PCT:
                    err = E_COLUMNS
                else:
                    p, v, err = _parse_id(buf, p)
            if err != E_OK:
                return row - row0, err, line
            out[row, 0] = u
            out[row, 1] = v
            row += 1
        while buf[p] != _NL:  # rest of the line: extra columns, comment
            p += 1
        p += 1
        line += 1
    return row - row0, E_OK, 0


@njit(parallel=True, nogil=True, cache=True)
def _parse_chunks(buf, bounds, offsets, out, n_rows, err_code, err_line, first_line):
    """Parse chunk c into out[offsets[c]:], n_rows[c] rows (see _parse_range)."""
    for c in prange(bounds.shape[0] - 1):
        n_rows[c], err_code[c], err_line[c] = _parse_range(
            buf, bounds[c], bounds[c + 1], out, offsets[c], first_line[c]
        )


def _parse(buf: np.ndarray, path, first_line: int = 1) -> np.ndarray:
    """All data lines of buf (ending in a newline) as int64 (M, 2).

    Line numbers in errors count from first_line, the number of buf's first line.
    """
    if buf.shape[0] == 0:
        return np.empty((0, 2), dtype=np.int64)
    assert buf[-1] == _NL  # _read_bytes appends it; the parser relies on it
    n_chunks = int(max(1, min(buf.shape[0] // CHUNK_BYTES, 64 * numba.get_num_threads())))
    bounds = _chunk_bounds(buf, n_chunks)
    n_newlines = np.zeros(n_chunks, dtype=np.int64)
    _count_newlines(buf, bounds, n_newlines)
    # room for one row per line; chunk c starts at line first_line + offsets[c]
    offsets = np.zeros(n_chunks, dtype=np.int64)
    np.cumsum(n_newlines[:-1], out=offsets[1:])
    capacity = int(n_newlines.sum())
    out = np.empty((capacity, 2), dtype=np.int64)
    n_rows = np.zeros(n_chunks, dtype=np.int64)
    err_code = np.zeros(n_chunks, dtype=np.int64)
    err_line = np.zeros(n_chunks, dtype=np.int64)
    _parse_chunks(buf, bounds, offsets, out, n_rows, err_code, err_line, offsets + first_line)
    bad = np.flatnonzero(err_code)
    if bad.size:
        c = bad[0]
        raise DbfsError(f"{path}: line {int(err_line[c])} {_ERRORS[int(err_code[c])]}")
    # close the gaps left by comment and blank lines; rows only move down
    total = 0
    for c in range(n_chunks):
        k = int(n_rows[c])
        if total != offsets[c]:
            out[total : total + k] = out[offsets[c] : offsets[c] + k]
        total += k
    if total < capacity - capacity // 16:
        return out[:total].copy()
    return out[:total]


def _read_bytes(path) -> np.ndarray:
    """The file's bytes plus a final newline (a sentinel for the parser)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            buf = np.empty(size + 1, dtype=np.uint8)
            view = memoryview(buf)
            got = 0
            while got < size:
                k = f.readinto(view[got:size])
                if not k:
                    break
                got += k
    except FileNotFoundError:
        raise DbfsError(f"{path}: no such file; check the path") from None
    except IsADirectoryError:
        raise DbfsError(f"{path}: is a directory, not a graph file; give a file path") from None
    except OSError as e:
        raise DbfsError(
            f"{path}: cannot read ({e.strerror or e}); check the file's permissions"
        ) from None
    buf = buf[: got + 1]
    buf[got] = _NL
    return buf


def _detect(path, buf: np.ndarray) -> str:
    if str(path).lower().endswith(".mtx"):
        return "mtx"
    if buf[: len(MM_BANNER)].tobytes().lower() == MM_BANNER.lower():
        return "mtx"
    return "edgelist"


def _read_edgelist(path, buf: np.ndarray) -> tuple[np.ndarray, int]:
    edges = _parse(buf, path)
    if edges.shape[0] == 0:
        raise DbfsError(f"{path}: no edges found; the file needs at least one 'u v' line")
    return edges, int(edges.max()) + 1


def _next_line(buf: np.ndarray, p: int) -> int:
    """Offset just after the line starting at p."""
    nl = np.flatnonzero(buf[p : p + (1 << 16)] == _NL)
    if nl.size:
        return p + int(nl[0]) + 1
    rest = np.flatnonzero(buf[p:] == _NL)
    return p + int(rest[0]) + 1 if rest.size else buf.shape[0]


def _read_mtx(path, buf: np.ndarray) -> tuple[np.ndarray, int]:
    end = _next_line(buf, 0)
    header = buf[:end].tobytes().decode("ascii", "replace").split()
    if not header or header[0].lower() != MM_BANNER.decode().lower():
        raise DbfsError(
            f"{path}: not a Matrix Market file (no %%MatrixMarket header); "
            "use fmt='edgelist' for a plain edge list"
        )
    words = [w.lower() for w in header[1:]]
    if (
        len(words) != 4
        or words[0] != "matrix"
        or words[1] != "coordinate"
        or words[2] not in MM_FIELDS
        or words[3] not in MM_SYMMETRIES
    ):
        raise DbfsError(
            f"{path}: unsupported Matrix Market header {' '.join(header)!r}; dbfs reads "
            f"'matrix coordinate <{'|'.join(MM_FIELDS)}> <{'|'.join(MM_SYMMETRIES)}>' only"
        )
    # comments and blank lines up to the size line (a few lines: Python is fine)
    line = 1
    p = end
    size = None
    while p < buf.shape[0]:
        end = _next_line(buf, p)
        line += 1
        text = buf[p:end].tobytes().decode("ascii", "replace").strip()
        p = end
        if not text or text.startswith("%"):
            continue
        size = text.split()
        break
    if size is None:
        raise DbfsError(f"{path}: Matrix Market file has no size line; add 'rows cols entries'")
    try:
        if len(size) != 3:
            raise ValueError
        rows, cols, nnz = (int(s) for s in size)
        if min(rows, cols, nnz) < 0 or max(rows, cols, nnz) > MAX_ID:
            raise ValueError
    except ValueError:
        raise DbfsError(
            f"{path}: line {line}: bad Matrix Market size line {' '.join(size)!r}; "
            f"expected three integers 'rows cols entries', each 0..{MAX_ID:,} (int64)"
        ) from None
    edges = _parse(buf[p:], path, first_line=line + 1)
    if edges.shape[0] != nnz:
        raise DbfsError(
            f"{path}: the size line promises {nnz} entries but the file holds "
            f"{edges.shape[0]}; fix the size line or restore the missing entries"
        )
    if nnz == 0:
        raise DbfsError(f"{path}: Matrix Market file has no entries; the graph needs at least one edge")
    if edges.min() < 1 or edges[:, 0].max() > rows or edges[:, 1].max() > cols:
        bad = np.flatnonzero(
            (edges[:, 0] < 1) | (edges[:, 1] < 1) | (edges[:, 0] > rows) | (edges[:, 1] > cols)
        )[0]
        i, j = (int(x) for x in edges[bad])
        raise DbfsError(
            f"{path}: entry {bad + 1} ({i}, {j}) is outside the {rows} x {cols} matrix; "
            "Matrix Market indices are 1-based and must be within the size line"
        )
    edges -= 1
    return edges, max(rows, cols)


def read_edges(path, fmt: str | None = None) -> tuple[np.ndarray, int]:
    """Read a graph file: (edges int64 (M, 2), n_vertices). See module doc."""
    if fmt is not None and fmt not in FORMATS:
        raise DbfsError(f"unknown graph file format {fmt!r}; use one of {', '.join(FORMATS)} or None")
    path = os.fspath(path)
    buf = _read_bytes(path)
    if buf.shape[0] == 1:
        raise DbfsError(f"{path}: file is empty; give a file with at least one edge")
    fmt = fmt or _detect(path, buf)
    if fmt == "mtx":
        return _read_mtx(path, buf)
    return _read_edgelist(path, buf)


def file_digest(path, n_chars: int = 8) -> str:
    """The first n_chars hex characters of the sha256 of the file's bytes."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except FileNotFoundError:
        raise DbfsError(f"{path}: no such file; check the path") from None
    except OSError as e:
        raise DbfsError(
            f"{path}: cannot read ({e.strerror or e}); check the file's permissions"
        ) from None
    return digest[:n_chars]


#: an imported graph may have at most this many vertices per distinct id (plus SPARSE_SLACK)
SPARSE_FACTOR = 4
SPARSE_SLACK = 1024


def _distinct_ids(edges: np.ndarray, n_vertices: int) -> int:
    """How many distinct ids ``edges`` holds (a bitmap when ``n_vertices`` is small, else a sort)."""
    if n_vertices <= SPARSE_FACTOR * 2 * edges.shape[0] + SPARSE_SLACK:
        seen = np.zeros(n_vertices, dtype=np.bool_)
        seen[edges.ravel()] = True
        return int(np.count_nonzero(seen))
    return int(np.unique(edges).shape[0])


def check_ids(edges: np.ndarray, n_vertices: int, path) -> None:
    """Refuse an imported graph whose largest id is far above its number of distinct ids.

    Parameters
    ----------
    edges : numpy.ndarray
        int64 (M, 2), 0-based.
    n_vertices : int
        Largest id + 1 (edge lists) or the declared size (Matrix Market).
    path : str
        The file, for the message.

    Raises
    ------
    DbfsError
        When ``n_vertices > 4 * distinct + 1024``, naming ``--compact-ids``.
    """
    if n_vertices <= SPARSE_SLACK:
        return
    distinct = _distinct_ids(edges, n_vertices)
    if n_vertices > SPARSE_FACTOR * distinct + SPARSE_SLACK:
        raise DbfsError(f"{path}: the largest id makes {n_vertices:,} vertices but only {distinct:,} distinct ids "
                        f"occur: pass --compact-ids to relabel them 0..{distinct - 1} in ascending order of the "
                        f"original id (searches and --root then use the compacted ids; `dbfs export` writes the "
                        f"original ones)")


def compact_ids(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Relabel the ids of an edge list to 0..n-1 in ascending order of the original id.

    Parameters
    ----------
    edges : numpy.ndarray
        int64 (M, 2).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The relabelled edges (int64 (M, 2)) and ``original_ids`` (int64
        (n,), ascending): ``original_ids[new] = old``.
    """
    original, inverse = np.unique(edges, return_inverse=True)
    return inverse.reshape(edges.shape).astype(np.int64, copy=False), original.astype(np.int64, copy=False)
