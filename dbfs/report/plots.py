"""The PNG plot of a run: per-level work and the TEPS distribution.

Contract
--------
:func:`plot_run` draws three panels and saves them to ``path``: per-level
frontier size and edges examined (log scale) of each algorithm given, on the
run's first root (ticks at whole levels only), with bottom-up levels annotated ``bu`` (the per-level table
of the direction-optimizing BFS paper: S. Beamer, K. Asanovic, D. Patterson,
"Direction-Optimizing Breadth-First Search", SC 2012), and the histogram of
TEPS over roots with its harmonic mean (the Graph500 headline statistic).
Matplotlib is imported on first use, with the non-interactive Agg backend.

Encoding: a level record is a dict with ``level``, ``frontier``, ``edges``
and optionally ``direction`` (``"td"`` or ``"bu"``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["plot_run"]


def plot_run(path, res, per_level: dict[str, list]) -> Path:
    """Plot one run (panels in the module docstring).

    Parameters
    ----------
    path : path-like
        The PNG file; its directory is created.
    res : object
        The run's result (``roots``, ``times``, ``nedges``, ``config``,
        ``dataset``, ``n_vertices``, ``n_edges``).
    per_level : dict of str to list of dict
        Algorithm name -> its level records for the same (first) root.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig = _figure(res, per_level)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _figure(res, per_level: dict[str, list]):
    """The matplotlib figure of :func:`plot_run` (its level axes ticked at whole levels only)."""
    import matplotlib  # deferred: matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib
    from matplotlib.ticker import MaxNLocator  # deferred: matplotlib

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax_f, ax_e, ax_t = axes
    for name, levels in per_level.items():
        if not levels:
            continue
        lv = [d["level"] for d in levels]
        ax_f.semilogy(lv, [max(d["frontier"], 1) for d in levels], marker="o", label=name)
        ax_e.semilogy(lv, [max(d["edges"], 1) for d in levels], marker="o", label=name)
        for d in levels:
            if d.get("direction") == "bu":
                ax_e.annotate("bu", (d["level"], max(d["edges"], 1)), fontsize=7)
    root = res.roots[0]
    ax_f.set(title=f"frontier per level (root {root})", xlabel="level", ylabel="vertices")
    ax_e.set(title="edges examined per level", xlabel="level", ylabel="adjacency entries")
    for ax in (ax_f, ax_e):     # a level is a whole number: no tick at 2.5
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_f.legend()
    ax_e.legend()
    teps = np.array(res.nedges) / np.array(res.times)
    ax_t.hist(teps / 1e9, bins=min(20, max(5, len(teps) // 3)))
    hm = len(teps) / np.sum(1.0 / teps)
    ax_t.axvline(hm / 1e9, color="k", linestyle="--", label=f"harmonic mean {hm / 1e9:.3f}")
    ax_t.set(title=f"TEPS over {len(teps)} roots ({res.config['algorithm']}, {res.config['backend']})",
             xlabel="GTEPS", ylabel="searches")
    ax_t.legend()
    fig.suptitle(f"{res.dataset}: {res.n_vertices:,} vertices, {res.n_edges:,} edge tuples")
    fig.tight_layout()
    return fig
