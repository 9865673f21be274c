"""The small rounds of the CPU workers of one host through a board in their shared frontier's file, not TCP.

Contract
--------
:class:`_BoardMesh` wraps a worker's TCP mesh (:mod:`dbfs.bfs.dask.mesh.transport`)
when the mesh has a shared frontier (:class:`dbfs.bfs.dask.mesh.shm._ShmFront`:
every worker of the mesh maps the same file, all or none, so every worker
routes the same rounds the same way). The rounds whose message is one small
record, the same to every peer, go through the board: BEGIN (the start
barrier), COUNTS and SYNC (:data:`KINDS`). Every other kind goes through the
wrapped mesh, whose round numbers stay in step. :meth:`_BoardMesh.exchange`
returns what the wrapped mesh's would: per peer, the record as the frame's
arrays. A board round writes this worker's record into its slot, then the
round's number; it then polls the peers' slots until each shows the round,
and reads their records. The round numbers live in the :class:`_ShmFront`
(``board_round``), so they run on across the searches and batches of the
mesh's life.

Liveness: a peer that died never posts its round. While it waits, the board
peeks at the wrapped mesh's sockets every :data:`CHECK_S` (a connection the
peer closed, or the mesh closed, is a lost peer: :class:`_PeerLost`; data of
a later TCP round stays where it is), and the mesh's timeout bounds the
wait. A slot showing a round past this one means the workers are out of
step: a lost peer too.

Encoding: in the shared file after the frontier buffers,
``2 x P x`` :data:`SLOT` int64 words: for each parity of the round number,
one slot per mesh worker (P >= the workers): the round's number, then the
record (at most ``SLOT - 1`` int64 words; a float goes by its bits). A
slot of one parity is rewritten two rounds later, after every peer has
posted the round between, which it does after reading this one.
Records: BEGIN ``(root degree, flags)``; COUNTS ``(new frontier, its
edges, edges examined, kernel seconds)``; SYNC none.

Method: a centralised barrier with one round number a worker (after
Mellor-Crummey and Scott, "Algorithms for Scalable Synchronization on
Shared-Memory Multiprocessors", ACM TOCS 1991), carrying a record; each
post is a release store after the record's plain stores and each poll an
acquire load, so it holds on weakly ordered CPUs too.
"""
from __future__ import annotations

import socket
import time

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from dbfs.bfs.dask.mesh.frames import BEGIN, COUNTS, SYNC
from dbfs.bfs.dask.mesh.transport import _PeerLost

__all__ = ["_BoardMesh", "KINDS", "SLOT", "board_words", "warm_board"]

#: int64 words of a slot: the round's number, then the record
SLOT = 8

#: seconds between two looks at the peers' connections while a round waits
CHECK_S = 0.005

#: polls before a waiting round yields the CPU between polls
SPIN = 256

#: the kinds that go through the board: a small record, the same to every peer
KINDS = (BEGIN, COUNTS, SYNC)

#: False: every round goes through the TCP mesh (a benchmark's or test's switch: set it on every worker)
USE = True


def board_words(P: int) -> int:
    """int64 words of the board of a mesh of at most ``P`` workers."""
    return 2 * P * SLOT


@intrinsic
def _store_release(typingctx, arr, idx, val):
    """``arr[idx] = val`` as an atomic store with release ordering (the stores before it are seen first)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        return None
    sig = types.void(arr, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]])
        builder.store_atomic(args[2], ptr, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _load_acquire(typingctx, arr, idx):
    """``arr[idx]`` as an atomic load with acquire ordering (the loads after it see what was stored before the
    matching release)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        return None
    sig = types.int64(arr, types.int64)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]])
        return builder.load_atomic(ptr, "acquire", 8)

    return sig, codegen


@njit(nogil=True, cache=True)
def _post(board, at, r, rec):
    """The record ``rec`` into the slot at word ``at``, then (release) the round ``r``."""
    for k in range(rec.shape[0]):
        board[at + 1 + k] = rec[k]
    _store_release(board, at, r)


