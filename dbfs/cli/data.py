"""``dbfs generate``, ``datasets``, ``export``, ``build`` and ``validate``: the
commands that make, inspect and check stored data (flags translated here,
checked by the stage modules)."""
from __future__ import annotations

import json
import sys

import click

from dbfs.errors import DbfsError
from dbfs.graph import check_root_id
from dbfs.units import human, parse_size

from dbfs.backends import kernel1_warm, tiny_spec, warm, warm_stages
from dbfs.cli.common import (_check_cluster_flags, _CLUSTER_FLAGS, _given, _Group, _need_gpu, _refuse, cli,
                             datasets_opt, scheduler_opt, workers_opt)

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
@click.option("--compact-ids", is_flag=True, help="Import: relabel sparse ids to 0..n-1 in ascending order; searches "
              "and --root then use the new ids, `dbfs export` writes the original ones.")
@datasets_opt
@click.option("--chunk-edges", type=int, default=1 << 20, help="Edges per chunk (dask block and zarr chunk).")
@click.option("--force", is_flag=True, help="Rebuild even if a complete dataset exists (old copy kept until done).")
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu",
              help="Generate on Dask workers (cpu) or on the GPU (gpu, Kronecker only; same bytes).")
@click.option("--edges", "edges", type=click.Choice(["stored", "virtual", "auto"]), default="auto", show_default=True,
              help="Store the edge list, or keep only the spec and regenerate edges on demand (virtual); auto: "
                   "stored when the disk has room with a margin ($DBFS_DISK_BUDGET caps it), else virtual.")
@scheduler_opt
@workers_opt
def generate(scale, edgefactor, seed1, seed2, kind, a, b, c, input_, compact_ids, datasets, chunk_edges, force, backend,
             edges, scheduler, workers, cluster_profile):
    """Generate a graph's edge list into the dataset store (zarr)."""
    from dbfs import store  # deferred: distributed (CLI start)
    from dbfs.cluster import client_for  # deferred: distributed (CLI start)
    from dbfs.spec import GraphSpec  # deferred: dask (CLI start)

    given = _given()
    if backend == "gpu":
        _refuse(given, _CLUSTER_FLAGS, "to --backend gpu: the GPU generates in this process")
    _check_cluster_flags(given, scheduler, cluster_profile)
    spec = GraphSpec.make(kind=kind, scale=scale, edgefactor=edgefactor, seed1=seed1, seed2=seed2,
                          a=a, b=b, c=c, input=input_, given=given, compact_ids=compact_ids)
    if chunk_edges < 1:
        raise DbfsError(f"--chunk-edges {chunk_edges} is invalid: use a positive number of edges per chunk")
    root = store.datasets_root(datasets)
    if spec.kind == "import" and edges == "virtual":
        store.resolve_edges(spec, root, edges)  # the one-line refusal
    complete = store.status(root / spec.name)[0] == "complete"
    if complete and not force and edges in ("auto", store.info(spec.name, root)["edges"]):
        store.generate(spec, root, chunk_edges=chunk_edges, edges=edges)  # reuse (damage is rebuilt): no cluster
    else:
        edges = store.resolve_edges(spec, root, edges)
        store.check_room_for(spec, root, edges)  # fail before starting a cluster
        if backend == "gpu":
            if spec.kind != "kronecker":
                raise DbfsError(f"GPU generation makes Graph500 Kronecker graphs only, not {spec.kind}: "
                                f"drop --backend gpu for this kind")
            _need_gpu()
            store.generate(spec, root, chunk_edges=chunk_edges, force=force, backend="gpu", edges=edges)
        else:
            with client_for(scheduler, n_workers=workers, profile=cluster_profile) as client:
                from dbfs.monitor import install  # deferred: distributed (CLI start)

                install(client).stage("generate")
                warm("generation", client, False, warm_stages, tiny_spec(spec))   # not in graph_generation
                store.generate(spec, root, chunk_edges=chunk_edges, force=force, client=client, edges=edges)
    click.echo(spec.name)


# ---------------------------------------------------------------------------
@cli.group(cls=_Group)
def datasets():
    """List, inspect, verify and remove stored datasets."""


