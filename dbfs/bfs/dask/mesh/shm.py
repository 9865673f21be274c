"""Shared frontier bitmap of the workers of one host (``/dev/shm``).

Contract
--------
When every mesh worker is on one host and the partitions are blocks, a
bottom-up level does not send frontier slices: every partition writes its
words into a global frontier bitmap that all workers map, and only the
counts cross the mesh (whose round is the barrier). :func:`_shm_publish`
before the barrier, :func:`_shm_collect` after it.

Encoding: one file mapping (:class:`_ShmFront`), int64, for k in (0, 1):
``gwords`` bitmap words then ``P`` boundary words; double-buffered (a
buffer is rewritten only two publications later). Word w of the bitmap
belongs to the partition holding vertex 64 w; a partition's first word,
when a lower rank owns it, goes into that rank's boundary word instead
(:func:`_boundary_words`), which every reader ORs in after the barrier.
"""
from __future__ import annotations

import mmap
import os

import numpy as np
from numba import njit, prange

from dbfs.bfs.dask.mesh.board import board_words

__all__ = ["_ShmFront", "_shm_path", "_shm_publish", "_shm_collect", "_boundary_words", "_unlink"]


class _ShmFront:
    """Two global frontier bitmaps shared by the workers of one host (a file
    mapping in /dev/shm, unlinked once every worker has mapped it, so it
    vanishes with the last process), plus per-rank boundary words.

    Layout (int64): for k in (0, 1): ``gwords`` bitmap words, then ``P``
    boundary words. A bottom-up level's new frontier is published into buffer
    ``k`` (k alternates per publication): every partition writes the words
    it OWNS (word w belongs to the partition holding vertex 64 w: its local
    words 1.., and word 0 when its first row is 64-aligned) whole, and the
    bits of its first word, when another partition owns that word, into its
    boundary word. After the count exchange (a barrier), every worker ORs
    the boundary words into their words (all workers write the same values)
    and copies the bitmap out. A buffer is rewritten only two publications
    later, after every worker has sent the counts that follow its copy.
    ``claims``: this worker's :class:`dbfs.bfs.dask.mesh.shm_claims._ShmClaims`
    of the mesh, or None. After the two buffers, the board of the small
    rounds (:mod:`dbfs.bfs.dask.mesh.board`).
    """

    @staticmethod
    def nbytes(gwords: int, P: int) -> int:
        """The file's bytes: two frontier buffers of ``gwords`` words and ``P`` boundary words, then the board."""
        return (2 * (gwords + P) + board_words(P)) * 8

    def __init__(self, path, gwords, P, create):
        size = self.nbytes(gwords, P)
        fd = os.open(path, (os.O_CREAT | os.O_EXCL | os.O_RDWR) if create else os.O_RDWR, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        a = np.frombuffer(self._mm, np.int64)
        if create:
            a.fill(0)                      # allocates the pages now, not inside a search
        else:
            int(a[::512].sum())            # maps them
        st = gwords + P
        self.bufs = [a[k * st:k * st + gwords] for k in (0, 1)]
        self.bnd = [a[k * st + gwords:(k + 1) * st] for k in (0, 1)]
        self.board = a[2 * st:]            # the small rounds' slots (dbfs.bfs.dask.mesh.board)
        self.board_round = 0               # the last board round of this worker (the same on every worker)
        self.k = 0
        self.path = path
        # the workers' shared top-down claims (dbfs.bfs.dask.mesh.shm_claims._ShmClaims), mapped after this
        self.claims = None


def _shm_path(mesh_id: str, size: int):
    """Where to create the segment: /dev/shm when it has room (twice the size), else None."""
    d = "/dev/shm"
    try:
        stv = os.statvfs(d)
    except OSError:
        return None
    return os.path.join(d, f"dbfs-{mesh_id}") if stv.f_bavail * stv.f_frsize >= 2 * size else None


def _unlink(path):
    """(client.run) remove the segment's name (the memory lives while mapped)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@njit(parallel=True, nogil=True, cache=True)
def _publish_words(dst, src, w0, first):
    """Copy local bitmap words ``first..`` to global words ``w0 + first..``."""
    for w in prange(first, src.shape[0]):
        dst[w0 + w] = src[w]


@njit(nogil=True, cache=True)
def _fix_boundaries(dst, bnd, wordof):
    """OR each rank's boundary word into global word ``wordof[rank]`` (-1: none);
    one read and one write per word, so racing workers write equal values."""
    P = wordof.shape[0]
    r = 0
    while r < P:
        w = wordof[r]
        if w < 0:
            r += 1
            continue
        acc = dst[w]
        while r < P and wordof[r] == w:
            acc |= bnd[r]
            r += 1
        dst[w] = acc


@njit(parallel=True, nogil=True, cache=True)
def _take_front(front, src, visited):
    """front = src (a private copy of the shared frontier); visited |= src."""
    for w in prange(front.shape[0]):
        x = src[w]
        front[w] = x
        visited[w] |= x


def _shm_publish(sh, states):
    """Publish this worker's partitions' local frontier bitmaps (``fbm``) into the next buffer."""
    dst, bnd = sh.bufs[sh.k], sh.bnd[sh.k]
    for rk, st in states.items():
        p = st.p
        if p.pad:
            bnd[rk] = st.fbm[0]
        _publish_words(dst, st.fbm, p.base >> 6, 1 if p.pad else 0)


def _shm_collect(sh, wordof, front, visited_g):
    """After the barrier: fix the boundary words, copy the frontier to ``front``, OR it into ``visited_g``."""
    dst = sh.bufs[sh.k]
    _fix_boundaries(dst, sh.bnd[sh.k], wordof)
    _take_front(front, dst, visited_g)
    sh.k ^= 1


def _boundary_words(part):
    """Per rank of ``part`` (a block :class:`dbfs.partition.Partitioning`):
    the global word its first row shares with a lower rank's rows, or -1."""
    out = np.full(part.P, -1, np.int64)
    for rk in range(part.P):
        first = part.vertex_range(rk).start
        if first & 63:
            out[rk] = first >> 6
    return out
