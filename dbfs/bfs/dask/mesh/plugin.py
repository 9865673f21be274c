"""Worker-side state of the distributed BFS: one ``WorkerPlugin`` per worker.

Contract
--------
:class:`MeshPlugin` (registered by the client under :data:`NAME`, once per
cluster: ``idempotent``) owns everything a worker keeps between tasks:
its meshes and their listeners and keys, the shared-memory frontiers and
top-down claims, the claim scratch and reusable work arrays, the per-level
listener list and the counters of refused connections. ``teardown`` closes all of it. The
module-level functions are its entry points: ``client.run`` calls (they
take ``dask_worker``) and pinned tasks (:func:`_mesh_connect`).

Refused connections and messages are logged on logger ``dbfs.mesh``
(warning) and counted per reason in ``rejected`` (see :meth:`MeshPlugin.status`).

``note_device()`` keeps the device memory in use (the driver's view: what
``nvidia-smi`` shows) at its highest after each search and each validation on
this worker; :func:`_memory_peaks` (``client.run``) reports it with the peak
host RSS, per worker, for the run's JSON.

``level_listeners``: callables ``fn(level, ranks, record)`` the level loop
calls on this worker after each level with the level number, this
worker's ranks and the level's record (global counts; this worker's
``kernel`` and ``exchange`` seconds) (monitoring publishes level records through it; tests inject
faults through it).

The ``"dask"`` transport's messages arrive at :meth:`MeshPlugin.on_message`
(the worker handler ``dbfs_bsp``, registered in ``setup`` as Dask's P2P
shuffle registers its own).
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import resource
import sys
import threading

from distributed import get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from dbfs.bfs.dask.mesh.frames import Limits
from dbfs.bfs.dask.mesh.ipc import _DevMesh
from dbfs.bfs.dask.mesh.listener import Listener, connect_peers
from dbfs.bfs.dask.mesh.shm import _ShmFront
from dbfs.bfs.dask.mesh.shm_claims import _ShmClaims
from dbfs.bfs.dask.mesh.transport import _DaskMesh, _host_of, _PeerLost, _SelectMesh, _ThreadedTcpMesh

__all__ = ["MeshPlugin", "NAME", "uses_tls", "get_plugin", "memory_peaks"]

NAME = "dbfs-mesh"
HANDLER = "dbfs_bsp"
log = logging.getLogger("dbfs.mesh")


def uses_tls(dask_worker) -> bool:
    """Whether the worker's cluster is configured for TLS (plaintext sockets are then refused)."""
    sec = getattr(dask_worker, "security", None)
    return str(dask_worker.address).startswith("tls://") or bool(getattr(sec, "require_encryption", False))


def token_of(key: bytes, mesh_id: str, widx: int) -> bytes:
    """The ``"dask"`` transport's token of mesh worker ``widx`` (derived from the mesh key)."""
    return hmac.new(key, b"|".join((b"token", mesh_id.encode(), str(widx).encode())), hashlib.sha256).digest()


