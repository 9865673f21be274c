"""The exchange mesh between workers: opening and closing meshes from the client (this module), and its parts.

Parts, in import order (each imports only those above it)::

    frames      wire format: binary frames, checked before use (no pickle)
    codec       frontier slices and claim pairs coded near their information (across hosts)
    handshake   mutual HMAC-SHA256 handshake of every TCP connection
    transport   message rounds: tcp (selectors), tcp-threads, dask comm
    listener    authenticated listener thread and dialer
    board       the small rounds of one host's CPU workers through their shared file, not TCP
    shm         shared frontier bitmap in /dev/shm
    shm_claims  a large top-down level's claims shared in /dev/shm (no pairs sent)
    ipc         shared frontier bitmap in device memory (CUDA IPC, GPU workers)
    waits       bounded client waits that notice a lost worker
    plugin      MeshPlugin: every piece of worker-side state
    nccl        an NCCL communicator per mesh of GPU workers on one host, set up through Dask

Contract
--------
:func:`open_mesh` connects a list of workers (mesh index = list position)
so that one long-running task per worker can exchange messages directly
(:mod:`dbfs.bfs.dask.mesh.transport`); :func:`close_mesh` closes it on the
workers still alive (which unblocks a running search). Worker-side state
lives in the :class:`dbfs.bfs.dask.mesh.plugin.MeshPlugin`, registered here once
per cluster.

Method: the client makes a fresh 32-byte key per mesh and hands it to the
mesh's workers through the scheduler (``client.run``), together with the
mesh id; each worker opens its endpoint (TCP: a listener on its own
contact interface, served for the mesh's lifetime; ``"dask"``: the plugin's
handler) and returns its address; then one pinned task per worker connects
to its peers (TCP: authenticated with the key, :mod:`dbfs.bfs.dask.mesh.listener`);
all of them must run at once. Every wait is bounded and watches the
mesh's workers (:mod:`dbfs.bfs.dask.mesh.waits`): a worker lost during set-up
raises :class:`dbfs.bfs.dask.mesh.waits.WorkerLost`. On a cluster configured
for TLS the TCP transports would be plaintext, so :func:`choose_transport`
falls back to ``"dask"`` (distributed's comm layer, TLS included) and
:func:`open_mesh` refuses them.

For a :class:`dbfs.bfs.dask.layout.placement.DistributedGraph` (duck-typed here),
:func:`_open_mesh` also gives the mesh a shared frontier when every worker
is on one host and the partitions are blocks: in ``/dev/shm`` for CPU
workers (:func:`_open_shm`, and each worker's top-down claims that its peers
read, :func:`_open_claims`; ``dg.shm_claims`` says why not); when every worker is a GPU worker, an NCCL
communicator (:mod:`dbfs.bfs.dask.mesh.nccl`: each worker on its own device),
else the first worker's device memory through CUDA IPC (:func:`_open_ipc`);
``dg.shm`` says why not, ``dg.nccl_off`` why not NCCL.
"""
from __future__ import annotations

import time
import uuid

from dbfs.bfs.dask.mesh.frames import Limits
from dbfs.bfs.dask.mesh.handshake import new_key
from dbfs.bfs.dask.mesh.ipc import _front_sizes
from dbfs.bfs.dask.mesh.nccl import open_nccl
from dbfs.bfs.dask.mesh.plugin import (NAME, MeshPlugin, _claims_drop, _claims_map, _claims_open, _ipc_alloc, _ipc_map,
                                  _mesh_close, _mesh_connect, _mesh_listen, _shm_drop, _shm_open, _uses_tls)
from dbfs.bfs.dask.mesh.shm import _ShmFront, _shm_path, _unlink
from dbfs.bfs.dask.mesh.shm_claims import _unlink_all, box_cap, claims_bytes, claims_paths
from dbfs.bfs.dask.mesh.transport import TRANSPORTS, _host_of
from dbfs.bfs.dask.mesh.waits import WorkerLost, alive_workers, gather_watched, is_peer_loss, run_within
from dbfs.errors import DbfsError
from dbfs.graph import id_dtype

__all__ = ["DEFAULT_TIMEOUT", "open_mesh", "close_mesh", "choose_transport", "ensure_plugin"]

