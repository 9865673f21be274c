"""Backend ``dask``: P CSR partitions pinned to Dask workers, BSP levels with
worker-to-worker frontier exchange (:mod:`dbfs.bfs.dask`).

Contract: :class:`dbfs.backends.Backend`. Kernel 1 (:meth:`DaskBackend.csr`)
hands the load a typed result (a stored variant, partitions built on the
workers, or a CSR resident in a GPU worker's memory), which the load opens
as one :class:`dbfs.bfs.dask.search.graphs.PartitionedGraph`; every later step
calls that graph, whichever Kernel 1 made it. Each partition of the stored
variant ``p<P>-<block|cyclic>`` is loaded once onto one worker and kept
there for every search; parents stay on the workers (one future per
partition); validation runs as Dask tasks over the stored edge chunks, so
no N-sized array reaches the client (:func:`dbfs.bfs.dask.validate_distributed`),
or, on a cluster with GPU workers, on those workers, each checking its share
of the input edges for a batch of searches per pass
(:func:`dbfs.bfs.dask.validate_many_distributed`; the batch sized by the
least free device memory after the load, at most :data:`dbfs.validate.gpu.VALIDATE_MOST`);
the search keys are sampled by asking the workers whether the candidates' CSR
rows are empty (:func:`dbfs.bfs.dask.eligible_distributed`), not by a pass
over the edge list.
The timed seconds are measured on the workers from a start barrier to the
last count exchange (Graph500 3.0.1 section 7).

Kernel 1 on the workers: at P > 1 (block partitions, no relabelling,
``--placement block``, no ``--device-memory-limit``), a variant that is not
stored is not written either on a cluster with GPU workers, or when the
disk has no room for it (:func:`dbfs.kernel1.partitioned.disk_need`): each
partition is built from the edges on the worker that searches it
(:func:`dbfs.bfs.dask.build_distributed`; rank ``r`` on GPU worker ``r %
G``, or on worker ``r % W`` of a CPU cluster; with one partition a GPU
worker of one host, all at once as ONE shuffle over NCCL,
:mod:`dbfs.kernel1.shuffle_gpu`), and a lost worker's partitions are
rebuilt on a live one. The GPU workers' CUDA contexts are made before
Kernel 1's clock starts, as a single GPU process has its own before its
Kernel 1.

Kernel 1 in a GPU worker's memory (:mod:`dbfs.bfs.dask.layout.built`): at P = 1 on
a cluster with a GPU worker, when the CSR has no room on disk or in host
memory or ``--relabel degree`` asks for the degree order, the GPU backend's
placed Kernel 1 runs on that worker (as many rows on the device as fit, the
rest in pinned host memory; ``--placement`` picks which end of the row
order stays on the device, as for ``--backend gpu``) and the partition is
searched, validated (several searches per regeneration of a virtual edge
list) and asked for root eligibility there; it is not stored. A Kronecker
graph is generated on a GPU worker when the cluster has one (same bytes).

Failures: every wait (load, search, nedge, validation) is bounded and
reacts to a lost worker within seconds (:mod:`dbfs.bfs.dask.mesh.waits`): the
partitions it held are reloaded on live workers and the step redone
(a search rerun; a validation or nedge after rerunning, untimed, the
search whose parents were lost), each said on stderr and recorded in
``events``; past the retries, one DbfsError naming what was lost.
"""
from __future__ import annotations

import time

from dbfs import kernel1, store
from dbfs.backends import Backend, check_degree_placement, warm
from dbfs.backends.cpu import warm_validation
from dbfs.bfs.dask import ALGORITHMS, build_distributed
from dbfs.bfs.dask.layout.built import build_on_worker, forget, generate_on_worker
from dbfs.bfs.dask.layout.placement import gpu_workers, ready_devices
from dbfs.bfs.dask.mesh.nccl import nccl_switch
from dbfs.bfs.dask.mesh.waits import alive_workers
from dbfs.bfs.dask.search.graphs import OnWorkers, Resident, Stored, open_graph
from dbfs.errors import DbfsError
from dbfs.graph import INT32_VERTICES
from dbfs.kernel1.entry import csr_stores, disk_need
from dbfs.partition import check_partition_count
from dbfs.preflight import check_cluster, check_gpu_ranks, host_available
from dbfs.progress import say
from dbfs.spec import GraphSpec
from dbfs.split import PLACEMENT_ORDER, split_order
from dbfs.store.space import free_bytes
from dbfs.units import human
from dbfs.validate.gpu import VALIDATE_MOST
from dbfs.workers_info import workers_info

