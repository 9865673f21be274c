"""Backend ``gpu``: one CUDA GPU in this process (CuPy kernels, :mod:`dbfs.bfs.gpu`).

Contract: :class:`dbfs.backends.Backend`. The whole pipeline stays on the
device where it fits: a Kronecker graph is generated there (same bytes as
the CPU generator; stored, or virtual when the disk has no room), Kernel 1
builds the one-partition CSR there (same bytes as the CPU build): in one
pass from the device copy of the edges, in passes when that does not fit
(stored either way), or, when the CSR has no room on disk or in host memory
or ``--relabel degree`` asks for the degree order, in passes straight into
the searches' placement, kept in memory for the run and said so
(:func:`dbfs.kernel1.build_placed.build_placed`): as many whole rows of one end of the
row order as fit on the device (``--placement``, :func:`dbfs.split.split_order`:
``degree`` the hubs, ``degree-low`` the low-degree tail of a degree-ordered
CSR, ``block`` the first rows of scrambled ids and the low-degree tail of a
degree-ordered CSR), the rest in pinned host memory read zero-copy. The
searches read that CSR without a reload; every search is validated on the
device against the INPUT edges (:mod:`dbfs.validate.gpu`; a virtual list is
regenerated there chunk by chunk, and the chunks stay on the device for the
next batches as far as the memory the batch model leaves allows,
:class:`dbfs.validate.gpu.KeptRows`; a relabelled search's parents are mapped
to original ids on the device first). Timing: the device is synchronised
before each clock read; parents are copied to the host only when asked
(``parents()``). ``energy``: GPU power through NVML over back-to-back
searches after the timed ones (GreenGraph500's MTEPS/W). The JSON gets the
adjacency's device/host split and the peak device memory and host RSS
(:meth:`GpuBackend.describe`).
"""
from __future__ import annotations

import resource
import time

import numpy as np

from dbfs import kernel1, store
from dbfs.backends import Backend, check_split_placement, kernel1_warm
from dbfs.energy import PowerMeter, mteps_per_watt
from dbfs.kernel1.entry import Kernel1Options, kernel1_gpu
from dbfs.progress import say
from dbfs.report.stats import teps_stats
from dbfs.roots import eligible, eligible_gpu
from dbfs.spec import GraphSpec
from dbfs.split import split_order
from dbfs.store.gpu import DeviceRows, _free_device_bytes, search_edges
from dbfs.validate.gpu import KeptRows, batch_size, keep_budget, validate_gpu, validate_many_gpu

__all__ = ["GpuBackend", "ENERGY_MIN_SECONDS"]

ENERGY_MIN_SECONDS = 2.0
#: the kernel table of :mod:`dbfs.bfs.gpu` (listed without importing CuPy; a GPU test checks they agree)
GPU_ALGORITHMS = ("harish", "td", "bu", "do")