DEFAULT_TIMEOUT = 300.0          # seconds any single wait may take before the search is declared failed
RUN_TIMEOUT = 30.0               # seconds a set-up call on the workers (client.run) may take
CLOSE_TIMEOUT = 5.0              # seconds closing a mesh may take (best effort: a dead worker closed it already)

_alive = alive_workers


def ensure_plugin(client) -> None:
    """Register :class:`dbfs.bfs.dask.mesh.plugin.MeshPlugin` on the cluster of ``client``.

    Once per cluster: a registered plugin is kept with its meshes (the
    scheduler also installs it on workers that join later).
    """
    registered = client.run_on_scheduler(_has_plugin, NAME)
    if not registered:
        client.register_plugin(MeshPlugin(), name=NAME)


def _has_plugin(name, dask_scheduler=None) -> bool:
    return name in dask_scheduler.worker_plugins


def _on_tls(client, workers) -> bool:
    if any(str(w).startswith("tls://") for w in workers):
        return True
    res = run_within(client, _uses_tls, workers=list(workers), timeout=RUN_TIMEOUT, what="the TLS check of the workers")
    _raise_lost(res, "the TLS check of the mesh's workers")
    return any(res.values())


def _raise_lost(res: dict, what: str) -> None:
    """WorkerLost for a worker whose ``client.run`` failed because it is gone; re-raise any other error."""
    for w, v in res.items():
        if isinstance(v, BaseException):
            if is_peer_loss(v) or isinstance(v, OSError):
                raise WorkerLost(f"worker {w} was lost during {what}: {type(v).__name__}: {v}", [w])
            raise v


def choose_transport(client, workers: list, transport: str) -> tuple:
    """The transport a mesh over ``workers`` uses when ``transport`` is asked for.

    The TCP transports are never used in plaintext on a cluster configured
    for TLS (a worker address ``tls://...`` or ``security.require_encryption``).

    Parameters
    ----------
    client : distributed.Client
    workers : list of str
    transport : {"tcp", "tcp-threads", "dask"}

    Returns
    -------
    (str, str)
        The transport to use and why it differs from ``transport`` ('' when it does not).
    """
    if transport not in TRANSPORTS:
        raise DbfsError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    if transport != "dask" and len(workers) > 1 and _on_tls(client, workers):
        return "dask", "the cluster uses TLS: the mesh goes through distributed's comm layer (TLS) " \
                       f"instead of plaintext {transport!r} sockets"
    return transport, ""


def open_mesh(client, workers: list, transport: str = "tcp", timeout: float = DEFAULT_TIMEOUT,
              limits: Limits | None = None) -> str:
    """Open an exchange mesh between ``workers`` (mesh index = list position); returns its id.

    Parameters
    ----------
    client : distributed.Client
    workers : list of str
        Worker addresses; a worker's mesh index is its position.
    transport : {"tcp", "tcp-threads", "dask"}
        The TCP transports are refused on a TLS cluster (see :func:`choose_transport`).
    timeout : float
        Seconds any wait of the mesh (setup, a round) may take.
    limits : Limits, optional
        Bounds of a received frame (:meth:`Limits.for_graph` for a graph;
        default: 65536 elements per array).
    """
    ensure_plugin(client)
    if transport not in TRANSPORTS:
        raise DbfsError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    if transport != "dask" and len(workers) > 1 and _on_tls(client, workers):
        raise DbfsError(f"transport {transport!r} would be plaintext on this TLS cluster: use transport='dask'")
    W = len(workers)
    limits = limits or Limits(1 << 16, 4 + 2 * W * W)
    mesh_id = uuid.uuid4().hex
    if W > 1:
        widx_of = {w: i for i, w in enumerate(workers)}
        try:
            eps = run_within(client, _mesh_listen, mesh_id, widx_of, transport, new_key(), workers=list(workers),
                             timeout=min(timeout, RUN_TIMEOUT), what="opening the mesh's listeners")
            _raise_lost(eps, "opening the mesh's listeners")
            addrs = [eps[w] for w in workers]
            futs = [client.submit(_mesh_connect, mesh_id, i, addrs, transport, timeout, limits, workers=[w],
                                  allow_other_workers=False, pure=False) for i, w in enumerate(workers)]
            gather_watched(client, futs, workers, "the mesh set-up", timeout + RUN_TIMEOUT)
        except BaseException:
            close_mesh(client, mesh_id, workers)
            raise
    return mesh_id


