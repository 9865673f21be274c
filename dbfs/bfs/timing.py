"""Timing rules shared by every Kernel 2 backend.

Contract: :func:`collector_paused` turns Python's cyclic garbage collector
off inside a timed region and restores it after, as ``timeit`` does around
its timer: a collection of unrelated objects is not part of a search
(Graph500 3.0.1, section 7: the timer covers the search only).
"""
from __future__ import annotations

import contextlib
import gc

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused():
    """The garbage collector off inside the block, restored (if it was on) after."""
    on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if on:
            gc.enable()
