"""Kernels compiled ahead: a first run's search kernels compiled in a second process meanwhile.

Contract
--------
:func:`start` ``(job, quiet)`` starts ``python -m dbfs.backends.ahead JOB``
(``job``: a JSON-able dict naming a warm function of this package and the
array types it is called with) and returns an :class:`Ahead`; None when
there is nothing to gain (``job`` None, or Numba's cache already holds the
job's sentinel kernel: every later run of an install). :meth:`Ahead.join`
waits for it (said on stderr when it still runs), :meth:`Ahead.close`
stops it. The child writes only Numba's on-disk cache (``cache=True``: the
directory this process would use, the environment being the same), so the
parent's own warm-up (:func:`dbfs.backends.warm`) after :meth:`Ahead.join`
loads the kernels instead of compiling them. Nothing depends on it: a
child that fails, is killed or guessed other types leaves the parent to
compile what it needs, as without it; its output goes nowhere.

Method: a first run spends most of its time compiling (generation, Kernel 1,
then the searches and validation, one after the other on one core: Numba
compiles in the calling thread). The searches' kernels do not depend on
what generation and Kernel 1 produce, only on their array types, which the
graph's spec fixes (:func:`cpu_search_job`), so a second process compiles
them meanwhile on another core. Numba writes each cache entry to a
temporary file and renames it, so two processes compiling one kernel
leave a whole entry.

Encoding: the job is ``{"warm": "cpu-search", "indptr": dtype str,
"indices": dtype str, "edges": dtype str}``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dbfs.bfs.cpu.topdown import _td_claim_chunks
from dbfs.graph import id_dtype
from dbfs.progress import say

__all__ = ["Ahead", "start", "cpu_search_job", "cold"]


def cpu_search_job(spec) -> dict:
    """The CPU backend's searches and validation of a graph of ``spec`` (a GraphSpec): its CSR's types as
    :func:`dbfs.kernel1.load_csr` gives them (int64 row offsets, ids of :func:`dbfs.graph.id_dtype`, both
    writeable) and the stored edges' dtype."""
    return {"warm": "cpu-search", "indptr": "<i8", "indices": np.dtype(id_dtype(spec.n_vertices)).str,
            "edges": np.dtype(spec.stored_dtype).str}


def cold() -> bool:
    """Whether Numba's cache lacks the searches' top-down claim kernel (no search compiled on this install
    yet); True when that cannot be told."""
    try:
        return not Path(_td_claim_chunks._cache._cache_file._index_path).exists()
    except Exception:   # numba's cache internals moved: start the child, it costs a process at most
        return True


class Ahead:
    """A running compile-ahead child (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen, what: str, quiet: bool):
        self.proc, self.what, self.quiet = proc, what, quiet

    def join(self) -> float:
        """Wait for the child (said on stderr when it has not finished); returns the seconds waited."""
        t0 = time.perf_counter()
        if self.proc.poll() is None:
            say(f"waiting for the Numba kernels of {self.what} compiled ahead in a second process ...", self.quiet)
            self.proc.wait()
        return time.perf_counter() - t0

    def close(self) -> None:
        """Stop the child if it still runs."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(job: dict | None, quiet: bool = False) -> Ahead | None:
    """The child compiling ``job``'s kernels, or None (see the module docstring)."""
    if job is None or not cold():
        return None
    proc = subprocess.Popen([sys.executable, "-m", "dbfs.backends.ahead", json.dumps(job)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Ahead(proc, "the searches and validation", quiet)


def run(job: dict) -> None:
    """Call ``job``'s warm function on tiny arrays of its types (in the child)."""
    if job.get("warm") != "cpu-search":
        raise ValueError(f"unknown compile-ahead job {job.get('warm')!r}")
    from dbfs.backends.cpu import warm_search_side  # deferred: cycle backends.ahead <-> backends.cpu

    warm_search_side(np.zeros(2, np.dtype(job["indptr"])), np.zeros(1, np.dtype(job["indices"])),
                     np.dtype(job["edges"]))


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
