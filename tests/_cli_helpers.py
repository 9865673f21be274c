"""CLI helpers shared by test modules: a click runner and the one-line-error check."""
from click.testing import CliRunner

from dbfs.cli import cli


def run(*args, env=None):
    """``dbfs ARGS`` through click's runner (exceptions propagate)."""
    return CliRunner(env=env).invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_line_error(res, *needles):
    """Exit 2 and exactly one stderr line, ``dbfs: error: ...``, holding every needle."""
    err = [l for l in res.stderr.splitlines() if l.startswith("dbfs: error:")]
    assert res.exit_code == 2, res.output + res.stderr
    assert len(err) == 1 and "Traceback" not in res.stderr, res.stderr
    for n in needles:
        assert n in err[0], err[0]
    return err[0]