@datasets.command("list")
@datasets_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def datasets_list(datasets, as_json):
    """Table of datasets: name, kind, SCALE, edges, storage (stored or virtual), size, stages, complete."""
    from dbfs import store  # deferred: distributed (CLI start)

    rows = store.list_datasets(datasets)
    if as_json:
        click.echo(json.dumps([{k: v for k, v in r.items() if k != "attrs"} for r in rows], indent=1))
        return
    if not rows:
        click.echo(f"no datasets under {store.datasets_root(datasets)}")
        return
    head = ("NAME", "KIND", "SCALE", "EDGES", "STORAGE", "SIZE", "STAGES", "COMPLETE")
    table = [head] + [(r["name"], r["kind"], str(r["scale"]), f"{r['n_edges']:,}" if r["n_edges"] is not None else "?",
                       r["edges"], human(r["size_bytes"]), ",".join(r["stages"]) or "-", "yes" if r["complete"] else f"no ({r['status']})")
                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


@datasets.command("info")
@click.argument("name")
@datasets_opt
def datasets_info(name, datasets):
    """Everything stored about dataset NAME (JSON)."""
    from dbfs import store  # deferred: distributed (CLI start)

    click.echo(json.dumps(store.info(name, datasets), indent=1, default=str))


@datasets.command("rm")
@click.argument("name")
@datasets_opt
def datasets_rm(name, datasets):
    """Remove dataset NAME (edges and every derived stage). Only a dataset dbfs wrote is removed: any other
    folder, a file or a symbolic link under the datasets root is refused (exit 2) and left as it is."""
    from dbfs import store  # deferred: distributed (CLI start)

    path = store.remove(name, datasets)
    click.echo(f"removed {path}")


@datasets.command("verify")
@click.argument("name")
@datasets_opt
def datasets_verify(name, datasets):
    """Check every chunk of dataset NAME and of its CSR variants: exit 0 intact, 1 damaged (a line per bad
    chunk), 2 bad input."""
    from dbfs import store  # deferred: distributed (CLI start)

    res = store.verify(name, datasets)
    out, err = res.lines()
    click.echo("\n".join(err), err=True, nl=bool(err))
    click.echo("\n".join(out))
    sys.exit(0 if res.ok else 1)


# ---------------------------------------------------------------------------
@cli.command()
@click.argument("name")
@click.option("--out", required=True, metavar="FILE.npy", help="Output .npy file (int64, shape (M, 2)).")
@datasets_opt
def export(name, out, datasets):
    """Write dataset NAME's edge list to FILE.npy as int64 (M, 2) in the input's ids, every chunk verified."""
    from dbfs import store  # deferred: distributed (CLI start)

    path = store.export(name, out, datasets)
    click.echo(str(path))


# ---------------------------------------------------------------------------
@cli.command()
@click.argument("name")
@click.option("--partitions", "-P", type=int, default=1, help="Number of CSR partitions.")
@click.option("--partitioning", type=click.Choice(["block", "cyclic"]), default="block", help="Vertex ownership rule.")
@click.option("--keep-duplicates", is_flag=True, help="Keep duplicate edges in the CSR.")
@click.option("--relabel", type=click.Choice(["none", "degree"]), default="none",
              help="Renumber vertices by descending degree, heavy neighbours first.")
@click.option("--memory-budget", default=None, metavar="SIZE", show_default="from worker memory",
              help="Peak memory per task, e.g. 512MiB.")
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu",
              help="Build out of core on Dask workers (cpu) or on the GPU (gpu: one partition, no relabel; same bytes).")
@click.option("--device-memory-limit", default=None, metavar="SIZE",
              help="--backend gpu: build in passes holding at most SIZE of device memory, e.g. 8GiB (same bytes).")
@click.option("--force", is_flag=True, help="Rebuild the variant even if it is stored (e.g. after `datasets verify` found it corrupt).")
@click.option("--scratch", default=None, metavar="DIR",
              help="--backend cpu: an existing directory for the build's scratch files (e.g. node-local disk or "
                   "/dev/shm), removed when it ends; default: beside the variant.")