class GpuBackend(Backend):
    name = "gpu"
    kernels = "gpu"
    cluster = "never"
    options = frozenset({"relabel", "partitioning", "device_memory_limit", "energy", "placement"})
    refusals = {
        "partitions": "it searches one partition on one GPU: use --backend dask for P > 1",
    }

    @classmethod
    def unavailable(cls):
        try:
            import cupy  # deferred: cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "no CUDA GPU is visible (pip install -e '.[gpu]' on a machine with one)"
        except ImportError:
            return "needs cupy and a CUDA GPU: pip install -e '.[gpu]'"
        except Exception as e:   # CUDA driver/runtime errors: cupy's exception types vary
            return f"needs a CUDA GPU ({type(e).__name__}: {e})"
        return None

    @classmethod
    def algorithms(cls) -> list:
        return list(GPU_ALGORITHMS)

    @classmethod
    def default_relabel(cls, cfg, client=None, ds=None):
        """The degree-ordered CSR, relabelled on the device inside Kernel 1 (timed there) and kept there: its
        searches measured well above the plain CSR's TEPS and MTEPS/W, and its Kernel 1 shorter than the
        plain one's, which stores the CSR (docs/BENCHMARKS.md). Only for block ownership, the path measured."""
        if cfg.partitioning != "block":
            return "none", "--partitioning cyclic is built on the CPU, where relabelling does not pay"
        return "degree", "Kernel 1 relabels by degree on the GPU (timed in it); the searches run faster"

    @classmethod
    def check(cls, cfg, given=()):
        super().check(cfg, given)
        check_split_placement(cfg, "gpu", "one GPU")
        if cfg.energy:   # NVML missing: fail now, not after generation and Kernel 1
            PowerMeter().close()

    @classmethod
    def dataset(cls, target, root_dir, client=None, quiet=False):
        if isinstance(target, GraphSpec):
            gen = "gpu" if target.kind == "kronecker" else "cpu"
            # a Kronecker list is regenerated on the device wherever this backend reads it (Kernel 1, roots,
            # validation): a stored copy is reused without a CRC scan of its chunk files
            ds, _ = store.generate(target, root_dir, client=client, quiet=quiet, backend=gen, edges="auto",
                                   scan=gen != "gpu")
            return ds
        return store.open_dataset(target, root_dir)

    @classmethod
    def csr(cls, ds, cfg, client=None):
        """Kernel 1's GPU entry (:func:`dbfs.kernel1.entry.kernel1_gpu`: module docstring)."""
        return kernel1_gpu(ds, Kernel1Options.of(cfg), client, kernel1_warm(ds, cfg.partitions, cfg.quiet))

    def load(self, ds, variant):
        self.ds, self.n = ds, ds.n_vertices
        self.meter = None
        if self.cfg.energy:
            self.meter = PowerMeter()
        g = ds.memo.get("graph")
        if g is not None and g.meta.get("variant") == variant:
            self.graph = g           # the CSR Kernel 1 just built on the device: no reload
        else:
            t0 = time.perf_counter()
            self.graph = kernel1.load_csr(ds.path, variant)
            self.load_time = time.perf_counter() - t0
        self.parent = self.parent_dev = self._pinned = None
        # validation reads (or regenerates) the edges once per batch of searches, and checks a batch's tuples
        # against one table of their levels and parents: as many as the device memory left holds
        self.edges = search_edges(ds)   # decided once: device copy, regenerated rows or the stored array
        free = _free_device_bytes()
        self.validate_batch = batch_size(free, self.n)
        self.rows = self.edges          # what the validation reads: regenerated or stored rows kept on the device
        if not type(self.edges).__module__.startswith("cupy"):     # between batches, as far as the memory left allows
            import cupy as cp  # deferred: cupy

            self.rows = KeptRows(cp, self.edges, {}, keep_budget(free, self.n, self.validate_batch))
        self.held = []
        return self.load_time

    def _opts(self) -> dict:
        opts = dict(self.cfg.opts)
        if self.cfg.device_memory_limit is not None:
            opts["device_memory_limit"] = self.cfg.device_memory_limit
        order = split_order(self.cfg.placement, self.cfg.relabel)
        if order != "prefix":
            opts["split_order"] = order
        return opts

    def _sample_memory(self):
        """Device memory in use now (CuPy's pool keeps freed blocks, so this tracks the high-water mark)."""
        from dbfs.bfs.gpu import device_in_use  # deferred: cupy

        self.peak_device = max(getattr(self, "peak_device", 0), device_in_use())

    def describe(self) -> dict:
        """The adjacency's device/host split (bytes and entries each side) and the peak memories."""
        dg = self.graph.meta.get("gpu")
        self._sample_memory()
        return {"placement": dg.placement if dg is not None else {},
                "memory": {"peak_device_bytes": self.peak_device,
                           "peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}

    def eligible(self):
        edges = self.edges
        if type(edges).__module__.startswith("cupy") or isinstance(edges, DeviceRows):
            return lambda cands: eligible_gpu(edges, cands)   # on the device copy of the edges
        return lambda cands: eligible(edges, cands)

    def search(self, root):
        from dbfs.bfs import gpu  # deferred: cupy

        parent, t, rec = gpu.search_device(self.graph, root, self.cfg.algorithm, stats=True, **self._opts())
        self._sample_memory()
        self.parent_dev = gpu.original_parent(self.graph, parent)    # after the clock stopped
        del parent
        self._hold(root, self.parent_dev)
        self.parent = None
        self.level_stats = rec
        return t

    def validate_many(self, roots):
        """The last ``len(roots)`` searches validated over one regeneration of the edge list
        (:func:`dbfs.validate.gpu.validate_many_gpu`)."""
        res = validate_many_gpu(self.rows, self._take_held(roots), n_vertices=self.n, levels=False)
        self._sample_memory()
        return res

    def validate(self, root):
        res = validate_gpu(self.rows, root, self.parent_dev, n_vertices=self.n, levels=False)
        self._sample_memory()
        return res

    def nedge(self, root):
        from dbfs.bfs.gpu import count_nedge  # deferred: cupy

        return count_nedge(self.edges, self.parent_dev)

    def parents(self):
        """The last search's parents in original ids, copied to one reused pinned host buffer on demand."""
        if self.parent is None:
            from dbfs.bfs import gpu  # deferred: cupy

            if self._pinned is None:
                import cupyx  # deferred: cupyx

                self._pinned = cupyx.empty_pinned(self.parent_dev.shape, np.int64)
            self.parent = gpu.host_parent(self.parent_dev, out=self._pinned)
        return self.parent

    def energy_phase(self, roots, times, nedges, min_seconds: float = ENERGY_MIN_SECONDS):
        """GPU power while searching (GreenGraph500): the searches from
        ``roots`` run back to back, the list repeated until ``min_seconds``
        have passed, inside ONE :class:`~dbfs.energy.PowerMeter` window (NVML's
        counters update far more slowly than one search lasts). Returns joules,
        seconds, searches, mean watts and MTEPS/W = harmonic-mean TEPS of the
        timed searches / 1e6 / mean watts."""
        from dbfs.bfs import gpu  # deferred: cupy

        say(f"energy: searching back to back for {min_seconds:g} s with NVML sampling", self.cfg.quiet)
        self.meter.start()
        t0, count = time.perf_counter(), 0
        while count == 0 or time.perf_counter() - t0 < min_seconds:
            for r in roots:
                gpu.search_device(self.graph, r, self.cfg.algorithm, **self._opts())
                count += 1
        w = self.meter.stop()
        hm = teps_stats(times, nedges)["harmonic_mean"]
        return {"device": w["device"], "method": w["method"], "joules": w["joules"], "seconds": w["seconds"],
                "searches": count, "samples": w["samples"], "mean_watts": w["mean_watts"],
                "joules_per_search": w["joules"] / count, "mteps_per_watt": mteps_per_watt(hm, w["mean_watts"]),
                "rule": "one NVML window over back-to-back searches; MTEPS/W = hmean TEPS of the timed "
                        "searches / 1e6 / mean W"}

    def close(self):
        self.rows = None                # the kept edge rows go back to the device
        if getattr(self, "meter", None) is not None:
            self.meter.close()
