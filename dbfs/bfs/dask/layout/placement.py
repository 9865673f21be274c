"""Where a distributed graph lives: partitions pinned to Dask workers.

Contract
--------
:class:`DistributedGraph` records a partitioned CSR variant loaded onto
workers: rank ``r`` lives on worker ``rank_worker[r]`` as one future
(``part_futures[r]``) pinned with ``workers=[w], allow_other_workers=False``
(cuGraph's pattern), and keeps the exchange mesh those workers share
(``mesh_id``, ``mesh_workers``: the distinct workers in rank order, the
mesh index of a worker is its position there). :func:`_submit_loads` loads
partitions onto their workers (read from the variant, or with ``source =
"edges"`` built from the dataset's edges there, for CPU workers as one
shuffle that reads every edge chunk once: :func:`_submit_shuffle`; for one
rank a GPU worker of one host as one shuffle over NCCL, hub tables
included: :func:`_submit_gpu_shuffle`) and gives them the
whole-graph data they need (hub neighbours by GLOBAL degree: every partition's degrees are joined on a
worker and copied worker to worker); it runs at load time and after a lost
worker (:mod:`dbfs.bfs.dask.layout.recovery`). Its wait is bounded and watches the
partitions' workers (:func:`dbfs.bfs.dask.mesh.waits.gather_watched`): a lost one
raises :class:`dbfs.bfs.dask.mesh.waits.WorkerLost`.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dbfs.bfs.dask.layout.gpu_part import _device_info, mesh_room, worker_bytes
from dbfs.bfs.dask.mesh import DEFAULT_TIMEOUT, RUN_TIMEOUT, _close_mesh, _raise_lost, ensure_plugin
from dbfs.bfs.dask.mesh.nccl import holds_parents, join_nccl, nccl_switch
from dbfs.bfs.dask.mesh.plugin import _shm_drop
from dbfs.bfs.dask.mesh.transport import _host_of
from dbfs.bfs.dask.mesh.waits import alive_workers, gather_watched, run_within
from dbfs.bfs.dask.layout.worker import _build_part, _global_degrees, _load_part, _local_degrees, _part_info, _prepare_part
from dbfs.bfs.dask.layout.worker import _gpu_shuffle_part
from dbfs.bfs.dask.layout.worker import _shuffle_build
from dbfs.errors import DbfsError
from dbfs.graph import id_dtype
from dbfs.kernel1.on_workers import K1_DEVICE_SHARE, shuffle_piece, shuffle_read
from dbfs.partition import Partitioning
from dbfs.workers_info import workers_info
from dbfs.zattrs import read_attrs

__all__ = ["DistributedGraph", "_submit_loads", "_variant_attrs", "worker_kinds", "gpu_workers", "gpu_budgets",
           "ready_devices"]

#: share of a GPU worker's free device memory partitions may take when no --device-memory-limit is given
DEVICE_SHARE = 0.85


@dataclass
class DistributedGraph:
    """A partitioned CSR variant pinned on Dask workers (see :func:`dbfs.bfs.dask.load_distributed`).

    ``transport`` is the transport the mesh actually uses (a TLS cluster
    turns ``"tcp"`` into ``"dask"``: ``transport_requested`` keeps the
    asked one and ``events`` says why).
    """

    client: object
    dataset_path: Path
    variant: str
    partitioning: Partitioning
    nnz_total: int
    rank_worker: dict                       # rank -> worker address (stable)
    part_futures: dict                      # rank -> Future of the worker-side partition
    transport: str = "tcp"
    timeout: float = DEFAULT_TIMEOUT
    mesh_id: str = ""
    mesh_workers: list = field(default_factory=list)
    load_time: float = 0.0                  # wall seconds of the whole load (client view)
    part_load_times: dict = field(default_factory=dict)   # rank -> seconds on its worker (read, check, hub)
    mesh_time: float = 0.0
    shared_memory: bool | None = None       # None: shared frontier when possible; False: never
    shm: str = ""                           # why the shared frontier is off ('' = on)
    shm_claims: str = ""                    # why a large top-down level's claims are not shared ('' = on)
    events: list = field(default_factory=list)
    attrs: dict = field(default_factory=dict)
    transport_requested: str = ""           # the transport asked for ('' = same as transport)
    placement: str = "block"                # the policy that chose rank_worker (dbfs.bfs.dask.layout.assign)
    rank_kind: dict = field(default_factory=dict)      # rank -> "gpu" | "cpu"
    worker_kinds: dict = field(default_factory=dict)   # worker address -> "gpu" | "cpu" (live at load)
    budgets: dict = field(default_factory=dict)        # GPU worker -> device bytes for partitions
    device_memory_limit: int | None = None             # --device-memory-limit (None: a share of the free memory)
    perm_f: object = None                   # a relabelled variant's perm[new] = original, on one worker
    roots_of: object = None                 # original roots -> the ids their searches start at (None: perm_f or
    #                                         themselves), one round trip for a batch
    part_bytes: list = field(default_factory=list)     # rank -> device bytes if held by a GPU worker
    part_info: dict = field(default_factory=dict)      # rank -> the worker's info of its partition
    built: str = ""                         # where Kernel 1 built the partitions in memory ('' = read from zarr)
    source: str = "zarr"                    # "zarr": read from the variant; "edges": built from the dataset's edges
    dedupe: bool = True                     # ("edges") the build's dedupe, for rebuilds after a lost worker
    relabel: str = "none"                   # ("edges") "degree": each partition relabelled within itself
    level_exchange: str = ""                # "nccl": a level's exchanges are NCCL collectives ('' = the mesh)
    nccl_off: str = ""                      # why a mesh of GPU workers does not use NCCL ('' = on or not tried)
    load_steps: dict = field(default_factory=dict)     # wall seconds of the load's steps (client view)
    keep_bytes: int = 0                     # device bytes a GPU worker may keep its share of the input rows in
    validate_by: str = "edges"              # (over NCCL) "search": each GPU worker validates whole searches

    @property
    def P(self) -> int:
        return self.partitioning.P

    @property
    def n_vertices(self) -> int:
        return self.partitioning.n_vertices

    @property
    def has_gpu(self) -> bool:
        return any(k == "gpu" for k in self.rank_kind.values())

    @property
    def frontier_sharing(self) -> str:
        """How bitmap frontiers cross workers: ``nccl`` (collectives between the GPU workers),
        ``cuda-ipc`` (a device buffer shared by the GPU workers), ``dev-shm`` (a host mapping
        shared by the CPU workers) or ``mesh: <why not>``."""
        if self.level_exchange == "nccl":
            return "nccl"
        if self.shm:
            return f"mesh: {self.shm}"
        return "cuda-ipc" if self.has_gpu else "dev-shm"

    @property
    def parents_held(self) -> str:
        """Where a search's parents stay on the GPU workers' devices, which says how they are validated:
        ``"mesh"`` (the levels exchanged by NCCL, mesh worker i holding rank i alone: validated over the
        communicator; :func:`dbfs.bfs.dask.mesh.nccl.holds_parents`, the workers ask the same), ``"worker"`` (a
        mesh of one GPU worker holding every rank: validated there; its search asks the same of its
        ``ranks_of``), or ``""`` (they go to the host)."""
        if self.level_exchange == "nccl":
            return "mesh" if holds_parents(self.ranks_of()) else ""
        return "worker" if len(self.mesh_workers) == 1 and self.has_gpu else ""

    @property
    def parents_on_device(self) -> bool:
        """Whether a search's parents stay on the devices (:attr:`parents_held`)."""
        return bool(self.parents_held)

    def held_parent_bytes(self) -> int:
        """Device bytes of one search's parents on the worker holding the most of them (0 where they go to the
        host: :attr:`parents_on_device`)."""
        if not self.parents_on_device:
            return 0
        counts = self.partitioning.counts()
        return max(sum(int(counts[rk]) for rk in rks) for rks in self.ranks_of()) * \
            np.dtype(id_dtype(self.n_vertices)).itemsize

    def workers_table(self) -> list:
        """Per mesh worker: address, kind, ranks, device and host bytes of its partitions, the seconds
        its partitions took to read (or build) and to prepare (hub table, degrees) on that worker, and the
        edge rows its Kernel 1 read (0 for a stored variant); a GPU shuffle's also its ranges (passes) and
        the seconds of each of its phases, and ``split``: each rank it split between the device and pinned host
        memory (:meth:`dbfs.split.Split.report`)."""
        out = []
        for w, ranks in zip(self.mesh_workers, self.ranks_of()):
            infos = [self.part_info.get(rk, {}) for rk in ranks]
            out.append({"worker": w, "kind": self.worker_kinds.get(w, "cpu"), "partitions": ranks,
                        "device_bytes": sum(int(i.get("device_bytes", 0)) for i in infos),
                        "host_bytes": sum(int(i.get("host_bytes", 0)) for i in infos),
                        "read_s": sum(float(i.get("load_time") or 0.0) for i in infos),
                        "prepare_s": sum(float(i.get("prepare_time") or 0.0) for i in infos),
                        "edge_rows_read": sum(int(i.get("edge_rows_read") or 0) for i in infos)})
            splits = [i["split"] for i in infos if i.get("split")]
            if splits:          # ranks split between the device and pinned host memory (dbfs.split's report)
                out[-1]["split"] = splits
            phases = [i["kernel1_seconds"] for i in infos if i.get("kernel1_seconds")]
            if phases:          # a GPU shuffle's build: its ranges and where its seconds went on this worker
                out[-1]["build_ranges"] = max(int(i.get("build_ranges") or 0) for i in infos)
                out[-1]["kernel1_seconds"] = {k: round(sum(ph.get(k, 0.0) for ph in phases), 3)
                                              for k in phases[0]}
        return out

    def ranks_of(self) -> list:
        """Ranks held by each mesh worker, in mesh order."""
        return [[rk for rk in range(self.P) if self.rank_worker[rk] == w] for w in self.mesh_workers]

    def close(self) -> None:
        """Close the mesh and release the partitions."""
        _close_mesh(self)
        self.part_futures.clear()
        self.perm_f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _variant_attrs(dataset_path: Path, variant: str) -> dict:
    """The attributes of a complete CSR variant, or DbfsError naming the build command."""
    attrs = read_attrs(dataset_path / "csr" / variant) or {}
    if not attrs.get("complete"):
        raise DbfsError(f"CSR variant {variant} of {dataset_path.name} is missing or incomplete: build it with "
                        f"`dbfs build {dataset_path.name} --partitions P` (see `dbfs build --help`)")
    return attrs


