"""The ``dbfs`` command: wiring only (click); the work lives in the stage modules.

Every user error is a :class:`~dbfs.errors.DbfsError`, printed as one line
``dbfs: error: <problem>: <fix>`` with exit code 2. Results go to stdout,
progress and the dashboard link to stderr.
"""
from __future__ import annotations

import json
import sys

import click

from dbfs import __version__
from dbfs.errors import DbfsError


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DbfsError as e:
            click.echo(f"dbfs: error: {e}", err=True)
            ctx.exit(e.exit_code)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


datasets_opt = click.option("--datasets", "datasets", default=None, metavar="DIR",
                            help="Dataset root [default: $DBFS_DATASETS or ./datasets].")
scheduler_opt = click.option("--scheduler", default=None, metavar="ADDRESS",
                             help="Join this Dask scheduler (tcp://host:port); 'threads' runs without a cluster. "
                                  "[default: start a LocalCluster of worker processes]")
workers_opt = click.option("--workers", type=int, default=None, show_default="one per core",
                           help="Worker processes of the LocalCluster.")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="dbfs")
def cli():
    """dbfs: Graph500 breadth-first search as a Dask pipeline."""


# ---------------------------------------------------------------------------
@cli.command()
@click.option("--scale", type=int, default=16, help="log2 of the number of vertices (1..42).")
@click.option("--edgefactor", type=int, default=16, help="Edge tuples per vertex.")
@click.option("--seed1", type=int, default=2, help="First 64-bit user seed.")
@click.option("--seed2", type=int, default=3, help="Second 64-bit user seed.")
@click.option("--kind", type=click.Choice(["kronecker", "rmat", "uniform", "grid2d", "grid3d", "import"]),
              default="kronecker", help="Graph kind.")
@click.option("--a", "a", type=float, default=None, help="R-MAT initiator a [default: 0.57].")
@click.option("--b", "b", type=float, default=None, help="R-MAT initiator b [default: 0.19].")
@click.option("--c", "c", type=float, default=None, help="R-MAT initiator c [default: 0.19].")
@click.option("--input", "input_", default=None, metavar="FILE",
              help="Import an edge list ('u v' per line, # comments) or Matrix Market file.")
@datasets_opt
@click.option("--chunk-edges", type=int, default=1 << 20, help="Edges per chunk (dask block and zarr chunk).")
@click.option("--force", is_flag=True, help="Rebuild even if a complete dataset exists (old copy kept until done).")
@scheduler_opt
@workers_opt
def generate(scale, edgefactor, seed1, seed2, kind, a, b, c, input_, datasets, chunk_edges, force, scheduler, workers):
    """Generate a graph's edge list into the dataset store (zarr)."""
    from dbfs import store
    from dbfs.cluster import client_for
    from dbfs.spec import GraphSpec

    spec = GraphSpec.make(kind=kind, scale=scale, edgefactor=edgefactor, seed1=seed1, seed2=seed2,
                          a=a, b=b, c=c, input=input_)
    if chunk_edges < 1:
        raise DbfsError(f"--chunk-edges {chunk_edges} is invalid: use a positive number of edges per chunk")
    root = store.datasets_root(datasets)
    if store.status(root / spec.name)[0] == "complete" and not force:
        store.generate(spec, root)  # reuse: no cluster needed
    else:
        store._check_room(root, store.estimate_bytes(spec))  # fail before starting a cluster
        with client_for(scheduler, n_workers=workers) as client:
            store.generate(spec, root, chunk_edges=chunk_edges, force=force, client=client)
    click.echo(spec.name)


# ---------------------------------------------------------------------------
@cli.group(cls=_Group)
def datasets():
    """List, inspect and remove stored datasets."""


@datasets.command("list")
@datasets_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def datasets_list(datasets, as_json):
    """Table of datasets: name, kind, SCALE, edges, size, stages, complete."""
    from dbfs import store

    rows = store.list_datasets(datasets)
    if as_json:
        click.echo(json.dumps([{k: v for k, v in r.items() if k != "attrs"} for r in rows], indent=1))
        return
    if not rows:
        click.echo(f"no datasets under {store.datasets_root(datasets)}")
        return
    head = ("NAME", "KIND", "SCALE", "EDGES", "SIZE", "STAGES", "COMPLETE")
    table = [head] + [(r["name"], r["kind"], str(r["scale"]), f"{r['n_edges']:,}" if r["n_edges"] is not None else "?",
                       _human(r["size_bytes"]), ",".join(r["stages"]) or "-", "yes" if r["complete"] else f"no ({r['status']})")
                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


@datasets.command("info")
@click.argument("name")
@datasets_opt
def datasets_info(name, datasets):
    """Everything stored about dataset NAME (JSON)."""
    from dbfs import store

    click.echo(json.dumps(store.info(name, datasets), indent=1, default=str))


@datasets.command("rm")
@click.argument("name")
@datasets_opt
def datasets_rm(name, datasets):
    """Remove dataset NAME (edges and every derived stage)."""
    from dbfs import store

    path = store.remove(name, datasets)
    click.echo(f"removed {path}")


# ---------------------------------------------------------------------------
@cli.command()
@click.argument("name")
@click.option("--out", required=True, metavar="FILE.npy", help="Output .npy file (int64, shape (M, 2)).")
@datasets_opt
def export(name, out, datasets):
    """Write dataset NAME's edge list to FILE.npy as int64 (M, 2), checksum-verified."""
    from dbfs import store

    path = store.export(name, out, datasets)
    click.echo(str(path))


def main(argv=None):  # console-script entry point
    return cli.main(args=argv, prog_name="dbfs")


if __name__ == "__main__":
    sys.exit(main())
