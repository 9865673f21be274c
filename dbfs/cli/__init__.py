"""The ``dbfs`` command (click): wiring only; the work lives in the stage modules.

Every user error is a :class:`~dbfs.errors.DbfsError`, printed as one line
``dbfs: error: <problem>: <fix>`` with exit code 2. Results go to stdout,
progress and the dashboard link to stderr. The commands live in
:mod:`dbfs.cli.data` (generate, datasets, export, build, validate),
:mod:`dbfs.cli.search` (run, bfs) and :mod:`dbfs.cli.admin` (cluster,
algorithms, pipeline); importing them registers them on :data:`cli`.
"""
from __future__ import annotations

from dbfs.cli import admin, data, search  # noqa: F401  (registers the commands)
from dbfs.cli.common import cli

__all__ = ["cli", "main"]


def main(argv=None):  # console-script entry point
    return cli.main(args=argv, prog_name="dbfs")