def worker_kinds(client, workers) -> dict:
    """Worker address -> "gpu" (it declares the Dask resource ``GPU``) or "cpu"."""
    info = workers_info(client)
    return {w: "gpu" if float((info.get(w, {}).get("resources") or {}).get("GPU", 0)) > 0 else "cpu"
            for w in workers}


def gpu_workers(client) -> list:
    """The live workers that declare the Dask resource ``GPU``, sorted."""
    return sorted(w for w, k in worker_kinds(client, sorted(alive_workers(client))).items() if k == "gpu")


def ready_devices(client, gpus) -> dict:
    """Each GPU worker's device context made (CuPy loaded, the CUDA context created: what a process pays once
    before its first device call) and its memory: worker -> :func:`dbfs.bfs.dask.layout.gpu_part._device_info`."""
    if not gpus:
        return {}
    res = run_within(client, _device_info, workers=list(gpus), timeout=RUN_TIMEOUT,
                     what="asking the GPU workers' memory")
    _raise_lost(res, "asking the GPU workers' memory")
    return res


def gpu_budgets(client, kinds: dict, n: int, limit=None) -> dict:
    """GPU worker -> device bytes its partitions may take: ``limit`` (or DEVICE_SHARE of the
    free device memory, asked on the worker) less what the worker needs once per graph."""
    gpus = sorted(w for w, k in kinds.items() if k == "gpu")
    if not gpus:
        return {}
    if limit is not None:
        return {w: max(0, int(limit) - worker_bytes(n)) for w in gpus}
    res = ready_devices(client, gpus)
    return {w: max(0, int(DEVICE_SHARE * res[w]["free"]) - worker_bytes(n)) for w in gpus}


