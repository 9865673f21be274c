"""What one GPU worker job of a ``slurm`` profile with ``gpus_per_job`` runs.

Contract
--------
``python -m dbfs.cluster.slurm_job SCHEDULER [worker options]``, the command
dask-jobqueue writes at the end of the job script (``worker_command``),
starts in the job:

- ``dask cuda worker SCHEDULER``: one worker per GPU SLURM gave the job
  (``--gres=gpu:N`` sets ``CUDA_VISIBLE_DEVICES``), each declaring the Dask
  resource ``GPU=1`` (how dbfs tells GPU workers from CPU workers);
- when ``$DBFS_JOB_CPU_WORKERS`` > 0, ``dask worker SCHEDULER --nworkers K
  --nthreads T`` (``$DBFS_JOB_CPU_THREADS``) that see no GPU;

passing on the options dask-jobqueue gave (``--name`` as the prefix of the
workers' names, ``--memory-limit`` divided among the job's workers, ``--death-timeout``, ``--interface``,
``--local-directory``, ``--protocol``), and waits. SIGTERM / SIGINT (job
cancelled or walltime) go to both; the job ends with the first non-zero
exit status.

Encoding: the job script exports ``DBFS_JOB_GPUS`` (GPUs per job),
``DBFS_JOB_CPU_WORKERS`` and ``DBFS_JOB_CPU_THREADS`` before this line
(:func:`dbfs.cluster.slurm_cluster`).

Reference: dask-cuda's ``dask cuda worker`` CLI; dask-jobqueue's
``worker_command`` option.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from dask.utils import format_bytes, parse_bytes

__all__ = ["commands", "main"]

_PASS = ("--memory-limit", "--death-timeout", "--interface", "--local-directory", "--protocol")


def _options(argv) -> dict:
    out, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            out[k] = v
        elif a.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[a] = argv[i + 1]
            i += 1
        i += 1
    return out


def commands(argv, env=None) -> list:
    """The (argv, extra environment) of each process the job starts (see the module docstring)."""
    env = os.environ if env is None else env
    sched, opts = argv[0], _options(argv[1:])
    name = opts.get("--name", "dbfs-job")
    k = int(env.get("DBFS_JOB_CPU_WORKERS", "0"))
    g = max(1, int(env.get("DBFS_JOB_GPUS", "1")))
    if "--memory-limit" in opts:        # the job's memory, shared by all its workers
        lim = opts["--memory-limit"]
        if lim not in ("auto", "0"):
            opts["--memory-limit"] = format_bytes(parse_bytes(lim) // (g + max(k, 0))).replace(" ", "")
    common = [x for key in _PASS if key in opts for x in (key, opts[key])]
    gpu_threads = int(env.get("DBFS_JOB_GPU_THREADS", "2"))
    out = [([sys.executable, "-m", "dask_cuda.cli", sched, "--resources", "GPU=1", "--nthreads",
             str(gpu_threads), "--name", f"{name}-gpu"] + common, {})]
    if k > 0:
        t = env.get("DBFS_JOB_CPU_THREADS", "1")
        out.append(([sys.executable, "-m", "distributed.cli.dask_worker", sched, "--nworkers", str(k), "--nthreads",
                     t, "--name", f"{name}-cpu"] + common,
                    {"CUDA_VISIBLE_DEVICES": "", "NUMBA_NUM_THREADS": t, "OMP_NUM_THREADS": t}))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    procs = [subprocess.Popen(cmd, env={**os.environ, **extra}) for cmd, extra in commands(argv)]

    def stop(sig, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, stop)
    rc = 0
    for p in procs:
        r = p.wait()
        rc = rc or r
    return rc


if __name__ == "__main__":
    sys.exit(main())
