"""The rule ``--relabel auto`` follows, computed from the committed records: Kernel 1 + the searches.

For each measured place (backend, worker kind, P, machine) the plain and the
degree-relabelled CSR are compared on the two timed Graph500 kernels a run
pays for: Kernel 1 (``construction_time``) plus its 64 searches (Graph500's
NBFS, whatever number of roots the record ran). The searches' time is
``64 * nedge / hmean``: every search of a run has the same
``nedge`` (the edges of the key's component), so Graph500's harmonic mean of
the TEPS is ``nedge`` over the mean search time; ``nedge`` is taken as
``edgefactor * 2**SCALE`` (the input edges, at most 0.01% above the
component's at SCALE 26). The default takes the variant whose sum is smaller.
The records are ``relabel_default.py`` runs (medians over the rounds) and
``multi_gpu.py`` runs (pairs of labels); each row says which.

    python benchmarks/relabel_rule.py
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import RESULTS  # noqa: E402

#: (record, configuration flags or (plain label, relabelled label), where, (backend, GPU workers, P)) of each
#: place measured; the last item is the RunConfig the place stands for (tests/test_relabel_default.py checks
#: that ``--relabel auto`` resolves as this table says)
PLACES = [
    ("relabel_default-vm2-20261126T121911Z.json", "--backend cpu", "CPU backend, 2-core VM, SCALE 20",
     ("cpu", False, 1)),
    ("relabel_default-h100host16-cpu-20261126T111834Z.json", "--backend cpu", "CPU backend, 16 cores, SCALE 24",
     ("cpu", False, 1)),
    ("relabel_default-vm2-dask-p1-20261126T122221Z.json", "--backend dask --workers 2",
     "dask CPU workers P = 1, 2-core VM, SCALE 20", ("dask", False, 1)),
    ("relabel_default-h200x2host16-dask-babd950-20261127T110608Z.json", "--backend dask",
     "dask CPU workers P = 1, 16 cores, SCALE 22", ("dask", False, 1)),
    ("relabel_default-vm2-20261126T121911Z.json", "--backend dask --partitions 2 --workers 2",
     "dask CPU workers P = 2, 2-core VM, SCALE 20", ("dask", False, 2)),
    ("relabel_default-h100-gpu-a46809a-20261127T054822Z.json", "--backend gpu --energy", "one H100, SCALE 26",
     ("gpu", False, 1)),
    ("relabel_default-h200-gpu-babd950-20261127T105916Z.json", "--backend gpu --energy", "one H200, SCALE 26",
     ("gpu", False, 1)),
    ("multi_gpu-h100x2-s26-66a926a-20261126T142239Z.json", ("p1-stored", "p1"),
     "dask GPU workers P = 1, 2 x H100, SCALE 26", ("dask", True, 1)),
    ("multi_gpu-h200x2-s28-r64-902702c-20261127T053244Z.json", ("p2", "p2-deg"),
     "dask GPU workers P = 2, 2 x H200, SCALE 28", ("dask", True, 2)),
    ("multi_gpu-h200x2-s28-r64-babd950-20261127T110024Z.json", ("p2", "p2-deg"),
     "dask GPU workers P = 2, 2 x H200, SCALE 28 (a later tree)", ("dask", True, 2)),
]


#: searches of a Graph500 run (NBFS)
NBFS = 64


def kernels(k1: float, hmean: float, scale: int, roots: int = NBFS, edgefactor: int = 16) -> float:
    """Kernel 1 plus ``roots`` searches of ``edgefactor * 2**scale`` edges at harmonic-mean ``hmean`` TEPS."""
    return k1 + roots * edgefactor * 2.0 ** scale / hmean


def pair(rec: dict, how) -> tuple:
    """((Kernel 1, hmean TEPS) plain, (the same) relabelled) of one place of a record."""
    if isinstance(how, tuple):
        runs = {r["label"]: r for r in rec["runs"]}
        return tuple((runs[lb]["construction_time"], runs[lb]["harmonic_mean_TEPS"]) for lb in how)
    cfg = next(c for c in rec["configs"] if c["flags"] == how)
    return tuple((statistics.median(r["construction_time"] for r in cfg["runs"] if r["relabel"] == rl),
                  statistics.median(r["harmonic_mean_TEPS"] for r in cfg["runs"] if r["relabel"] == rl))
                 for rl in ("none", "degree"))


def choices() -> list:
    """One dict a place: where, record, the two sums, the TEPS ratio, the variant taken and the config key."""
    out = []
    for name, how, where, key in PLACES:
        rec = json.loads((RESULTS / name).read_text())
        (k1n, tn), (k1d, td) = pair(rec, how)
        none, deg = kernels(k1n, tn, rec["scale"]), kernels(k1d, td, rec["scale"])
        out.append({"where": where, "record": name, "none_s": none, "degree_s": deg, "teps": td / tn,
                    "takes": "degree" if deg < none else "none", "key": key})
    return out


def main() -> int:
    print(f"{'where (64 searches)':58s} {'none: K1 + searches':>19s} {'degree':>9s} {'TEPS deg/none':>13s}  takes")
    for c in choices():
        print(f"{c['where']:58s} {c['none_s']:17.2f} s {c['degree_s']:7.2f} s {c['teps']:12.2f}x  "
              f"{c['takes']:6s}  ({c['record']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