@njit(nogil=True, cache=True)
def _posted(board, ats, r):
    """How many of the slots at words ``ats`` show round ``r`` (acquire); -1 when one shows a later round."""
    n = 0
    for k in range(ats.shape[0]):
        v = _load_acquire(board, ats[k])
        if v == r:
            n += 1
        elif v > r:
            return -1
    return n


def _record(kind, msg) -> np.ndarray:
    if kind == COUNTS:
        (n, m, ex), (kt,) = msg
        return np.array([n, m, ex, np.float64(kt).view(np.int64)], np.int64)
    if kind == BEGIN:
        (d, f), = msg
        return np.array([d, f], np.int64)
    return np.empty(0, np.int64)


def _arrays(kind, words):
    """A peer's record as the arrays its frame would carry (what the level loop reads)."""
    if kind == COUNTS:
        return [(int(words[0]), int(words[1]), int(words[2])), (float(words[3:4].view(np.float64)[0]),)]
    if kind == BEGIN:
        return [(int(words[0]), int(words[1]))]
    return []


def warm_board() -> None:
    """Load :func:`_post`'s and :func:`_posted`'s kernels (at load time, not in a timed search)."""
    b = np.zeros(2 * SLOT, np.int64)
    _post(b, 0, 1, np.ones(1, np.int64))
    _posted(b, np.zeros(1, np.int64), 1)


class _BoardMesh:
    """A worker's mesh whose BEGIN, COUNTS and SYNC rounds go through the board (see the module docstring)."""

    def __init__(self, mesh, sh, widx: int, W: int):
        self.mesh, self.sh, self.widx, self.W = mesh, sh, int(widx), int(W)
        self.board = sh.board
        P = self.board.shape[0] // (2 * SLOT)
        if W > P:
            raise ValueError(f"a board of {P} slots for {W} workers")
        self.peers = [j for j in range(W) if j != self.widx]
        self.ats = [np.asarray([(par * P + j) * SLOT for j in self.peers], np.int64) for par in (0, 1)]
        self.mine = [(par * P + self.widx) * SLOT for par in (0, 1)]
        self.timeout = float(getattr(mesh, "timeout", 300.0))

    def exchange(self, kind, out):
        if kind not in KINDS:
            return self.mesh.exchange(kind, out)
        if self.mesh.closed:
            raise _PeerLost("mesh closed")
        rec = _record(kind, out[self.peers[0]]) if self.peers else np.empty(0, np.int64)
        r = self.sh.board_round = self.sh.board_round + 1
        par = r & 1
        _post(self.board, self.mine[par], r, rec)
        self._wait(self.ats[par], r)
        n = rec.shape[0]
        return {j: _arrays(kind, self.board[at + 1:at + 1 + n]) for j, at in zip(self.peers, self.ats[par])}

    def _wait(self, ats, r) -> None:
        polls, want = 0, ats.shape[0]
        t_look = deadline = 0.0
        while True:
            k = _posted(self.board, ats, r)
            if k == want:
                return
            if k < 0:
                raise _PeerLost(f"a peer's board slot is past round {r}: the workers are out of step")
            polls += 1
            if polls < SPIN:
                continue
            now = time.monotonic()
            if polls == SPIN:
                t_look, deadline = now, now + self.timeout
            elif now - t_look >= CHECK_S:
                self._look()
                t_look = now
                if now > deadline:
                    raise _PeerLost(f"no complete round within {self.timeout:.0f} s")
            time.sleep(0)

    def _look(self) -> None:
        """A lost peer while waiting: the mesh closed, or a peer's connection closed (read without taking)."""
        if self.mesh.closed:
            raise _PeerLost("mesh closed")
        for j, s in self.mesh.socks.items():
            try:
                got = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                raise _PeerLost(f"connection to worker {j} lost: {exc}") from None
            if not got:
                raise _PeerLost(f"connection to worker {j} lost: peer closed the connection")

    def close(self):
        self.mesh.close()