def _submit_shuffle(dg: DistributedGraph, ranks, pin: dict) -> dict:
    """(``source = "edges"``) Kernel 1 of the CPU ranks among ``ranks`` as one shuffle
    (:mod:`dbfs.kernel1.shuffle`): one reader per distinct worker of those ranks, pinned there, reads its 1/G of
    the edge chunks once and buckets both directions by owner rank (:func:`dbfs.kernel1.on_workers.shuffle_read`);
    each rank's build, on its worker, takes its piece of every reader (Dask moves them) and builds its rows
    (:func:`dbfs.bfs.dask.layout.worker._shuffle_build`). Rank -> future of its partition; GPU ranks are left to
    :func:`dbfs.bfs.dask.layout.worker._build_part` (and a stored variant's to ``_load_part``): ``{}``."""
    if dg.source != "edges":
        return {}
    cpu = [rk for rk in ranks if dg.rank_kind.get(rk) != "gpu"]
    if not cpu:
        return {}
    client, path, tag = dg.client, str(dg.dataset_path), uuid.uuid4().hex[:12]
    readers = list(dict.fromkeys(dg.rank_worker[rk] for rk in cpu))     # distinct workers, in rank order
    reads = [client.submit(shuffle_read, path, dg.P, cpu, g, len(readers), workers=[w],
                           key=f"dbfs-k1-read-{tag}-{g}", **pin) for g, w in enumerate(readers)]
    first = {}                                   # the first rank built on each reader's worker reports its reads
    for rk in cpu:
        first.setdefault(dg.rank_worker[rk], rk)
    out = {}
    for rk in cpu:
        got = [client.submit(shuffle_piece, f, rk, workers=[w], key=f"dbfs-k1-piece-{tag}-{g}-{rk}", **pin)
               for g, (f, w) in enumerate(zip(reads, readers))]
        credit = readers.index(dg.rank_worker[rk]) if first[dg.rank_worker[rk]] == rk else -1
        out[rk] = client.submit(_shuffle_build, path, dg.P, rk, dg.dedupe, credit, *got,
                                workers=[dg.rank_worker[rk]], key=f"dbfs-part-{tag}-{rk}", **pin)
    return out