def close_mesh(client, mesh_id: str, workers: list) -> None:
    """Close a mesh on those of ``workers`` still alive (unblocks a running search).

    Parameters
    ----------
    client : distributed.Client
    mesh_id : str
        What :func:`open_mesh` returned.
    workers : list of str
        The mesh's workers.
    """
    if len(workers) < 2:
        return
    try:
        alive = _alive(client)
        ws = [w for w in workers if w in alive]
        if ws:
            run_within(client, _mesh_close, mesh_id, workers=ws, timeout=CLOSE_TIMEOUT, what="closing the mesh")
    except (OSError, DbfsError):
        pass                      # best effort: a worker that is gone took its end of the mesh with it


def _open_mesh(dg) -> None:
    """Give ``dg`` a mesh over its workers (and a shared frontier when possible)."""
    t0 = time.perf_counter()
    order = []
    for rk in range(dg.P):
        w = dg.rank_worker[rk]
        if w not in order:
            order.append(w)
    dg.mesh_workers = order
    requested = dg.transport_requested or dg.transport
    transport, why = choose_transport(dg.client, order, requested)
    if transport != dg.transport:
        dg.events.append({"event": "transport", "requested": requested, "transport": transport, "reason": why})
        dg.transport, dg.transport_requested = transport, requested
    dg.mesh_id = open_mesh(dg.client, order, dg.transport, dg.timeout, Limits.for_graph(dg.n_vertices, dg.P))
    dg.level_exchange = ""
    dg.shm = _open_shm(dg) if dg.shared_memory is not False else "switched off"
    dg.shm_claims = "no shared frontier" if dg.shm else "GPU workers" if dg.has_gpu else _open_claims(dg)
    dg.mesh_time = time.perf_counter() - t0


def _open_shm(dg) -> str:
    """Give the mesh a shared frontier when every worker is on one host and
    the partitions are blocks; returns why not ('' when on)."""
    ws = dg.mesh_workers
    if len(ws) < 2:
        return "one worker"
    if dg.partitioning.code != 0:
        return "cyclic partitions"
    if len({_host_of(w) for w in ws}) > 1:
        return "workers on several hosts"
    if dg.has_gpu:
        return _open_gpu(dg)
    gwords = (dg.n_vertices + 63) >> 6
    path = _shm_path(dg.mesh_id, _ShmFront.nbytes(gwords, dg.P))
    if path is None:
        return "/dev/shm missing or too small"
    c = dg.client
    why = ""
    what = "mapping the shared frontier"
    try:
        r0 = run_within(c, _shm_open, dg.mesh_id, path, gwords, dg.P, True, workers=ws[:1], timeout=RUN_TIMEOUT,
                        what=what)
        _raise_lost(r0, what)
        if r0[ws[0]] is not True:
            return f"cannot create {path}: {r0[ws[0]]}"
        res = run_within(c, _shm_open, dg.mesh_id, path, gwords, dg.P, False, workers=ws[1:], timeout=RUN_TIMEOUT,
                         what=what)
        _raise_lost(res, what)
        bad = {w: v for w, v in res.items() if v is not True}
        if bad:
            why = f"a worker cannot map {path}: {next(iter(bad.values()))}"
            run_within(c, _shm_drop, dg.mesh_id, workers=ws, timeout=RUN_TIMEOUT, what=what)
    finally:   # every mapping is made: the name can go (the memory lives while mapped)
        try:
            run_within(c, _unlink, path, workers=ws[:1], timeout=CLOSE_TIMEOUT, what=what)
        except DbfsError:
            pass
    return why


