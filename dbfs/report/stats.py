"""Graph500 statistics and the 3.0.1 output block.

Contract
--------
The Graph500 specification 2.0, section 9 "Computing and Outputting
Performance Information", and the stdout of the 3.0.1 reference code:

- :func:`graph500_stats`: min, quartiles, median, max, mean and the sample
  standard deviation (n - 1) of a list of numbers, with the reference's
  quartile rule on the sorted values ``xx``::

      q1     = (xx[(n-1)//4] + xx[n//4]) / 2
      median = (xx[(n-1)//2] + xx[n//2]) / 2
      q3     = (xx[n-1-(n-1)//4] + xx[n-1-n//4]) / 2

- :func:`teps_stats`: TEPS statistics computed, as the reference does, on
  ``s_i = time_i / nedge_i``: ``harmonic_mean = 1 / mean(s)``,
  ``harmonic_stddev = std(s) / (mean(s)**2 * sqrt(n - 1))``; the TEPS
  min/quartiles/max are ``1 /`` the OPPOSITE statistic of s (min TEPS =
  1 / max s). ``mean`` (arithmetic mean of the TEPS) is an extra.
- :func:`format_graph500`: the exact stdout block of the 3.0.1 reference.

Encoding of the block: one ``key: value`` line per field, keys padded so
values start at column ``VALUE_COLUMN`` (33), numbers as C's ``%g`` (nedge
statistics as ``%.11g``, integers as ``%d``), and ``bfs  harmonic_mean_TEPS:
!  <value>``. Extra fields (e.g. ``load_time``) follow the reference block.
A field is a ``(key, value, fmt)`` triple (:func:`graph500_fields`), rendered
by :func:`render_graph500`.

Output is an API: this module is the one place that produces it.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["graph500_stats", "teps_stats", "graph500_fields", "render_graph500",
           "format_graph500", "format_value", "VALUE_COLUMN"]

#: 1-based column at which every value starts
VALUE_COLUMN = 33
_STAT_KEYS = ("min", "firstquartile", "median", "thirdquartile", "max", "mean", "stddev")


def graph500_stats(values) -> dict:
    """The reference's summary statistics of ``values``.

    Parameters
    ----------
    values : array-like
        At least one number.

    Returns
    -------
    dict
        ``min``, ``firstquartile``, ``median``, ``thirdquartile``, ``max``,
        ``mean``, ``stddev`` (n - 1; NaN for one value), as floats.
    """
    xx = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = xx.shape[0]
    if n == 0:
        raise ValueError("graph500_stats needs at least one value")
    mean = float(xx.sum() / n)
    var = float(((xx - mean) ** 2).sum() / (n - 1)) if n > 1 else math.nan
    return {
        "min": float(xx[0]),
        "firstquartile": float((xx[(n - 1) // 4] + xx[n // 4]) / 2),
        "median": float((xx[(n - 1) // 2] + xx[n // 2]) / 2),
        "thirdquartile": float((xx[n - 1 - (n - 1) // 4] + xx[n - 1 - n // 4]) / 2),
        "max": float(xx[n - 1]),
        "mean": mean,
        "stddev": math.sqrt(var),
    }


def teps_stats(times, nedges) -> dict:
    """Graph500 TEPS statistics from per-search times and edge counts.

    Parameters
    ----------
    times : array-like
        Seconds per search.
    nedges : array-like or number
        Edges per search (``nedge`` of the validator), broadcast to ``times``.

    Returns
    -------
    dict
        ``min``, ``firstquartile``, ``median``, ``thirdquartile``, ``max``,
        ``harmonic_mean``, ``harmonic_stddev`` and ``mean`` (arithmetic), in TEPS.
    """
    t = np.asarray(times, dtype=np.float64).ravel()
    m = np.broadcast_to(np.asarray(nedges, dtype=np.float64), t.shape)
    s = t / m
    st = graph500_stats(s)
    n = s.shape[0]
    hstd = st["stddev"] / (st["mean"] ** 2 * math.sqrt(n - 1)) if n > 1 else math.nan
    return {
        "min": 1.0 / st["max"],
        "firstquartile": 1.0 / st["thirdquartile"],
        "median": 1.0 / st["median"],
        "thirdquartile": 1.0 / st["firstquartile"],
        "max": 1.0 / st["min"],
        "harmonic_mean": 1.0 / st["mean"],
        "harmonic_stddev": hstd,
        "mean": float(np.mean(m / t)),
    }


def format_value(value, fmt: str = "g") -> str:
    """C printf formatting of one value.

    Parameters
    ----------
    value : number or str
        A string passes through unless ``fmt`` is ``'d'``.
    fmt : str
        ``'d'``, ``'g'`` or ``'.11g'``.

    Returns
    -------
    str
    """
    if fmt == "d":
        return "%d" % int(value)
    if isinstance(value, str):
        return value
    return ("%" + fmt) % float(value)


def _line(key: str, text: str, bang: bool = False) -> str:
    head = key + ":"
    if bang:  # the reference marks the headline number: key, 5 spaces, '!', 2 spaces
        head = head + "     !"
    return head.ljust(VALUE_COLUMN - 1) + text if len(head) < VALUE_COLUMN - 1 else head + " " + text


def graph500_fields(scale, edgefactor, nbfs, graph_generation, num_mpi_processes, construction_time,
                    times, nedges, validate_times, extra=None) -> list:
    """The reference's fields in order.

    Parameters
    ----------
    scale, edgefactor, nbfs : int
        The graph and the number of searches.
    graph_generation, construction_time : float
        Seconds.
    num_mpi_processes : int
        Processes (workers) of the run.
    times, nedges, validate_times : array-like
        Per search: seconds, edge counts, validation seconds.
    extra : dict or iterable of (key, value), optional
        Fields after the reference block (ints as ``%d``, others as ``%g``).

    Returns
    -------
    list of (str, object, str)
        ``(key, value, fmt)`` per output line.
    """
    f = [("SCALE", scale, "d"), ("edgefactor", edgefactor, "d"), ("NBFS", nbfs, "d"),
         ("graph_generation", graph_generation, "g"), ("num_mpi_processes", num_mpi_processes, "d"),
         ("construction_time", construction_time, "g")]
    ts = graph500_stats(times)
    f += [(f"bfs  {k}_time", ts[k], "g") for k in _STAT_KEYS]
    ns = graph500_stats(np.broadcast_to(np.asarray(nedges, dtype=np.float64), np.shape(times)))
    f += [(f"{k}_nedge", ns[k], ".11g") for k in _STAT_KEYS]
    te = teps_stats(times, nedges)
    f += [(f"bfs  {k}_TEPS", te[k], "g")
          for k in ("min", "firstquartile", "median", "thirdquartile", "max", "harmonic_mean",
                    "harmonic_stddev")]
    vs = graph500_stats(validate_times)
    f += [(f"bfs  {k}_validate", vs[k], "g") for k in _STAT_KEYS]
    for key, value in (extra.items() if isinstance(extra, dict) else (extra or [])):
        fmt = "d" if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else "g"
        f.append((key, value, fmt))
    return f


def render_graph500(fields) -> str:
    """The text of ``(key, value, fmt)`` fields.

    Parameters
    ----------
    fields : iterable of (str, object, str)
        As :func:`graph500_fields` returns them.

    Returns
    -------
    str
        One line per field, newline-terminated.
    """
    out = []
    for key, value, fmt in fields:
        out.append(_line(key, format_value(value, fmt), bang=key == "bfs  harmonic_mean_TEPS"))
    return "\n".join(out) + "\n"


def format_graph500(scale, edgefactor, nbfs, graph_generation, num_mpi_processes, construction_time,
                    times, nedges, validate_times, extra=None) -> str:
    """The 3.0.1 stdout block: ``render_graph500(graph500_fields(...))``.

    Parameters are those of :func:`graph500_fields`.

    Returns
    -------
    str
    """
    return render_graph500(graph500_fields(scale, edgefactor, nbfs, graph_generation, num_mpi_processes,
                                           construction_time, times, nedges, validate_times, extra))
