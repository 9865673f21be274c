"""Each LocalCluster worker process bound to cores of its own (profile key ``bind_cores: true``).

Contract
--------
:func:`core_blocks` ``(n, threads, cpus)`` returns, for worker names ``0 .. n - 1``, disjoint blocks of
``threads`` logical CPUs taken from ``cpus`` (this process's affinity by default) in topology order, or
None where ``n * threads`` exceeds them (an oversubscribed cluster is left to the scheduler: binding
would stack the extra threads on the same cores). :class:`BindCores` is the worker plugin that applies a
worker's block to every thread of its process on setup, and so again on a worker its nanny restarted;
threads started later (the task threads, Numba's OpenMP team) inherit it. A worker whose name has no
block is left as it is. :func:`describe` is the status line's short form of the blocks.

Method: Linux CPU affinity (``sched_setaffinity`` on each thread id of ``/proc/self/task``: it sets one
thread's mask). Topology order sorts the CPUs by (package, core, CPU number) from
``/sys/devices/system/cpu/cpuN/topology``, so a block holds whole cores (their SMT siblings together)
of one package where it can: a worker's threads share caches with its own threads only, and a worker's
OpenMP team neither migrates onto a peer's cores nor has the kernel balance its threads across every
core of the host. This is what MPI launchers do by default (Open MPI's ``--bind-to core``, SLURM's
``--cpu-bind``); a SLURM job's workers are bound by ``srun`` and this module leaves them alone.

Encoding: a block is a sorted list of logical CPU numbers; the plugin holds ``{worker name: block}``.
Reference: Linux ``sched_setaffinity(2)``; Open MPI ``mpirun(1)``, "Mapping, ranking, and binding".
"""
from __future__ import annotations

import os
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["core_blocks", "describe", "bind_threads", "usable_cpus", "BindCores"]

_TOPOLOGY = Path("/sys/devices/system/cpu")


def _topology_key(cpu: int, root: Path = _TOPOLOGY) -> tuple:
    """(package, core, cpu) of a logical CPU; its number alone where the kernel does not say."""
    def read(name):
        try:
            return int((root / f"cpu{cpu}" / "topology" / name).read_text())
        except (OSError, ValueError):
            return cpu
    return read("physical_package_id"), read("core_id"), cpu


def usable_cpus() -> list:
    """This process's CPUs (its affinity), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def core_blocks(n: int, threads: int, cpus=None, root: Path = _TOPOLOGY) -> dict | None:
    """``{worker name: block}`` for ``n`` workers of ``threads`` threads over ``cpus`` (module docstring);
    None where they do not fit or binding is unavailable."""
    cpus = usable_cpus() if cpus is None else sorted(cpus)
    if not hasattr(os, "sched_setaffinity") or n < 1 or threads < 1 or n * threads > len(cpus):
        return None
    order = sorted(cpus, key=lambda c: _topology_key(c, root))
    return {i: sorted(order[i * threads:(i + 1) * threads]) for i in range(n)}


def describe(blocks: dict) -> str:
    """``0-3, 4-7, ...``: each block as a range where it is one, else its CPUs."""
    out = []
    for _, b in sorted(blocks.items()):
        out.append(f"{b[0]}-{b[-1]}" if len(b) > 1 and b[-1] - b[0] == len(b) - 1 else ",".join(map(str, b)))
    return ", ".join(out)


def bind_threads(cpus) -> int:
    """Every thread of this process bound to ``cpus``; returns the threads bound (a thread that ended
    meanwhile is skipped)."""
    done = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
            done += 1
        except (ProcessLookupError, FileNotFoundError):
            continue
    return done


class BindCores(WorkerPlugin):
    """Binds each worker's process to its block of :func:`core_blocks` (module docstring)."""

    idempotent = True

    def __init__(self, blocks: dict):
        self.blocks = {str(k): list(v) for k, v in blocks.items()}

    def setup(self, worker):
        cpus = self.blocks.get(str(worker.name))
        if cpus:
            bind_threads(cpus)
