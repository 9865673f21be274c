"""Where a GPU worker's device memory goes during a ``--backend dask`` run (issue #20's SCALE 30 leak hunt).

Starts ``dbfs cluster local-gpu`` in its own process, runs ``dbfs run --scheduler ADDR --backend dask ...``
against it and, every few seconds and once after the run, asks the GPU worker for: the driver's bytes in
use, CuPy's pool (used/total), the keys the worker holds and every live CuPy array of 16 MiB or more with
the types of what refers to it. Prints one JSON line per sample; after the run nothing big should be alive.

    python benchmarks/dask_memory_probe.py 26 [extra dbfs run flags]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def inspect(dask_worker=None):
    import gc

    import cupy as cp

    gc.collect()
    pool = cp.get_default_memory_pool()
    free, total = cp.cuda.runtime.memGetInfo()
    big = []
    for o in gc.get_objects():
        if isinstance(o, cp.ndarray) and o.nbytes >= 16 << 20:
            refs = []
            for r in gc.get_referrers(o):
                if isinstance(r, dict):
                    refs.append("dict[" + ",".join(str(k)[:24] for k in list(r)[:4]) + "]")
                elif isinstance(r, list):
                    refs.append(f"list({len(r)})")
                else:
                    refs.append(type(r).__name__)
            big.append({"shape": list(o.shape), "dtype": str(o.dtype), "MiB": o.nbytes >> 20,
                        "own": type(o.data.mem).__name__, "refs": refs[:6]})
    keys = list(dask_worker.data) if dask_worker is not None else []
    return {"driver_GiB": round((total - free) / 2**30, 2), "pool_used_GiB": round(pool.used_bytes() / 2**30, 2),
            "pool_total_GiB": round(pool.total_bytes() / 2**30, 2), "nkeys": len(keys),
            "keys": [str(k)[:40] for k in keys[:12]], "big": big}


def wanted(dask_scheduler=None):
    """Per held key on the scheduler: which clients want it and which tasks wait on it."""
    return {k: {"who_wants": [str(c.client_key)[:30] for c in ts.who_wants],
                "waiters": [str(d.key)[:30] for d in ts.waiters], "state": ts.state}
            for k, ts in dask_scheduler.tasks.items() if str(k).startswith(("_pick", "_bsp"))}


def main():
    scale, extra = sys.argv[1], sys.argv[2:]
    from distributed import Client

    from dbfs.workers_info import workers_info

    cl = subprocess.Popen([sys.executable, "-m", "dbfs.cli", "cluster", "local-gpu"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    addr = None
    for line in cl.stdout:
        print("cluster:", line.rstrip(), flush=True)
        if "--scheduler " in line:
            addr = line.split("--scheduler ")[1].split(")")[0].strip()
            break
    client = Client(addr)
    gpu = [w for w, i in workers_info(client).items() if i.get("resources", {}).get("GPU")]
    print("gpu workers:", gpu, flush=True)
    stop = threading.Event()

    def sample():
        while not stop.wait(float(os.environ.get('PROBE_EVERY', 4))):
            try:
                r = client.run(inspect, workers=gpu)
                for w, v in r.items():
                    v["big"] = [f"{b['MiB']}MiB {b['dtype']} {b['own']} <- {b['refs']}" for b in v["big"]]
                    print("sample", round(time.time() - t0, 1), json.dumps(v), flush=True)
                print("wanted", json.dumps(client.run_on_scheduler(wanted)), flush=True)
            except Exception as e:  # noqa: BLE001 (a probe: say and go on)
                print("sample failed:", e, flush=True)

    ds = tempfile.mkdtemp(prefix="dbfs-probe.")
    t0 = time.time()
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    cmd = [sys.executable, "-m", "dbfs.cli", "run", "--scale", scale, "--scheduler", addr, "--backend", "dask",
           "--datasets", ds, *extra]
    print("run:", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, stdout=subprocess.DEVNULL)
    stop.set()
    th.join()
    print("run rc", rc, "after", round(time.time() - t0, 1), "s", flush=True)
    for w, v in client.run(inspect, workers=gpu).items():
        print("after", json.dumps(v, indent=1), flush=True)
    client.close()
    os.killpg(cl.pid, 15)
    cl.wait(60)


if __name__ == "__main__":
    main()