@datasets_opt
@scheduler_opt
@workers_opt
def build(name, partitions, partitioning, keep_duplicates, relabel, memory_budget, backend, device_memory_limit, force,
          scratch, datasets, scheduler, workers, cluster_profile):
    """Kernel 1: build (or reuse) the partitioned CSR of dataset NAME, out of core."""
    from dbfs import store  # deferred: distributed (CLI start)
    from dbfs.cluster import client_for  # deferred: distributed (CLI start)
    from dbfs.kernel1.entry import (  # deferred: distributed (CLI start)
        Kernel1Options, check_scratch, kernel1_cpu, kernel1_gpu)

    given = _given()
    budget = parse_size(memory_budget)
    device_budget = parse_size(device_memory_limit, "--device-memory-limit")
    if partitions < 1:
        raise DbfsError(f"--partitions {partitions} is invalid: use 1 or more")
    if backend == "gpu":
        _refuse(given, {"partitions": "--partitions", "partitioning": "--partitioning"},
                "to --backend gpu: GPU Kernel 1 builds one block partition; use --backend cpu")
        _refuse(given, {"memory_budget": "--memory-budget", "scratch": "--scratch", **_CLUSTER_FLAGS},
                "to --backend gpu: GPU Kernel 1 runs in this process, bounded by the free device memory")
    else:
        _refuse(given, {"device_memory_limit": "--device-memory-limit"},
                "to --backend cpu: it bounds GPU Kernel 1; the CPU build is bounded by --memory-budget")
    if device_budget is not None and device_budget < 1:
        raise DbfsError(f"--device-memory-limit {device_memory_limit} is invalid: use a size such as 8GiB")
    _check_cluster_flags(given, scheduler, cluster_profile)
    ds = store.open_dataset(name, datasets)
    from dbfs.partition import check_partition_count  # deferred: numba (CLI start)

    check_partition_count(partitions, ds.n_vertices)
    opts = Kernel1Options(partitions, partitioning, not keep_duplicates, relabel, force=force, memory_budget=budget,
                          scratch=scratch, store=True, device_budget=device_budget)
    if backend == "gpu":
        _need_gpu()
        variant, attrs = kernel1_gpu(ds, opts)
    else:
        check_scratch(scratch)                  # before a cluster starts and the kernels load
        with client_for(scheduler, n_workers=workers, profile=cluster_profile) as client:
            from dbfs.monitor import install  # deferred: distributed (CLI start)

            install(client).stage("kernel1")
            variant, attrs = kernel1_cpu(ds, opts, client, kernel1_warm(ds, partitions, False))
    passes = f", {attrs['passes']} passes" if "passes" in attrs else ""
    click.echo(f"{name}/csr/{variant}: construction_time {attrs['construction_time']:.3f} s, "
               f"nnz {sum(attrs['nnz']):,}{passes}")


@cli.command("validate")
@click.argument("name")
@click.option("--root", "root", type=int, required=True, help="Search key the parents come from (original id).")
@click.option("--parent", "parent_path", required=True, metavar="FILE.npy",
              help="The search's parent array (numpy.save): one integer per vertex, -1 unreached.")
@click.option("--seconds", type=float, default=None, help="The search's time, to print its TEPS (nedge / seconds).")
@datasets_opt
def validate_cmd(name, root, parent_path, seconds, datasets):
    """Check a parent array from any BFS (dbfs, GAP, cuGraph, ...) against
    dataset NAME's input edges by the Graph500 rules.

    Prints the result and nedge; exit 0 when valid, 1 when not (each failed
    rule with example vertices), 2 for bad input.
    """
    from dbfs import store  # deferred: distributed (CLI start)
    from dbfs.backends.cpu import edges_for_validation  # deferred: distributed (CLI start)
    from dbfs.pipeline import load_parent_file  # deferred: distributed (CLI start)
    from dbfs.validate import validate  # deferred: distributed (CLI start)

    if seconds is not None and not seconds > 0:
        raise DbfsError(f"--seconds {seconds} is invalid: pass the search's time in seconds (> 0)")
    ds = store.open_dataset(name, datasets)
    r = check_root_id(root, ds.n_vertices)
    parent = load_parent_file(parent_path, ds.n_vertices)
    v = validate(edges_for_validation(ds), r, parent, n_vertices=ds.n_vertices)
    reached = int((parent >= 0).sum())
    if not v.ok:
        click.echo(f"INVALID: dataset {ds.name}  root {r}  reached {reached:,} of {ds.n_vertices:,}")
        for f in v.failures:
            click.echo(f"  {f.rule}: {f.message} (e.g. vertices {', '.join(map(str, f.vertices[:5]))})")
        sys.exit(1)
    tail = f"  TEPS {v.nedge / seconds:.6g}" if seconds else ""
    click.echo(f"valid: dataset {ds.name}  root {r}  reached {reached:,} of {ds.n_vertices:,}  nedge {v.nedge:,}{tail}")