class MeshPlugin(WorkerPlugin):
    """Owner of a worker's meshes and per-worker buffers (see the module docstring)."""

    name = NAME
    idempotent = True

    def setup(self, worker):
        self.worker = worker
        self.lock = threading.Lock()
        self.meshes = {}            # (mesh_id, widx) -> mesh
        self.listeners = {}         # (mesh_id, widx) -> Listener
        self.keys = {}              # mesh_id -> key
        self.shms = {}              # mesh_id -> _ShmFront
        self.scratch = {}           # N -> td claim array, kept across searches
        self.grown = {}             # key -> reusable int64 work array
        self.level_listeners = []   # fn(level, ranks, record) after each level of a search
        self.rejected = collections.Counter()   # reason -> refused connections / messages
        self.recent = collections.deque(maxlen=64)
        self.device_peak = 0        # the most device bytes in use seen by note_device
        worker.handlers[HANDLER] = self.on_message

    def note_device(self) -> None:
        """Keep the device memory in use now (total less free, the driver's view) if it is the most seen; nothing
        on a worker whose CuPy holds no device memory (no CUDA context is made for the question), and a device
        error is not this report's to raise."""
        cp = sys.modules.get("cupy")
        try:
            if cp is None or not cp.get_default_memory_pool().total_bytes():
                return
            free, total = cp.cuda.runtime.memGetInfo()
        except Exception:       # noqa: BLE001 (a report: the search or validation that called it goes on)
            return
        self.device_peak = max(self.device_peak, int(total) - int(free))

    def teardown(self, worker):
        for mid in set(self.keys) | {k[0] for k in self.meshes} | {k[0] for k in self.listeners} | set(self.shms):
            self.close_mesh(mid)
        self.scratch.clear()
        self.grown.clear()
        if worker.handlers.get(HANDLER) == self.on_message:
            del worker.handlers[HANDLER]

    # ----------------------------------------------------------- refusals
    def reject(self, reason: str, detail: str, peer=None) -> None:
        """Count and log one refused connection or message."""
        with self.lock:
            self.rejected[reason] += 1
            self.recent.append((reason, detail, str(peer)))
        log.warning("dbfs mesh on %s refused %s: %s", self.worker.address, peer, detail)

    def status(self) -> dict:
        """Listener addresses, open meshes and refusal counters (monitoring, tests)."""
        with self.lock:
            return {"listeners": {f"{m}/{w}": lst.address for (m, w), lst in self.listeners.items()},
                    "meshes": sorted(f"{m}/{w}" for m, w in self.meshes),
                    "rejected": dict(self.rejected), "recent": list(self.recent)}

    # -------------------------------------------------------- mesh set-up
    def listen(self, mesh_id, widx, W, transport, key):
        """Open this worker's endpoint of a mesh; returns its address (for the peers)."""
        with self.lock:
            self.keys[mesh_id] = key
        if transport == "dask":
            return self.worker.address
        if uses_tls(self.worker):
            raise RuntimeError(f"transport {transport!r} would send plaintext on a TLS cluster: use 'dask'")
        lst = Listener(mesh_id, widx, _host_of(self.worker.address), key, range(widx + 1, W), self.reject)
        with self.lock:
            self.listeners[(mesh_id, widx)] = lst
        return lst.address

    def connect(self, mesh_id, widx, addrs, transport, timeout, limits: Limits):
        """(task pinned to this worker) connect to every peer and keep the mesh."""
        W = len(addrs)
        key = self.keys.get(mesh_id)
        if key is None:
            raise _PeerLost(f"no key for mesh {mesh_id[:8]} on this worker (restarted?)")
        if transport == "dask":
            tokens = {j: token_of(key, mesh_id, j) for j in range(W)}
            mesh = _DaskMesh(mesh_id, widx, W, addrs, timeout, limits, tokens, self.worker)
        else:
            with self.lock:
                lst = self.listeners.get((mesh_id, widx))
            if lst is None:
                raise _PeerLost(f"no listener for mesh {mesh_id[:8]} on this worker (restarted?)")
            socks = connect_peers(lst, widx, addrs, timeout)
            cls = _ThreadedTcpMesh if transport == "tcp-threads" else _SelectMesh
            mesh = cls(mesh_id, widx, W, socks, timeout, limits)
        with self.lock:
            self.meshes[(mesh_id, widx)] = mesh
        return widx

    def close_mesh(self, mesh_id) -> int:
        """Close this worker's end of a mesh (unblocks a running search), its listener and shared frontier."""
        with self.lock:
            meshes = [self.meshes.pop(k) for k in [k for k in self.meshes if k[0] == mesh_id]]
            lsts = [self.listeners.pop(k) for k in [k for k in self.listeners if k[0] == mesh_id]]
            self.keys.pop(mesh_id, None)
            sh = self.shms.pop(mesh_id, None)  # numpy views keep a /dev/shm mapping alive while in use
        for m in meshes:
            m.close()
        _close_front(sh)
        for lst in lsts:
            lst.close()
        return len(meshes)

    def drop_mesh(self, mesh_id, widx) -> None:
        """Forget a mesh that failed (the caller closed it)."""
        with self.lock:
            self.meshes.pop((mesh_id, widx), None)

    # --------------------------------------------------- shared frontier
    def shm_open(self, mesh_id, path, gwords, P, create):
        """Create or map the mesh's shared frontier; returns True or the error text."""
        try:
            sh = _ShmFront(path, gwords, P, create)
        except (OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.shms[mesh_id] = sh
        return True

    def claims_open(self, mesh_id, widx, paths, n, dtype, P=0, cap=0):
        """Create this worker's shared claims file (``paths[widx]``) beside the mesh's shared frontier; True or
        the error text."""
        sh = self.shms.get(mesh_id)
        if not isinstance(sh, _ShmFront):
            return "no shared frontier for this mesh on this worker"
        try:
            sh.claims = _ShmClaims(paths[widx], n, dtype, widx, P, cap)
        except (OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return True

    def claims_map(self, mesh_id, paths):
        """Map the peers' claims files read-only; True or the error text."""
        cl = getattr(self.shms.get(mesh_id), "claims", None)
        if cl is None:
            return "no shared claims for this mesh on this worker"
        try:
            cl.map_peers(paths)
        except (OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return True

    def claims_drop(self, mesh_id):
        """Forget the mesh's shared claims (the level loop sends pairs)."""
        sh = self.shms.get(mesh_id)
        if isinstance(sh, _ShmFront):
            sh.claims = None
        return True

    def ipc_alloc(self, mesh_id, sizes, n, dtype, owner):
        """Allocate this worker's share of the mesh's shared device memory
        (:class:`dbfs.bfs.dask.mesh.ipc._DevMesh`); returns its IPC handles or the error text."""
        try:
            sh = _DevMesh(sizes, n, dtype, owner)
        except Exception as exc:           # no CuPy, out of memory, a driver refusing IPC: stage through the host
            return f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.shms[mesh_id] = sh
        return sh.handles

    def ipc_map(self, mesh_id, front, pairs):
        """Map the owner's bitmap buffers and the peers' pair buffers; True or the error text."""
        sh = self.shms.get(mesh_id)
        if sh is None:
            return "no shared device memory allocated for this mesh"
        try:
            sh.map(front, pairs)
        except Exception as exc:           # e.g. two devices without peer access
            return f"{type(exc).__name__}: {exc}"
        return True

    def shm_drop(self, mesh_id):
        """Forget the mapping (numpy views keep it alive while in use)."""
        with self.lock:
            sh = self.shms.pop(mesh_id, None)
        _close_front(sh)
        return True

    # ------------------------------------------------ "dask" transport
    async def on_message(self, mesh=None, src=None, dst=None, token=None, parts=None, **extra):
        """Handler ``dbfs_bsp``: file a frame for mesh ``mesh`` (or refuse it)."""
        m = self.meshes.get((mesh, dst)) if isinstance(mesh, str) and isinstance(dst, int) else None
        if m is None or not isinstance(m, _DaskMesh):
            self.reject("unknown mesh", f"message for mesh {str(mesh)[:8]!r} / worker {dst!r}", src)
            return "refused"
        why = m.deliver(src, token, parts)
        if why:
            self.reject("bad message", why, src)
            return "refused"
        return "OK"


def _close_front(sh) -> None:
    """Unmap a mesh's shared device memory (``_DevMesh``; a /dev/shm frontier goes with its last view)."""
    close = getattr(sh, "close", None)
    if close is not None:
        close()


def _memory_peaks(dask_worker=None) -> dict:
    """(client.run) this worker's peak host RSS and the most device memory in use after a search or a validation
    (None where its CuPy held none)."""
    plugin = dask_worker.plugins.get(NAME) if dask_worker is not None else None
    if plugin is not None:
        plugin.note_device()
    return {"peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_device_bytes": getattr(plugin, "device_peak", 0) or None}


def memory_peaks(client, workers) -> dict:
    """Worker -> :func:`_memory_peaks` of each of ``workers`` (a worker that does not answer is left out)."""
    got = client.run(_memory_peaks, workers=list(workers), on_error="return")
    return {w: v for w, v in got.items() if isinstance(v, dict)}


def get_plugin(dask_worker=None) -> MeshPlugin:
    """This worker's :class:`MeshPlugin` (inside a task when ``dask_worker`` is None)."""
    if dask_worker is None:
        dask_worker = get_worker()
    try:
        return dask_worker.plugins[NAME]
    except KeyError:
        raise _PeerLost(f"worker {dask_worker.address} has no {NAME} plugin (restarted?)") from None


# ------------------------------------------------ entry points (client side calls)
def _mesh_listen(mesh_id, widx_of, transport, key, dask_worker=None):
    """(client.run) open this worker's endpoint of a mesh; returns its address."""
    return get_plugin(dask_worker).listen(mesh_id, widx_of[dask_worker.address], len(widx_of), transport, key)


def _mesh_connect(mesh_id, widx, addrs, transport, timeout, limits):
    """(task pinned to worker ``widx``) connect to the mesh's peers."""
    return get_plugin().connect(mesh_id, widx, addrs, transport, timeout, limits)


def _mesh_close(mesh_id, dask_worker=None):
    """(client.run) close this worker's end of a mesh; unblocks a running search."""
    return get_plugin(dask_worker).close_mesh(mesh_id)


def _shm_open(mesh_id, path, gwords, P, create, dask_worker=None):
    """(client.run) create or map the mesh's shared frontier; returns True or the error text."""
    return get_plugin(dask_worker).shm_open(mesh_id, path, gwords, P, create)


def _claims_open(mesh_id, widx_of, paths, n, dtype, P=0, cap=0, dask_worker=None):
    """(client.run) create this worker's shared claims file (a pairs box of ``cap`` pairs for ``P`` ranks);
    True or the error text."""
    return get_plugin(dask_worker).claims_open(mesh_id, widx_of[dask_worker.address], paths, n, dtype, P, cap)


def _claims_map(mesh_id, paths, dask_worker=None):
    """(client.run) map the peers' shared claims files; True or the error text."""
    return get_plugin(dask_worker).claims_map(mesh_id, paths)


def _claims_drop(mesh_id, dask_worker=None):
    """(client.run) forget the mesh's shared claims."""
    return get_plugin(dask_worker).claims_drop(mesh_id)


def _ipc_alloc(mesh_id, sizes, n, dtype, owner, dask_worker=None):
    """(client.run) allocate this worker's share of the mesh's shared device memory; its IPC handles or the error."""
    return get_plugin(dask_worker).ipc_alloc(mesh_id, sizes, n, dtype, owner)


def _ipc_map(mesh_id, front, pairs, dask_worker=None):
    """(client.run) map the mesh's shared device memory allocated elsewhere; True or the error text."""
    return get_plugin(dask_worker).ipc_map(mesh_id, front, pairs)


def _shm_drop(mesh_id, dask_worker=None):
    """(client.run) forget the mesh's shared frontier."""
    return get_plugin(dask_worker).shm_drop(mesh_id)


def _uses_tls(dask_worker=None) -> bool:
    """(client.run) whether this worker runs on a TLS cluster."""
    return uses_tls(dask_worker)


def _status(dask_worker=None) -> dict:
    """(client.run) :meth:`MeshPlugin.status` of this worker."""
    return get_plugin(dask_worker).status()
