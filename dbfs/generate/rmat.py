"""R-MAT with a user initiator (a, b, c), d = 1 - a - b - c.

Same streams, draws, clip-and-flip and scrambling as the Graph500 generator
(``dbfs.generate.graph500``); only the initiator differs. It enters as integer
numerators out of 10000 (the reference's resolution), so a, b, c are rounded
to 4 decimals; (0.57, 0.19, 0.19) reproduces the Graph500 edge list exactly.
"""
from __future__ import annotations

import math

import numpy as np

from dbfs.errors import DbfsError
from dbfs.generate.graph500 import INITIATOR_DENOMINATOR, check_params, kron_core


def initiator_numerators(a: float, b: float, c: float) -> tuple[int, int, int]:
    """(a, b, c) probabilities -> integer numerators out of 10000, checked (each a finite number)."""
    for name, x in (("a", a), ("b", b), ("c", c)):
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) or not math.isfinite(x):
            raise DbfsError(f"R-MAT initiator --{name} {x!r} is not a finite number: use a, b, c >= 0 with "
                            f"a + b + c <= 1 (e.g. --a 0.57 --b 0.19 --c 0.19)")
    nums = tuple(int(round(x * INITIATOR_DENOMINATOR)) for x in (a, b, c))
    if min(nums) < 0 or sum(nums) > INITIATOR_DENOMINATOR or min(a, b, c) < 0:
        raise DbfsError(f"R-MAT initiator a={a} b={b} c={c} is invalid: use a, b, c >= 0 with a + b + c <= 1")
    return nums  # type: ignore[return-value]


def rmat_edges(scale, edgefactor=16, a=0.57, b=0.19, c=0.19, seed1=2, seed2=3, start=0, stop=None):
    """R-MAT edge tuples ``[start, stop)`` as int64 (k, 2)."""
    check_params(scale, edgefactor, seed1, seed2)
    nums = initiator_numerators(a, b, c)
    return kron_core(int(scale), int(edgefactor) << int(scale), int(seed1), int(seed2),
                     int(start), stop if stop is None else int(stop), nums)
