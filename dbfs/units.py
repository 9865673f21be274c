"""Byte sizes as users write them (``512MiB``, ``2GB``, ``1073741824``) and as dbfs prints them.

Contract: :func:`parse_size` returns an int number of bytes (binary and
decimal suffixes both mean powers of 1024, as Dask's memory limits do for
``GiB``), or a one-line DbfsError naming the text; :func:`human` prints
bytes with a binary unit; :func:`slurm_seconds` reads a SLURM time limit.
"""
from __future__ import annotations

import re

from dbfs.errors import DbfsError

__all__ = ["parse_size", "human", "slurm_seconds"]

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}


def parse_size(text, what: str = "size"):
    """Bytes of ``text`` (None stays None)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise DbfsError(f"{what} {text!r} is not understood: use e.g. 512MiB, 2GB or 1073741824")
    try:
        return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    except ValueError:
        raise DbfsError(f"{what} {text!r} is not understood: use e.g. 512MiB, 2GB or 1073741824") from None


def human(n: float) -> str:
    """``n`` bytes as e.g. ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def slurm_seconds(text) -> float | None:
    """Seconds of a SLURM time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``).

    Parameters
    ----------
    text : str or None
        As in ``-t`` and sinfo's ``%l``; ``infinite``/``UNLIMITED``/empty
        give None.
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\s*", str(text))
    if not m:
        return None
    d, a, b, c = (int(x) if x is not None else None for x in m.groups())
    if d is not None:
        return d * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    if c is not None:
        return a * 3600 + b * 60 + c
    return a * 60 + (b or 0)