def _gpu_shuffle_why(dg: DistributedGraph, ranks) -> str:
    """Why partitions ``ranks`` are not built as one GPU shuffle ('' = they are): it builds ALL the ranks from the
    edges, one a GPU worker, every worker on one host (NCCL over loopback), NCCL not switched off."""
    if dg.source != "edges" or dg.P < 2:
        return "not built from the edges" if dg.source != "edges" else "one partition"
    if sorted(ranks) != list(range(dg.P)):
        return "a rebuild of some partitions (a shuffle needs every rank)"
    ws = [dg.rank_worker[rk] for rk in range(dg.P)]
    if any(dg.rank_kind.get(rk) != "gpu" for rk in range(dg.P)) or len(set(ws)) < dg.P:
        return "not one partition a GPU worker"
    if len({_host_of(w) for w in ws}) > 1:
        return "GPU workers on several hosts"
    return nccl_switch()


def _submit_gpu_shuffle(dg: DistributedGraph, ranks, pin: dict):
    """(``source = "edges"``, every rank on its own GPU worker of one host) Kernel 1 as ONE shuffle over NCCL
    (:mod:`dbfs.kernel1.shuffle_gpu`): a communicator set up through Dask for the build, then one task per
    worker, all at once (:func:`dbfs.bfs.dask.layout.worker._gpu_shuffle_part`), each returning its rank
    prepared (hub table built there). ``(rank -> future, key)``; ``({}, "")`` where it does not apply or NCCL
    cannot be set up (``dg.events`` says why), and the ranks are built one by one instead."""
    why = _gpu_shuffle_why(dg, ranks)
    if why:
        return {}, ""
    t0 = time.perf_counter()
    client, ws = dg.client, [dg.rank_worker[rk] for rk in range(dg.P)]
    ensure_plugin(client)                  # the communicator is kept in the worker plugin (the mesh's, later)
    info = ready_devices(client, ws)
    free = min(int(info[w]["free"]) for w in ws)
    budget = int(K1_DEVICE_SHARE * free)
    rows = max(len(dg.partitioning.vertex_range(rk)) for rk in range(dg.P))
    room = mesh_room(free, dg.n_vertices, rows, dg.relabel)       # past it a rank is split with pinned host memory
    key = f"dbfs-k1-{uuid.uuid4().hex[:12]}"
    why = join_nccl(client, ws, key, RUN_TIMEOUT, dg.timeout)
    if why:
        _drop_comm(client, ws, key)
        dg.events.append({"event": "kernel1", "shuffle": False, "reason": why})
        return {}, ""
    dg.load_steps["kernel1_nccl"] = time.perf_counter() - t0
    futs = {rk: client.submit(_gpu_shuffle_part, str(dg.dataset_path), dg.P, rk, dg.dedupe, dg.relabel, key, budget,
                              ws[rk], room, workers=[ws[rk]], key=f"dbfs-part-{key}-{rk}", **pin)
            for rk in range(dg.P)}
    return futs, key


