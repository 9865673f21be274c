"""``dbfs cluster``, ``algorithms`` and ``pipeline run``: clusters, what runs
here, and pipeline spec files."""
from __future__ import annotations

import signal
import time

import click

from dbfs import worker_logs
from dbfs.backends import backend_table
from dbfs.cli.common import _check_cluster_flags, _given, _Group, cli, datasets_opt, scheduler_opt, workers_opt
from dbfs.cli.search import _print_run
from dbfs.errors import DbfsError

def _interrupt(*_):
    raise KeyboardInterrupt


@cli.command("cluster")
@click.argument("profile")
@click.option("--script", is_flag=True, help="type: slurm only: print the job script each worker job runs, submit nothing.")
@click.option("--check", is_flag=True, help="type: slurm only: ask sinfo whether the profile's jobs fit a node of "
                                            "its partition and say what does not; submit nothing.")
@click.option("--workers", type=int, default=None, help="type: local: worker processes [default: the profile's].")
@click.option("--scheduler-port", type=click.IntRange(0, 65535), default=None,
              help="type: local / local-gpu: the scheduler's port on 127.0.0.1, e.g. 8786 [default: the profile's "
                   "scheduler_port, else any free port].")
@click.option("--dashboard-port", type=click.IntRange(0, 65535), default=None,
              help="type: local / local-gpu: the dashboard's port on 127.0.0.1, e.g. 8787 [default: the profile's "
                   "dashboard_port, else any free port].")
def cluster_cmd(profile, script, check, workers, scheduler_port, dashboard_port):
    """Start PROFILE's cluster (a profile name or a YAML file) and keep it up.

    Prints the scheduler address and dashboard link; other commands join it
    with --scheduler ADDRESS (several runs then share the workers, e.g. SLURM
    jobs that queued once). Ctrl-C (or SIGTERM, SIGHUP) closes it: a SLURM
    profile's jobs are cancelled. --check and --script submit nothing.
    """
    from dbfs.cluster import (check_cluster_args, client_for, load_profile,  # deferred: distributed (CLI start)
                              slurm_cluster)

    prof = load_profile(profile)
    check_cluster_args(n_workers=workers)
    if workers is not None and prof["type"] != "local":
        raise DbfsError(f"--workers does not apply to profile {profile} (type {prof['type']}): it sizes a type: local "
                        f"cluster; set jobs/processes in the profile instead")
    for flag, value in (("--scheduler-port", scheduler_port), ("--dashboard-port", dashboard_port)):
        if value is not None and prof["type"] not in ("local", "local-gpu"):
            raise DbfsError(f"{flag} does not apply to profile {profile} (type {prof['type']}): it places the "
                            f"scheduler of a cluster on this host (type local or local-gpu); drop it")
    if (script or check) and prof["type"] != "slurm":
        raise DbfsError(f"--{'script prints a SLURM job script' if script else 'check asks SLURM about a request'}: "
                        f"profile {profile} is type {prof['type']}")
    if check:
        from dbfs.cluster.slurm import check_request  # deferred: distributed (CLI start)

        check_request(prof, profile)
        if not script:
            return
    if script:
        c = slurm_cluster(prof)
        try:
            click.echo(c.job_script())
        finally:
            c.close()
        return
    if prof["type"] == "scheduler":
        raise DbfsError(f"profile {profile} joins a scheduler that runs elsewhere ({prof['address']}): nothing to start")
    signal.signal(signal.SIGTERM, _interrupt)
    with client_for(None, n_workers=workers, profile=profile, scheduler_port=scheduler_port,
                    dashboard_port=dashboard_port) as client:
        from dbfs.monitor import install  # deferred: distributed (CLI start)

        install(client)         # the dashboard's dbfs page, for the runs that join this cluster
        log = worker_logs.current()
        click.echo(f"dbfs: scheduler {client.scheduler.address} (join with --scheduler {client.scheduler.address}); "
                   + (f"Dask's log: {log.path}; " if log is not None else "") + "Ctrl-C closes the cluster", err=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            click.echo("dbfs: closing the cluster", err=True)


@cli.command()
def algorithms():
    """List every backend with its algorithms and whether it runs here."""
    for name, names, reason in backend_table():
        click.echo(f"{name}: {' '.join(names)}  ({'available' if reason is None else 'unavailable: ' + reason})")


@cli.group(cls=_Group)
def pipeline():
    """Run pipeline specs (YAML files of stages, e.g. pipelines/graph500.yaml)."""


@pipeline.command("run")
@click.argument("spec_file", metavar="FILE.yaml")
@datasets_opt
@scheduler_opt
@workers_opt
def pipeline_run(spec_file, datasets, scheduler, workers, cluster_profile):
    """Run FILE.yaml's stages in order (generate, build, run), reusing stored outputs."""
    from dbfs.cluster import client_for  # deferred: distributed (CLI start)
    from dbfs.pipeline_spec import load_spec, run_spec, scheduler_for  # deferred: distributed (CLI start)

    _check_cluster_flags(_given(), scheduler, cluster_profile)
    spec = load_spec(spec_file)
    profile = cluster_profile or spec.get("cluster")
    asked = scheduler or spec.get("scheduler")
    scheduler = scheduler_for(spec, datasets, asked, profile)
    if scheduler == "threads" and asked != "threads":
        searches = any(n == "run" for n, _ in spec["stages"])
        click.echo("dbfs: every stage's output already stored: no cluster to start"
                   + (", the searches run in this process" if searches else ""), err=True)
    with client_for(scheduler, n_workers=workers, profile=profile) as client:
        for kind, result in run_spec(spec, datasets, client):
            if kind == "generate":
                click.echo(f"dbfs: dataset {result}", err=True)
            elif kind == "build":
                click.echo(f"dbfs: CSR {result}", err=True)
            else:
                _print_run(result, spec["run_config"], datasets)