__all__ = ["DaskBackend"]


class DaskBackend(Backend):
    name = "dask"
    kernels = "cpu"
    cluster = "always"
    options = frozenset({"partitions", "partitioning", "placement", "device_memory_limit", "relabel"})
    refusals = {
        "energy": "it measures GPU power: add --backend gpu or drop --energy",
    }

    @classmethod
    def check(cls, cfg, given=()) -> None:
        super().check(cfg, given)
        check_degree_placement(cfg, "places degree classes")

    @classmethod
    def algorithms(cls) -> list:
        return list(ALGORITHMS)

    @classmethod
    def default_relabel(cls, cfg, client=None, ds=None):
        """The variant whose Kernel 1 plus 64 searches measured shorter (``benchmarks/relabel_rule.py`` over the
        records, docs/BENCHMARKS.md): the degree-ordered CSR on GPU workers at P = 1 (relabelled and placed in
        the GPU worker's memory, the GPU backend's Kernel 1, where the plain CSR is stored and read back). The
        plain one for CPU workers (their faster searches do not pay for a Kernel 1 two to three times as long)
        and for GPU workers at P > 1 (relabelling each partition within itself adds more to Kernel 1 than it
        saves the searches, though their TEPS are higher: ``--relabel degree``)."""
        if not cls._gpu_workers(client):
            return "none", ("CPU workers search the degree-ordered CSR faster, but its longer Kernel 1 costs more "
                            "than the searches save")
        if cfg.partitioning != "block":
            return "none", "--partitioning cyclic is built on the CPU, not in the GPU workers' memory"
        if cfg.partitions == 1:
            return "degree", "Kernel 1 relabels by degree in the GPU worker's memory; the searches run faster"
        return "none", ("at P > 1 relabelling each partition within itself adds more to Kernel 1 than it saves "
                        "the searches (--relabel degree for their higher TEPS)")

    @classmethod
    def fits_cluster(cls, client, n: int, m: int, scale: int | None = None) -> dict:
        """As the base class, with each worker's memory limit and each GPU worker's device memory (the device
        contexts made now, as Kernel 1 would make them). On a cluster of GPU workers only, a graph of more than
        2**31 vertices (SCALE 32) is refused first, before anything is generated rather than at Kernel 1: the
        kernels take its uint32 entries and int64 ids, but the GPU workers' arrays over all N (claims, the
        validation's tables) are not yet sized to fit a device there."""
        if client is None:
            return {}
        info = workers_info(client)
        gpus = cls._gpu_workers(client)
        if cls._gpus_only(client, gpus) and int(n) > INT32_VERTICES:
            raise DbfsError(f"a dask run on {len(gpus)} GPU worker(s) and no CPU worker of a graph of {int(n)} "
                            f"vertices (more than 2**31): the GPU workers' arrays over all N (claims, validation "
                            f"tables) are not sized to fit a device yet; use --backend cpu or CPU Dask workers")
        host = {w: int(v.get("memory_limit") or 0) for w, v in info.items()}
        device = {w: int(v["total"]) for w, v in ready_devices(client, gpus).items()}
        return check_cluster(n, m, host, device, scale)

    @staticmethod
    def _gpu_workers(client) -> list:
        if client is None:
            return []

        return gpu_workers(client)

    @staticmethod
    def _gpus_only(client, gpus) -> bool:
        """Whether the GPU workers ``gpus`` are every live worker of ``client`` (no CPU worker to fall back on)."""
        return bool(gpus) and len(gpus) == len(alive_workers(client))

    @staticmethod
    def _forget_generated(ds, client) -> None:
        """Drop the device copy of the edges a GPU worker kept for a Kernel 1 that will not run there."""
        if "generated_on" in ds.memo:
            forget(client, ds)

    @classmethod
    def dataset(cls, target, root_dir, client=None, quiet=False):
        """As the base class; a Kronecker graph not yet stored is generated on a GPU worker when the
        cluster has one (the GPU generator: same bytes, and a virtual list's checksum in seconds). On a cluster
        of GPU workers only, a stored Kronecker list is reused without a CRC scan of its chunk files, as
        ``--backend gpu`` reuses it: the workers regenerate it on their devices wherever they read it (Kernel 1,
        validation), and a chunk file read anyway (a CPU Kernel 1 of a ``--relabel none`` P = 1 variant) is
        checked as it is read."""
        gpus = cls._gpu_workers(client) if isinstance(target, GraphSpec) and target.kind == "kronecker" else []
        if not gpus:
            return super().dataset(target, root_dir, client, quiet)
        if store.stored(target, root_dir) is not None:
            return super().dataset(target, root_dir, client, quiet, scan=not cls._gpus_only(client, gpus))

        say(f"generating {target.name} on GPU worker {gpus[0]}", quiet)
        return generate_on_worker(client, target, store.datasets_root(root_dir), gpus[0], quiet)

    @classmethod
    def _on_workers(cls, ds, cfg, client, why: str):
        """(P > 1) the partitions built from the edges on the workers that search them (module docstring)."""
        note = f"{why}: Kernel 1 builds its {cfg.partitions} partitions on the workers that search them, not stored" + \
            (", each relabelled by degree within itself" if cfg.relabel == "degree" else "")
        say(note, cfg.quiet)
        t0 = time.perf_counter()
        dg = build_distributed(client, ds.path, cfg.partitions, dedupe=cfg.dedupe, relabel=cfg.relabel)
        return OnWorkers(dg), {"construction_time": time.perf_counter() - t0, "in_memory": True,
                               "nnz": dg.nnz_total, "note": note}

    @classmethod
    def _why_on_workers(cls, ds, cfg, client) -> str:
        """Why a P > 1 block variant that is not stored is built on the workers ('' = build it in zarr): the
        cluster has GPU workers (their GPU Kernel 1, no CPU pass over zarr), or the disk has no room for it."""
        if cls._gpu_workers(client):
            return f"{ds.name} on GPU workers"
        need, free = disk_need(ds.n_vertices, ds.n_edges, cfg.partitions), free_bytes(ds.path)
        return (f"no room on disk for CSR variant p{cfg.partitions}-block of {ds.name} (up to {human(need)}, "
                f"{human(free)} free)") if need > free else ""

    @classmethod
    def csr(cls, ds, cfg, client=None):
        """As the base class, or Kernel 1 on the workers or in a GPU worker's memory (module docstring); more
        partitions than the graph's vertices allow are refused first (:func:`dbfs.partition.check_partition_count`).
        Returns Kernel 1's typed result for :meth:`load` (:mod:`dbfs.bfs.dask.search.graphs`: :class:`Stored`,
        :class:`OnWorkers` or :class:`Resident`; ``str()`` of each is the variant's name) and its attributes."""
        check_partition_count(cfg.partitions, ds.n_vertices)
        all_gpus = cls._gpu_workers(client)
        free = {w: int(v["free"]) for w, v in ready_devices(client, all_gpus).items()}
        #  (the workers' CUDA contexts made before Kernel 1's clock)
        within = cfg.relabel == "degree" and bool(all_gpus)     # each partition relabelled in itself
        why = cls._why_on_workers(ds, cfg, client) if cfg.partitions > 1 and cfg.partitioning == "block" and \
            (cfg.relabel == "none" or within) and cfg.placement == "block" and cfg.device_memory_limit is None and \
            kernel1.reusable_variant(ds.path, cfg.partitions, "block", cfg.dedupe, cfg.relabel) is None else ""
        if why:
            if free:        # refused in one line before Kernel 1 when it cannot fit (one rank a GPU worker, built
                #               as one shuffle over NCCL: a rank past its device split with pinned host memory)
                shuffled = cfg.partitions == len(free) and cls._gpus_only(client, list(free)) and not nccl_switch()
                fit = check_gpu_ranks(ds.n_vertices, ds.n_edges, cfg.partitions, free, ds.scale,
                                      host_available() if shuffled else None)
                if fit.get("host"):
                    say(f"{ds.name} in {cfg.partitions} partitions: each rank past its GPU's memory keeps its row "
                        f"starts and part of its rows on the device, the rest in pinned host memory (about "
                        f"{human(fit['host'])} together)", cfg.quiet)
            cls._forget_generated(ds, client)
            return cls._on_workers(ds, cfg, client, why)
        gpus = all_gpus if cfg.partitions == 1 and cfg.partitioning == "block" else []
        if not gpus or kernel1.reusable_variant(ds.path, 1, "block", cfg.dedupe, cfg.relabel) is not None or \
                (cfg.relabel == "none" and csr_stores(ds)):
            cls._forget_generated(ds, client)
            variant, attrs = super().csr(ds, cfg, client)
            return Stored(variant), attrs
        if cfg.placement not in PLACEMENT_ORDER:
            raise DbfsError(f"--placement {cfg.placement} does not apply to a CSR built in a GPU worker's memory "
                            f"(--partitions 1): it splits the rows between device and host memory; use block, "
                            f"degree or degree-low")

        say(f"Kernel 1 of {ds.name} runs in GPU worker {gpus[0]}'s memory (not stored: "
            f"{'relabelled on the GPU' if cfg.relabel != 'none' else 'no room on disk or in host memory'})",
            cfg.quiet)
        fut, info = build_on_worker(client, ds, gpus[0], dedupe=cfg.dedupe, relabel=cfg.relabel,
                                    order=split_order(cfg.placement, cfg.relabel),
                                    device_limit=cfg.device_memory_limit, quiet=cfg.quiet)
        say(info["k1"]["note"], cfg.quiet)
        return Resident(fut, gpus[0], info), {**info["k1"], "in_memory": True}

    def load(self, ds, built):
        """Open what Kernel 1 handed over (:meth:`csr`: a stored variant, partitions on the workers or the CSR
        resident in a GPU worker's memory; a variant name is a stored one) as one
        :class:`~dbfs.bfs.dask.search.graphs.PartitionedGraph`, which every later step calls."""
        if self.client is None:
            raise DbfsError("--backend dask needs a Dask cluster: drop --scheduler threads")
        self.ds, self.held, self.result = ds, [], None
        self.pg = open_graph(self.client, ds.path, built, placement=self.cfg.placement,
                             device_memory_limit=self.cfg.device_memory_limit, validate_most=VALIDATE_MOST)
        self.validate_batch = self.pg.validate_batch
        if self.pg.gpus:                # every search validated on the GPU workers, a batch per pass
            how = "whole searches against every input edge" if self.pg.dg.validate_by == "search" else \
                f"1/{len(self.pg.gpus)} of the input edges"
            say(f"validation on {len(self.pg.gpus)} GPU worker(s), each checking {how}, {self.validate_batch} "
                f"search(es) per pass", self.cfg.quiet)
        for w in self.pg.workers_table():
            if w["kind"] == "gpu":
                pinned = sum(int(x["host_bytes"]) for x in w.get("split", []))
                say(f"GPU worker {w['worker']}: partition(s) {w['partitions']} in device memory "
                    f"({human(w['device_bytes'])}" + (f"; {human(pinned)} of their rows in pinned host memory, "
                                                      f"{w['split'][0]['order']} on the device" if pinned else "")
                    + ")", self.cfg.quiet)
            if w.get("kernel1_seconds"):
                split = ", ".join(f"{k} {v:.1f} s" for k, v in w["kernel1_seconds"].items())
                say(f"GPU worker {w['worker']}: Kernel 1 in {w['build_ranges']} range(s): {split}", self.cfg.quiet)
        self.load_time = self.pg.load_time
        self._say_events(self.pg.events, f"the load of {built}")
        return self.load_time

    @property
    def dg(self):
        """The DistributedGraph under the partitioned graph (its workers, for inspection)."""
        return self.pg.dg

    def warm(self):
        """The validation's kernels loaded on every worker before the first search (the searches' are
        loaded there by the load); none where the searches are validated on GPU devices (CuPy's kernels,
        none of the CPU validator's Numba ones to load)."""
        if self.pg.validates_on_devices:
            self.compile_time = 0.0
        else:
            self.compile_time = warm("validation", self.client, self.cfg.quiet, warm_validation,
                                     self.ds.edges().dtype)
        return self.compile_time

    @property
    def events(self):
        return list(self.pg.events) if hasattr(self, "pg") else []

    @events.setter
    def events(self, _):
        pass

    def search(self, root):
        return self.search_many([root])[0][0]

    def search_many(self, roots):
        """The searches from ``roots`` as one batch on the workers (one task a worker, one round trip)."""
        if self.result is not None and not any(r is self.result for r in self.held):
            self.result.release()       # (validated already, or never held): its parents go now
        got = self.pg.search_many([int(r) for r in roots], algorithm=self.cfg.algorithm, stats=True,
                                  **self.cfg.opts)
        for res, _, _ in got:
            if self.pg.batched:         # the last validate_batch searches' parents stay on the workers
                self.held.append(res)
                while len(self.held) > self.validate_batch:
                    self.held.pop(0).release()
            elif res is not got[-1][0]:
                res.release()
        self.result, _, self.level_stats = got[-1]
        self._say_events(got[0][0].events, f"the search from root {int(roots[0])}" if len(roots) == 1 else
                         "the searches from roots " + ", ".join(str(int(r)) for r in roots))
        return [(seconds, rec) for _, seconds, rec in got]

    def _say_events(self, events, during) -> None:
        for ev in events:
            if ev.get("event") != "worker-lost":
                continue
            redo = "search rerun (untimed), step redone" if ev.get("stage") == "validation" else "search rerun"
            why = f" ({'; '.join(ev['nanny'])})" if ev.get("nanny") else ""
            say(f"worker {', '.join(ev['workers_lost']) or '?'} lost during {during}{why}: partition(s) "
                f"{ev['ranks_reloaded']} reloaded on live workers in {ev['reload_time']:.1f} s, {redo}",
                self.cfg.quiet)

    def _saying_events(self, results, step, during):
        """``step()``, then the worker losses it survived (searches rerun, untimed) said for each of
        ``results`` (``during``: what was running, ``{root}`` filled per result)."""
        seen = [len(r.events) for r in results]
        try:
            return step()
        finally:
            for r, k in zip(results, seen):
                self._say_events(r.events[k:], during.format(root=r.root))

    def eligible(self):
        return self.pg.eligible      # rows on the workers (or the GPU worker holding the CSR), no edge pass

    def validate(self, root):
        if self.pg.batched:
            return self.validate_many([root])[0]
        return self._saying_events([self.result], lambda: self.pg.validate_many([self.result])[0],
                                   f"the validation of root {root}")

    def validate_many(self, roots):
        """The last ``len(roots)`` searches validated together: on the worker of a CSR built there, else on
        the GPU workers (each checking its share of the input edges)."""
        held, self.held = self.held[-len(roots):], []
        assert [r.root for r in held] == [int(r) for r in roots], "validate_many: not the last searches"
        try:
            return self._saying_events(held, lambda: self.pg.validate_many(held), "the validation of root {root}")
        finally:
            for r in held:
                if r is not self.result:
                    r.release()

    def nedge(self, root):
        return int(self._saying_events([self.result], lambda: self.pg.nedge(self.result),
                                       f"the nedge count of root {root}"))

    def parents(self):
        return self.pg.parents(self.result)

    def describe(self) -> dict:
        """Per worker: kind (cpu/gpu), partitions, device and host bytes; the placement policy;
        how frontiers cross workers (and, for a CSR built in a GPU worker's memory, its device/host split
        as --backend gpu reports it)."""
        return self.pg.describe() if hasattr(self, "pg") else {}

    def close(self):
        for r in getattr(self, "held", []):
            r.release()
        if getattr(self, "result", None) is not None:
            self.result.release()
        if hasattr(self, "pg"):
            self.pg.close()
