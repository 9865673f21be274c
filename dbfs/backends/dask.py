"""Backend ``dask``: P CSR partitions pinned to Dask workers, BSP levels with
worker-to-worker frontier exchange (:mod:`dbfs.bfs.dask`).

Contract: :class:`dbfs.backends.Backend`. Each partition of the stored
variant ``p<P>-<block|cyclic>`` is loaded once onto one worker and kept
there for every search; parents stay on the workers (one future per
partition); validation runs as Dask tasks over the stored edge chunks, so
no N-sized array reaches the client (:func:`dbfs.bfs.dask.validate_distributed`).
The timed seconds are measured on the workers from a start barrier to the
last count exchange (Graph500 3.0.1 section 7).

Failures: every wait (load, search, nedge, validation) is bounded and
reacts to a lost worker within seconds (:mod:`dbfs.bfs.dask.waits`): the
partitions it held are reloaded on live workers and the step redone
(a search rerun; a validation or nedge after rerunning, untimed, the
search whose parents were lost), each said on stderr and recorded in
``events``; past the retries, one DbfsError naming what was lost.
"""
from __future__ import annotations

from dbfs.backends import Backend
from dbfs.errors import DbfsError
from dbfs.progress import say
from dbfs.units import human

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
        if cfg.placement.startswith("degree") and cfg.relabel != "degree":
            raise DbfsError(f"--placement {cfg.placement} places degree classes: it needs the degree-ordered "
                            f"variant; add --relabel degree")

    @classmethod
    def algorithms(cls) -> list:
        from dbfs.bfs.dask import ALGORITHMS

        return list(ALGORITHMS)

    def load(self, ds, variant):
        from dbfs.bfs import dask as dbfs_dask

        if self.client is None:
            raise DbfsError("--backend dask needs a Dask cluster: drop --scheduler threads")
        self.mod, self.ds = dbfs_dask, ds
        self.dg = dbfs_dask.load_distributed(self.client, ds.path, variant, placement=self.cfg.placement,
                                             device_memory_limit=self.cfg.device_memory_limit)
        for w in self.dg.workers_table():
            if w["kind"] == "gpu":
                say(f"GPU worker {w['worker']}: partition(s) {w['partitions']} in device memory "
                    f"({human(w['device_bytes'])})", self.cfg.quiet)
        self.load_time = self.dg.load_time
        self.result = None
        self._say_events(self.dg.events, f"the load of {variant}")
        return self.load_time

    @property
    def events(self):
        return list(self.dg.events) if hasattr(self, "dg") else []

    @events.setter
    def events(self, _):
        pass

    def search(self, root):
        if self.result is not None:
            self.result.release()
        self.result, seconds, self.level_stats = self.mod.search(self.dg, root, algorithm=self.cfg.algorithm,
                                                                 stats=True, **self.cfg.opts)
        self._say_events(self.result.events, f"the search from root {root}")
        return seconds

    def _say_events(self, events, during) -> None:
        for ev in events:
            if ev.get("event") != "worker-lost":
                continue
            redo = "search rerun (untimed), step redone" if ev.get("stage") == "validation" else "search rerun"
            say(f"worker {', '.join(ev['workers_lost']) or '?'} lost during {during}: partition(s) "
                f"{ev['ranks_reloaded']} reloaded on live workers in {ev['reload_time']:.1f} s, {redo}",
                self.cfg.quiet)

    def _check_parents(self, root, during):
        """Validation of the last search (its parents re-searched, untimed, if lost with a worker)."""
        seen = len(self.result.events)
        try:
            return self.mod.validate_distributed(self.client, self.ds.path, self.dg, self.result, root)
        finally:
            self._say_events(self.result.events[seen:], during)

    def validate(self, root):
        return self._check_parents(root, f"the validation of root {root}")

    def nedge(self, root):
        return int(self._check_parents(root, f"the nedge count of root {root}").nedge)

    def parents(self):
        return self.mod.gather_parent(self.result, self.client, self.dg)

    def describe(self) -> dict:
        """Per worker: kind (cpu/gpu), partitions, device and host bytes; the placement policy;
        how frontiers cross workers."""
        if not hasattr(self, "dg"):
            return {}
        return {"placement": self.dg.placement, "frontier_sharing": self.dg.frontier_sharing,
                "workers": self.dg.workers_table()}

    def close(self):
        if getattr(self, "result", None) is not None:
            self.result.release()
        if hasattr(self, "dg"):
            self.dg.close()