def _drop_comm(client, ws, key: str) -> None:
    """Abort Kernel 1's communicator on every worker still holding it (a build blocked on a lost peer returns)."""
    if key:
        try:
            run_within(client, _shm_drop, key, workers=ws, timeout=RUN_TIMEOUT, what="dropping Kernel 1's NCCL")
        except DbfsError:
            pass


def _submit_loads(dg: DistributedGraph, ranks) -> None:
    """Load partitions ``ranks`` onto their workers, then give them the
    whole-graph data they need (hub neighbours by global degree: every
    partition's degrees are joined on a worker and copied worker to worker).
    Raises WorkerLost when one of the graph's workers is lost meanwhile."""
    if not ranks:
        return
    client = dg.client
    pin = {"allow_other_workers": False, "pure": False}
    prepared, key = _submit_gpu_shuffle(dg, ranks, pin)   # built on GPU workers as one shuffle, hubs included
    try:
        _submit_rest(dg, ranks, pin, prepared)
    finally:
        _drop_comm(client, sorted(set(dg.rank_worker.values())), key)


def _submit_rest(dg: DistributedGraph, ranks, pin: dict, prepared: dict) -> None:
    """:func:`_submit_loads` for the ranks not in ``prepared`` (loaded or built, then prepared), and the wait."""
    client = dg.client
    loaded = _submit_shuffle(dg, ranks, pin)          # built from the edges on CPU workers: one shuffle
    loaded.update(prepared)
    for rk in (r for r in ranks if r not in loaded):   # a GPU worker reads a stored partition into device memory
        gpu = dg.rank_kind.get(rk) == "gpu"
        how = (_load_part, str(dg.dataset_path), dg.variant, rk, gpu, dg.rank_worker[rk]) if dg.source == "zarr" \
            else (_build_part, str(dg.dataset_path), dg.P, rk, dg.dedupe, gpu, dg.rank_worker[rk], dg.relabel)
        loaded[rk] = client.submit(*how, workers=[dg.rank_worker[rk]], key=f"dbfs-part-{uuid.uuid4().hex[:12]}-{rk}",
                                   **pin)
    allp = {**dg.part_futures, **loaded}
    need = [rk for rk in ranks if rk not in prepared]
    degs = [client.submit(_local_degrees, allp[rk], workers=[dg.rank_worker[rk]], **pin)
            for rk in range(dg.P)] if need else []
    deg = client.submit(_global_degrees, dg.partitioning, *degs, pure=False) if need else None
    for rk in ranks:
        w = dg.rank_worker[rk]
        gpu = dg.rank_kind.get(rk) == "gpu"
        # (a GPU rank's partition is in device memory already, read or built there: its hub is built there)
        dg.part_futures[rk] = prepared[rk] if rk in prepared else \
            client.submit(_prepare_part, loaded[rk], deg, gpu, workers=[w],
                          key=f"dbfs-prepared-{uuid.uuid4().hex[:12]}-{rk}", **pin)
    infos = gather_watched(client, [client.submit(_part_info, dg.part_futures[rk], workers=[dg.rank_worker[rk]],
                                                  **pin) for rk in ranks],
                           set(dg.rank_worker.values()), f"the load of partition(s) {list(ranks)} of {dg.variant}",
                           dg.timeout)
    del degs, deg, loaded
    for rk, info in zip(ranks, infos):
        dg.part_load_times[rk] = info["load_time"] + info["prepare_time"]
        dg.part_info[rk] = info
