"""Wire format of the worker-to-worker mesh: binary frames, checked before use.

Contract
--------
Bytes that arrive from the network are never unpickled: a message (a
*frame*) is a fixed binary header, one fixed-size descriptor per array and
the arrays' raw buffers, and a receiver decodes it only after checking it
against what the round expects. Anything else raises :class:`FrameError`,
and the caller closes that connection. A connection carries frames only
after :mod:`dbfs.bfs.dask.mesh.handshake` has shown that both ends hold the mesh's key.

Frame encoding (little-endian, :data:`HEADER` then :data:`DESCR` x n)::

    header      magic b"DBFS" | version u8 | kind u8 | reserved u16 (0)
                | round i64 | sender i32 | n_arrays u32 | payload bytes i64   (32 bytes)
    descriptor  dtype code u8 | 7 pad bytes | element count i64              (16 bytes)
    buffers     the n arrays' bytes, in order (1-D, C order)

dtype codes come from a fixed table (:data:`DTYPES`: int32, int64,
float64, uint8). ``round`` counts the mesh's message rounds from 0 (every worker
sends exactly one frame to every peer per round, so it must equal the
receiver's own count), ``sender`` is the mesh index of the sending worker
(it must be the peer at the other end of that connection). Each ``kind``
has a fixed layout (:data:`LAYOUTS`): the counts of a level travel as an
int64 ``[new frontier, its edges, edges examined]`` plus a float64
``[kernel seconds]``, rank lists as an int64 array. These small *head*
arrays (all arrays of START, BEGIN, COUNTS, SYNC and PULL; the rank list of PAIRS and
FRONT; counts and rank list of COUNTS_FRONT) are packed with struct and
decode to tuples of numbers; the other (*body*) arrays, pairs and bitmap
slices, decode to numpy arrays.

The *coded* kinds (BEGIN's flag 1 says a worker speaks them; the level loop
uses them when every worker of the mesh does) carry the same rounds as
uint8 streams of :mod:`dbfs.bfs.dask.mesh.codec`: PAIRS_Z a list of destination
ranks and one of pair counts, then one packed pair stream each; FRONT_Z
and COUNTS_FRONT_Z a rank list and one of slice forms (tags), then one
slice stream each. Their head lists must have one length k and be followed
by exactly k uint8 arrays; the legacy kinds admit no uint8 array.

A receiver refuses a count over ``Limits.max_elems`` (a level never sends
more than N + 64 elements in one array; a uint8 stream, 16 bytes each: a
stream holds at most N pairs of at most 128 bits), more than ``Limits.max_arrays``
arrays, a layout other than its kind's, or a payload size other than what
the descriptors add up to, before allocating any array (a small frame is
read into one buffer of its declared size, at most :data:`SMALL_MESSAGE`
bytes plus its descriptors). A checked
descriptor block is kept as a plan and reused for the next frame with the
same descriptors. Payloads up to :data:`SMALL_MESSAGE` bytes travel as one
joined buffer; larger body arrays are sent from and received into their
own memory (zero-copy).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

__all__ = ["FrameError", "Limits", "Expect", "FrameReader", "encode", "decode_parts", "read_frame", "HEADER",
           "DESCR", "DTYPES", "LAYOUTS", "START", "PAIRS", "COUNTS", "FRONT", "SYNC", "COUNTS_FRONT", "PULL",
           "BEGIN", "PAIRS_Z", "FRONT_Z", "COUNTS_FRONT_Z"]

MAGIC = b"DBFS"
VERSION = 1
HEADER = struct.Struct("<4sBBHqiIq")   # magic, version, kind, reserved, round, sender, n_arrays, payload bytes
DESCR = struct.Struct("<B7xq")         # dtype code, element count
SMALL_MESSAGE = 1 << 16                # payloads up to this many bytes travel (and are read) as one buffer

#: dtype code -> dtype (the only dtypes a frame may carry)
DTYPES = {1: np.dtype("<i4"), 2: np.dtype("<i8"), 3: np.dtype("<f8"), 4: np.dtype("u1")}
_CODE_OF = {dt: c for c, dt in DTYPES.items()}
_I32, _I64, _F64, _U8 = 1, 2, 3, 4
STREAM_BYTES_PER_ELEM = 16             # a uint8 stream may hold 16 bytes per element of Limits.max_elems

# message kinds, one per kind of round of the level loop (dbfs.bfs.dask.search.bsp)
START = 1         # [int64 (1,) the root's degree]                          start barrier
PAIRS = 2         # [int64 (k,) destination ranks] + k x (local ids, parents) top-down claims
COUNTS = 3        # [int64 (3,) counts, float64 (1,) kernel seconds]        end of a level
FRONT = 4         # [int64 (k,) sender's ranks] + k x int64 bitmap slices   top-down -> bottom-up
SYNC = 5          # []                                                      barrier
COUNTS_FRONT = 6  # COUNTS's two arrays + FRONT's arrays                    end of a bottom-up level
PULL = 7          # [int64 (k,) destination ranks, int64 (k,) first, (k,) end] PAIRS left in device memory
BEGIN = 8         # [int64 (2,) the root's degree, flags: 1 speaks the coded kinds, 2 shares its claims]  start barrier
PAIRS_Z = 9       # [int64 (k,) destination ranks, int64 (k,) pair counts] + k uint8 packed pair streams
FRONT_Z = 10      # [int64 (k,) sender's ranks, int64 (k,) slice forms] + k uint8 slice streams
COUNTS_FRONT_Z = 11   # COUNTS's two arrays + FRONT_Z's arrays
KIND_NAMES = {START: "start", PAIRS: "pairs", COUNTS: "counts", FRONT: "front", SYNC: "sync",
              COUNTS_FRONT: "counts+front", PULL: "pull", BEGIN: "begin", PAIRS_Z: "coded pairs",
              FRONT_Z: "coded front", COUNTS_FRONT_Z: "counts+coded front"}


class FrameError(ValueError):
    """A frame that does not match what its round expects (the connection is closed)."""


@dataclass(frozen=True)
class Limits:
    """Upper bounds a received frame must respect (checked before any allocation).

    Parameters
    ----------
    max_elems : int
        Elements per array (a level sends at most N + 64 in one array).
    max_arrays : int
        Arrays per frame.
    """

    max_elems: int
    max_arrays: int

    @classmethod
    def for_graph(cls, n_vertices: int, P: int) -> "Limits":
        """The bounds of a mesh serving ``P`` partitions of an ``n_vertices`` graph."""
        return cls(int(n_vertices) + 64, 4 + 2 * int(P) * int(P))

    @property
    def max_stream(self) -> int:
        """Bytes of one uint8 stream (a packed pair stream: at most N pairs of at most 128 bits)."""
        return STREAM_BYTES_PER_ELEM * self.max_elems


class Expect:
    """What the next frame on one connection must be: ``kind`` (None: any
    known kind, checked by the caller), round ``rnd``, ``sender``, ``limits``."""

    __slots__ = ("kind", "rnd", "sender", "limits")

    def __init__(self, kind, rnd, sender, limits):
        self.kind, self.rnd, self.sender, self.limits = kind, rnd, sender, limits


# ----------------------------------------------------------------- layouts
_FMT = {_I32: "i", _I64: "q", _F64: "d"}
_SIZE = {c: dt.itemsize for c, dt in DTYPES.items()}


class _Fixed:
    """A fixed layout (a list of (dtype code, count)): its descriptor bytes are
    a constant compared whole, and one struct packs a whole frame (header,
    descriptors, values) or unpacks its values into one tuple per array."""

    def __init__(self, layout):
        self.layout = layout
        self.sizes = [n for _, n in layout]
        ends = list(accumulate(self.sizes, initial=0))
        self.slices = [slice(a, b) for a, b in zip(ends, ends[1:])]
        self.dvals = [x for c, n in layout for x in (c, n)]
        self.descr = b"".join(DESCR.pack(c, n) for c, n in layout)
        vals = "".join(f"{n}{_FMT[c]}" for c, n in layout)
        self.values = struct.Struct("<" + vals)
        self.nbytes = self.values.size
        self.frame = struct.Struct(HEADER.format + "B7xq" * len(layout) + vals)

    def pack(self, kind, rnd, sender, arrays) -> bytes:
        if [len(a) for a in arrays] != self.sizes:
            raise FrameError(f"a {KIND_NAMES[kind]} frame holds arrays of {self.sizes} elements")
        try:
            return self.frame.pack(MAGIC, VERSION, kind, 0, rnd, sender, len(self.sizes), self.nbytes, *self.dvals,
                                   *[x for a in arrays for x in a])
        except struct.error as exc:
            raise FrameError(f"a {KIND_NAMES[kind]} frame cannot hold these values: {exc}") from None


def _pairs(codes, counts):
    """PAIRS: [int64 ranks (k)] + k x (ids, parents), all pairs of one dtype (int32 or int64)."""
    if codes[0] != _I64 or len(codes) != 1 + 2 * counts[0]:
        raise FrameError("pairs frame: rank list and number of pair arrays disagree")
    pc = codes[1:]
    if pc and (pc[0] not in (_I32, _I64) or pc.count(pc[0]) != len(pc) or counts[1::2] != counts[2::2]):
        raise FrameError("pair arrays of unequal dtype or length")
    return 1, 8 * counts[0] + (_SIZE[pc[0]] * sum(counts[1:]) if pc else 0)


def _fronts(head_codes, head_counts):
    """FRONT / COUNTS_FRONT: fixed head arrays, an int64 rank list (k), k int64 bitmap slices."""
    h = len(head_codes)
    want = head_codes + (_I64,)

    def check(codes, counts):
        if codes[:h + 1] != want or counts[:h] != head_counts or len(codes) != h + 1 + counts[h] \
                or codes.count(_I64) != len(codes) - head_codes.count(_F64):
            raise FrameError(f"front frame of layout {list(zip(codes, counts))[:h + 2]}...")
        return h + 1, 8 * sum(counts)
    return check


def _coded(head_codes, head_counts, lists):
    """PAIRS_Z / FRONT_Z / COUNTS_FRONT_Z: fixed head arrays, ``lists`` int64 lists of one length k,
    then exactly k uint8 streams."""
    h = len(head_codes)
    want = head_codes + (_I64,) * lists

    def check(codes, counts):
        k = counts[h] if len(counts) > h else -1
        if codes[:h + lists] != want or counts[:h] != head_counts or counts[h:h + lists] != (k,) * lists \
                or codes[h + lists:] != (_U8,) * k:
            raise FrameError(f"coded frame of layout {list(zip(codes, counts))[:h + lists + 1]}...")
        return h + lists, 8 * sum(counts[:h + lists]) + sum(counts[h + lists:])
    return check


def _pull(codes, counts):
    """PULL: three int64 lists of one length k (destination ranks, first and end pair of each)."""
    if codes != (_I64, _I64, _I64) or not counts[0] == counts[1] == counts[2]:
        raise FrameError("pull frame: three int64 lists of one length expected")
    return 3, 8 * sum(counts)


#: kind -> its layout: a :class:`_Fixed`, or a check ``(codes, counts) -> (head arrays, payload bytes)``
LAYOUTS = {START: _Fixed([(_I64, 1)]), SYNC: _Fixed([]), COUNTS: _Fixed([(_I64, 3), (_F64, 1)]), PAIRS: _pairs,
           FRONT: _fronts((), ()), COUNTS_FRONT: _fronts((_I64, _F64), (3, 1)), PULL: _pull,
           BEGIN: _Fixed([(_I64, 2)]), PAIRS_Z: _coded((), (), 2), FRONT_Z: _coded((), (), 2),
           COUNTS_FRONT_Z: _coded((_I64, _F64), (3, 1), 2)}
#: kind -> dtype codes of its head arrays (counts, rank lists), sent and decoded as tuples of numbers
_HEAD_CODES = {PAIRS: (_I64,), FRONT: (_I64,), COUNTS_FRONT: (_I64, _F64, _I64), PULL: (_I64, _I64, _I64),
               PAIRS_Z: (_I64, _I64), FRONT_Z: (_I64, _I64), COUNTS_FRONT_Z: (_I64, _F64, _I64, _I64)}


# ---------------------------------------------------------------- encoding
def encode(kind: int, rnd: int, sender: int, arrays) -> list:
    """One frame as a list of buffers to send in order.

    ``arrays`` follow the kind's layout: its *head* arrays (counts, rank
    lists: all arrays of START, COUNTS and SYNC, the first 1, 1 and 3 of
    PAIRS, FRONT and COUNTS_FRONT, the first 2, 2 and 4 of PAIRS_Z, FRONT_Z
    and COUNTS_FRONT_Z) are sequences of numbers, packed with
    struct; the others are numpy arrays. A payload up to
    :data:`SMALL_MESSAGE` bytes is one joined buffer; otherwise the header
    block (header, descriptors, head values) is followed by the body
    arrays' own memory, one buffer per non-empty array (zero-copy).
    """
    fx = LAYOUTS[kind]
    if isinstance(fx, _Fixed):
        return [memoryview(fx.pack(kind, rnd, sender, arrays))]
    hc = _HEAD_CODES[kind]
    h = len(hc)
    key = [kind]
    dv = []
    vals = []
    for c, a in zip(hc, arrays):
        key.append(len(a))
        dv += (c, len(a))
        vals.extend(a)
    body = list(arrays[h:])
    nb = 0
    for k, a in enumerate(body):
        c = _CODE_OF.get(a.dtype)
        if c is None:
            raise FrameError(f"dtype {a.dtype} has no frame code: send int32, int64, float64 or uint8")
        if not a.flags.c_contiguous:
            body = body[:k] + [np.ascontiguousarray(x) for x in body[k:]]
        dv += (c, a.size)
        nb += a.nbytes
    key.append(len(body))
    st = _ENCODERS.get(tuple(key))
    if st is None:
        if len(_ENCODERS) > 4096:
            _ENCODERS.clear()
        st = _ENCODERS[tuple(key)] = struct.Struct(HEADER.format + "B7xq" * (h + len(body)) + "".join(
            f"{n}{_FMT[c]}" for c, n in zip(hc, key[1:])))
    try:
        block = st.pack(MAGIC, VERSION, kind, 0, rnd, sender, h + len(body), st.size - HEADER.size
                        - DESCR.size * (h + len(body)) + nb, *dv, *vals)
    except struct.error as exc:
        raise FrameError(f"a {KIND_NAMES[kind]} frame's head cannot hold these values: {exc}") from None
    if st.size + nb <= SMALL_MESSAGE + HEADER.size + DESCR.size * (h + len(body)):
        return [memoryview(b"".join([block, *body]))]
    return [memoryview(block)] + [memoryview(a).cast("B") for a in body if a.nbytes]


#: (kind, head lengths..., number of body arrays) -> struct of header, descriptors and head values
_ENCODERS: dict = {}


# ---------------------------------------------------------------- decoding
def _header_error(fields, exp: Expect):
    magic, version, kind, reserved, rnd, sender = fields[:6]
    if magic != MAGIC or version != VERSION or reserved:
        raise FrameError("not a dbfs frame (bad magic or version)")
    if kind not in LAYOUTS or (exp.kind is not None and kind != exp.kind):
        raise FrameError(f"frame kind {kind} where {KIND_NAMES.get(exp.kind, 'a known kind')} was expected")
    if rnd != exp.rnd:
        raise FrameError(f"frame of round {rnd} where round {exp.rnd} was expected")
    raise FrameError(f"frame claims sender {sender} on the connection of worker {exp.sender}")


def check_header(buf, exp: Expect) -> tuple:
    """(kind, n_arrays, payload bytes) of a frame header, or FrameError."""
    fields = HEADER.unpack(buf)
    magic, version, kind, reserved, rnd, sender, n, nbytes = fields
    if (magic != MAGIC or version != VERSION or reserved or rnd != exp.rnd or sender != exp.sender
            or (kind != exp.kind if exp.kind is not None else kind not in LAYOUTS)):
        _header_error(fields, exp)
    lim = exp.limits
    if n > lim.max_arrays:
        raise FrameError(f"frame with {n} arrays (at most {lim.max_arrays})")
    if not 0 <= nbytes <= n * lim.max_stream:
        raise FrameError(f"frame of {nbytes} payload bytes for {n} arrays")
    return kind, n, nbytes


class _Plan:
    """How to decode frames of one kind with one descriptor block: checked
    once (dtype codes, layout, payload size), then reused for every frame
    with the same descriptors (a bitmap slice or a counts frame has the
    same descriptors every level)."""

    __slots__ = ("n", "nbytes", "maxcount", "maxstream", "hsize", "head", "slices", "body")

    def __init__(self, kind, descr):
        n = len(descr) // DESCR.size
        d = struct.unpack_from("<" + "B7xq" * n, descr)
        codes, counts = d[0::2], d[1::2]
        self.n = n
        self.maxcount = max((c for c, k in zip(counts, codes) if k != _U8), default=0)
        self.maxstream = max((c for c, k in zip(counts, codes) if k == _U8), default=0)
        if min(counts, default=0) < 0:
            raise FrameError("a negative element count")
        lay = LAYOUTS[kind]
        if isinstance(lay, _Fixed):
            if descr != lay.descr:
                raise FrameError(f"descriptors of a {KIND_NAMES[kind]} frame do not match its layout")
            h, self.nbytes = n, lay.nbytes
        else:
            if n == 0:
                raise FrameError(f"an empty {KIND_NAMES[kind]} frame")
            h, self.nbytes = lay(codes, counts)      # admits only codes of the dtype table
        fmt = "".join(f"{counts[i]}{_FMT[codes[i]]}" for i in range(h))
        self.head = struct.Struct("<" + fmt)
        self.hsize = self.head.size
        ends = list(accumulate(counts[:h], initial=0))
        self.slices = [slice(a, b) for a, b in zip(ends, ends[1:])]
        self.body = []
        off = self.hsize
        for i in range(h, n):
            dt = DTYPES[codes[i]]
            self.body.append((dt, counts[i], off))
            off += counts[i] * dt.itemsize

    def heads(self, buf, pos) -> list:
        v = self.head.unpack_from(buf, pos)
        return [v[sl] for sl in self.slices]


_PLANS: dict = {}


def _plan(kind, descr: bytes, nbytes: int, limits: Limits) -> _Plan:
    """The checked plan of a descriptor block (cached), or FrameError."""
    p = _PLANS.get((kind, descr))
    if p is None:
        p = _Plan(kind, descr)
        if len(_PLANS) > 1024:
            _PLANS.clear()
        _PLANS[(kind, descr)] = p
    if p.nbytes != nbytes:
        raise FrameError(f"descriptors add up to {p.nbytes} bytes, the header says {nbytes}")
    if p.maxcount > limits.max_elems:
        raise FrameError(f"an array of {p.maxcount} elements (at most {limits.max_elems})")
    if p.maxstream > limits.max_stream:
        raise FrameError(f"a stream of {p.maxstream} bytes (at most {limits.max_stream})")
    return p


def _decode_body(kind, n, nbytes, body, limits) -> list:
    """The arrays of a frame whose descriptors and payload are in one buffer ``body`` (a bytearray)."""
    dsize = n * DESCR.size
    lay = LAYOUTS[kind]
    if isinstance(lay, _Fixed):                  # constant descriptors: compare them whole
        if dsize != len(lay.descr) or nbytes != lay.nbytes or not body.startswith(lay.descr):
            raise FrameError(f"descriptors of a {KIND_NAMES[kind]} frame do not match its layout")
        v = lay.values.unpack_from(body, dsize)
        return [v[sl] for sl in lay.slices]
    p = _plan(kind, bytes(memoryview(body)[:dsize]), nbytes, limits)
    out = p.heads(body, dsize)
    for dt, count, off in p.body:
        out.append(np.frombuffer(body, dt, count, dsize + off))
    return out


class FrameReader:
    """Incremental decoder of the frames of one connection: :meth:`reset`
    to what the next frame must be, then fill ``view`` from ``filled`` on
    and call :meth:`advance` each time it is full, until ``done``; then
    ``kind`` and ``arrays`` hold the frame. A payload up to
    :data:`SMALL_MESSAGE` bytes is read with its descriptors as one buffer
    (the body arrays are views of it); a larger one reads the descriptors,
    then the head values, then each body array into an array allocated
    after the descriptors passed their checks."""

    __slots__ = ("exp", "head", "stage", "view", "filled", "kind", "n", "nbytes", "plan", "arrays")

    def __init__(self, exp: Expect):
        self.exp = exp
        self.head = memoryview(bytearray(HEADER.size))
        self.reset(exp.kind, exp.rnd)

    def reset(self, kind, rnd) -> None:
        """Expect a frame of ``kind`` (None: any known kind) and round ``rnd`` next."""
        self.exp.kind, self.exp.rnd = kind, rnd
        self.stage = 0     # 0 header, 1 descriptors, 5 head values, 2 body arrays, 3 done, 4 descriptors + payload
        self.view, self.filled = self.head, 0
        self.plan, self.arrays = None, []

    @property
    def done(self) -> bool:
        return self.stage == 3

    def advance(self) -> None:
        """The current buffer is full: check it and move to the next one."""
        stage = self.stage
        if stage == 0:
            self.kind, self.n, self.nbytes = check_header(self.view, self.exp)
            dsize = self.n * DESCR.size
            stage = self.stage = 4 if self.nbytes <= SMALL_MESSAGE else 1
            self.view, self.filled = memoryview(bytearray(dsize + (self.nbytes if stage == 4 else 0))), 0
            if len(self.view):
                return
        if stage == 4:
            self.arrays = _decode_body(self.kind, self.n, self.nbytes, self.view.obj, self.exp.limits)
            self.stage = 3
            return
        if stage == 1:
            self.plan = _plan(self.kind, bytes(self.view), self.nbytes, self.exp.limits)
            stage = self.stage = 5
            self.view, self.filled = memoryview(bytearray(self.plan.hsize)), 0
            if self.plan.hsize:
                return
        if stage == 5:
            self.arrays = self.plan.heads(self.view.obj, 0)
            self.stage = 2
        body = self.plan.body
        h = len(self.arrays) - len(self.plan.slices)
        while h < len(body):
            dt, count, _ = body[h]
            a = np.empty(count, dtype=dt)
            self.arrays.append(a)
            h += 1
            if a.nbytes:
                self.view, self.filled = memoryview(a).cast("B"), 0
                return
        self.stage = 3


def read_frame(sock, rd: FrameReader, recv_exact) -> tuple:
    """(kind, arrays) of the next frame on a blocking socket, read with ``rd``
    (reset by the caller; ``recv_exact(sock, view)`` fills a view)."""
    while not rd.done:
        if len(rd.view):
            recv_exact(sock, rd.view)
        rd.advance()
    return rd.kind, rd.arrays


def decode_parts(parts, exp: Expect) -> tuple:
    """(kind, arrays) of a frame that arrived as the buffers :func:`encode`
    made: one joined buffer, or the header block (header, descriptors, head
    values) followed by one buffer per non-empty body array."""
    head = memoryview(parts[0]).cast("B")
    if len(head) < HEADER.size:
        raise FrameError("truncated frame header")
    kind, n, nbytes = check_header(head[:HEADER.size], exp)
    end = HEADER.size + n * DESCR.size
    if len(parts) == 1:
        if len(head) != end + nbytes:
            raise FrameError("frame of the wrong size")
        return kind, _decode_body(kind, n, nbytes, bytearray(head[HEADER.size:]), exp.limits)
    if len(head) < end:
        raise FrameError("header block of the wrong size")
    p = _plan(kind, bytes(head[HEADER.size:end]), nbytes, exp.limits)
    if len(head) != end + p.hsize:
        raise FrameError("header block of the wrong size")
    arrays = p.heads(head, end)
    bufs = iter(parts[1:])
    for dt, count, _ in p.body:
        if count == 0:
            arrays.append(np.empty(0, dt))
            continue
        b = memoryview(next(bufs, b"")).cast("B")
        if len(b) != count * dt.itemsize:
            raise FrameError(f"buffer of {len(b)} bytes for {count} x {dt}")
        a = np.frombuffer(b, dtype=dt)
        arrays.append(a if a.flags.writeable else a.copy())
    if next(bufs, None) is not None:
        raise FrameError("more buffers than descriptors")
    return kind, arrays
