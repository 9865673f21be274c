"""The ``dbfs`` command group and what its commands share: the error
translation (every DbfsError is one line ``dbfs: error: <problem>: <fix>``,
exit 2), the common options, and the one rule for flags that do not apply
(refused in one line, never ignored).
"""
from __future__ import annotations

import click
from click.core import ParameterSource

from dbfs import __version__
from dbfs.backends import get_backend
from dbfs.errors import DbfsError
from dbfs.progress import set_quiet

class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DbfsError as e:
            click.echo(f"dbfs: error: {e}", err=True)
            ctx.exit(e.exit_code)


def _checked(kind):
    """Click callback: the --scheduler / --workers / --cluster value checked when read, before any work
    (:func:`dbfs.profiles.check_cluster_args`, :func:`dbfs.profiles.load_profile`)."""
    def check(ctx, param, value):
        if value is not None:
            from dbfs.profiles import check_cluster_args, load_profile  # deferred: dask (CLI start)

            if kind == "cluster":
                load_profile(value)
            else:
                check_cluster_args(**{kind: value})
        return value
    return check


datasets_opt = click.option("--datasets", "datasets", default=None, metavar="DIR",
                            help="Dataset root [default: $DBFS_DATASETS or ./datasets].")
scheduler_opt = click.option("--scheduler", default=None, metavar="ADDRESS", callback=_checked("scheduler"),
                             help="Join this Dask scheduler (tcp://host:port); 'threads' runs without a cluster. "
                                  "[default: start a LocalCluster of worker processes]")
_workers = click.option("--workers", type=int, default=None, show_default="one per core",
                        callback=_checked("n_workers"), help="Worker processes of the LocalCluster.")
_cluster = click.option("--cluster", "cluster_profile", default=None, metavar="NAME|FILE",
                        callback=_checked("cluster"),
                        help="Cluster profile (YAML; a packaged name, one in $DBFS_PROFILES, or a file), e.g. local-4x4.")


def workers_opt(f):
    return _workers(_cluster(f))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="dbfs")
@click.option("--quiet", "-q", is_flag=True, help="No status lines on stderr (errors and results only).")
def cli(quiet):
    """dbfs: Graph500 breadth-first search as a Dask pipeline."""
    set_quiet(quiet)


def _given(ctx=None) -> set:
    """The parameters the user set on the command line or through the environment."""
    ctx = ctx or click.get_current_context()
    return {k for k in ctx.params
            if ctx.get_parameter_source(k) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}


def _refuse(given: set, flags: dict, why: str) -> None:
    """A one-line error for the first of ``flags`` (param -> --flag) that was given."""
    for k, flag in flags.items():
        if k in given:
            raise DbfsError(f"{flag} does not apply {why}")


_CLUSTER_FLAGS = {"scheduler": "--scheduler", "workers": "--workers", "cluster_profile": "--cluster"}


def _check_cluster_flags(given: set, scheduler, cluster_profile) -> None:
    """--workers sizes a LocalCluster this command starts: refuse it when joining one."""
    if "workers" in given and (scheduler or cluster_profile):
        from dbfs.cluster import load_profile  # deferred: distributed (CLI start)

        if scheduler or load_profile(cluster_profile)["type"] != "local":
            raise DbfsError("--workers does not apply when joining a cluster (--scheduler, or a profile that is "
                            "not type: local): it sizes the LocalCluster dbfs starts; drop it")


# ---------------------------------------------------------------------------

def _need_gpu():
    """Fail early, in one line, when the GPU backend cannot run here (no CuPy or no GPU)."""
    reason = get_backend("gpu").unavailable()
    if reason:
        raise DbfsError(f"--backend gpu cannot run here: {reason}")