def _open_claims(dg) -> str:
    """Give each CPU worker of a mesh with a shared frontier its top-down claims in /dev/shm, mapped read-only
    by its peers (:mod:`dbfs.bfs.dask.mesh.shm_claims`; all or none); returns why not ('' when on)."""
    ws = dg.mesh_workers
    n, dtype = dg.n_vertices, id_dtype(dg.n_vertices).name
    cap = box_cap((n + 63) >> 6)
    paths = claims_paths(dg.mesh_id, len(ws), claims_bytes(n, dtype, dg.P, cap))
    if paths is None:
        return "/dev/shm missing or too small for the claims"
    c = dg.client
    what = "mapping the shared top-down claims"
    why = ""
    try:
        for fn, args in ((_claims_open, ({w: i for i, w in enumerate(ws)}, paths, n, dtype, dg.P, cap)),
                         (_claims_map, (paths,))):
            res = run_within(c, fn, dg.mesh_id, *args, workers=ws, timeout=RUN_TIMEOUT, what=what)
            _raise_lost(res, what)
            bad = [v for v in res.values() if v is not True]
            if bad:
                why = f"a worker cannot share its claims: {bad[0]}"
                run_within(c, _claims_drop, dg.mesh_id, workers=ws, timeout=RUN_TIMEOUT, what=what)
                break
    finally:   # every mapping is made (or none kept): the names can go
        try:
            run_within(c, _unlink_all, paths, workers=ws[:1], timeout=CLOSE_TIMEOUT, what=what)
        except DbfsError:
            pass
    return why


def _open_gpu(dg) -> str:
    """Give a mesh of GPU workers on one host an NCCL communicator (:mod:`dbfs.bfs.dask.mesh.nccl`: the
    levels' exchanges become collectives, ``dg.level_exchange == "nccl"``), else shared device
    memory (CUDA IPC, :mod:`dbfs.bfs.dask.mesh.ipc`; ``dg.nccl_off`` says why not NCCL); returns why
    neither ('' when one is on)."""
    ws = dg.mesh_workers
    if any(dg.worker_kinds.get(w) != "gpu" for w in ws):
        return "GPU and CPU workers in the mesh (frontiers and pairs go through host memory)"
    why = open_nccl(dg, RUN_TIMEOUT)
    if not why:
        dg.level_exchange, dg.nccl_off = "nccl", ""
        return ""
    dg.nccl_off = why
    try:                         # a communicator some workers joined goes (aborted) before the fallback
        run_within(dg.client, _shm_drop, dg.mesh_id, workers=ws, timeout=RUN_TIMEOUT, what="dropping NCCL")
    except DbfsError:
        pass
    return _open_ipc(dg)


def _open_ipc(dg) -> str:
    """Give a mesh of GPU workers on one host shared device memory (CUDA IPC,
    :mod:`dbfs.bfs.dask.mesh.ipc`); returns why not ('' when on)."""
    ws = dg.mesh_workers
    part = dg.partitioning
    starts = part.block_starts()
    sizes = [int(x) for x in _front_sizes(starts)]
    n, dtype = dg.n_vertices, id_dtype(dg.n_vertices).name
    c = dg.client
    what = "sharing device memory between the GPU workers"
    why = ""
    try:
        got = {}
        for owner, group in ((True, ws[:1]), (False, ws[1:])):
            res = run_within(c, _ipc_alloc, dg.mesh_id, sizes, n, dtype, owner, workers=group,
                             timeout=RUN_TIMEOUT, what=what)
            _raise_lost(res, what)
            got.update(res)
        bad = [v for v in got.values() if not isinstance(v, dict)]
        if bad:
            why = f"cannot export device memory: {bad[0]}"
            return why
        res = run_within(c, _ipc_map, dg.mesh_id, got[ws[0]]["front"], [got[w]["pairs"] for w in ws],
                         workers=ws, timeout=RUN_TIMEOUT, what=what)
        _raise_lost(res, what)
        bad = [v for v in res.values() if v is not True]
        if bad:
            why = f"a worker cannot map a peer's device memory: {bad[0]}"
        return why
    finally:
        if why:
            run_within(c, _shm_drop, dg.mesh_id, workers=ws, timeout=RUN_TIMEOUT, what=what)


def _close_mesh(dg) -> None:
    if dg.mesh_id:
        close_mesh(dg.client, dg.mesh_id, dg.mesh_workers)
