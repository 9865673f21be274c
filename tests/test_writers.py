"""Writers of one dataset (processes, not threads) and a full disk: real zarr stores, real files."""
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dbfs import store
from dbfs.cli import cli
from dbfs.kernel1 import partitioned
from dbfs.spec import GraphSpec
from dbfs.store import write as store_write

REPO = Path(__file__).resolve().parents[1]
NAME8 = "kron-s8-ef16-s2-3"
NAME10 = "kron-s10-ef16-s2-3"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def dbfs(*args, stderr=None):
    """``dbfs ARGS`` as a separate process."""
    return subprocess.Popen([sys.executable, "-m", "dbfs.cli", *[str(a) for a in args]], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=stderr or subprocess.PIPE, text=True)


def wait_for(cond, timeout=60.0):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.05)


def temporaries(root: Path) -> list:
    return [p.name for p in root.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name or ".rm-" in p.name]


HOLDER = """
import os, sys
from pathlib import Path
from dbfs.store.locks import dataset_lock, writer_lock
root, name = Path(sys.argv[1]), sys.argv[2]
with writer_lock(dataset_lock(root, name), f"dataset {name}"):
    (root / f".{name}.tmp-live0001").mkdir()
    print("ready", flush=True)
    sys.stdin.read()
    os._exit(0)   # dies holding it: no cleanup, the kernel drops the lock
"""


def holder(root, name):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), name], cwd=REPO, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


# ---- two writers --------------------------------------------------------------------------------
def test_two_concurrent_generates_scale16(tmp_path):
    name = "kron-s16-ef16-s2-3"
    a = dbfs("generate", "--datasets", tmp_path, "--scale", 16, "--scheduler", "threads", "--chunk-edges", 1 << 16)
    wait_for(lambda: (tmp_path / f".{name}.lock").exists() or a.poll() is not None)
    b = dbfs("generate", "--datasets", tmp_path, "--scale", 16, "--scheduler", "threads", "--chunk-edges", 1 << 16)
    outs = [p.communicate(timeout=300) for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, outs
    assert outs[0][0].strip() == outs[1][0].strip() == name
    assert "waiting for pid" in outs[1][1] or "reusing" in outs[1][1], outs[1][1]
    assert "removing" not in outs[0][1] + outs[1][1]       # nobody removed the other's temporary directory
    assert store.status(tmp_path / name)[0] == "complete" and not temporaries(tmp_path)
    got = store.open_dataset(name, tmp_path).edges()[:]    # a whole read verifies edges_checksum too
    np.testing.assert_array_equal(got.astype(np.int64), GraphSpec.make(scale=16).edges())


def test_second_writer_waits_and_spares_the_live_temporary(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    h = holder(tmp_path, NAME8)
    log = tmp_path / "gen.err"
    with open(log, "w") as err:
        g = dbfs("generate", "--datasets", tmp_path, "--scale", 8, "--scheduler", "threads", stderr=err)
        wait_for(lambda: "waiting for pid" in log.read_text())
        assert f"pid {h.pid}" in log.read_text()
        time.sleep(0.5)
        assert (tmp_path / f".{NAME8}.tmp-live0001").is_dir() and g.poll() is None  # still waiting, temp intact
        h.stdin.close()                                   # the holder dies without cleaning up
        h.wait(timeout=30)
        out, _ = g.communicate(timeout=120)
    assert g.returncode == 0 and out.strip() == NAME8
    text = log.read_text()
    assert "lock on dataset" in text and "left by an interrupted earlier generation" in text
    assert store.status(tmp_path / NAME8)[0] == "complete" and not temporaries(tmp_path)


def test_stale_lock_of_a_dead_pid_is_taken_at_once(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / f".{NAME8}.lock").write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename,
                                                         "started": "2026-01-01T00:00:00+00:00"}))
    res = run("generate", "--datasets", tmp_path, "--scale", 8, "--scheduler", "threads")
    assert res.exit_code == 0 and "waiting" not in res.stderr
    assert not (tmp_path / f".{NAME8}.lock").exists()


def test_rm_refused_while_a_writer_holds_the_dataset(tmp_path):
    assert run("-q", "generate", "--datasets", tmp_path, "--scale", 8, "--scheduler", "threads").exit_code == 0
    h = holder(tmp_path, NAME8)
    try:
        res = run("datasets", "rm", NAME8, "--datasets", tmp_path)
        assert res.exit_code == 2 and f"being written by pid {h.pid}" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and (tmp_path / NAME8).is_dir()
    finally:
        h.stdin.close()
        h.wait(timeout=30)
    assert run("datasets", "rm", NAME8, "--datasets", tmp_path).exit_code == 0


def test_two_concurrent_builds(tmp_path):
    assert run("-q", "generate", "--datasets", tmp_path, "--scale", 12, "--scheduler", "threads").exit_code == 0
    name = "kron-s12-ef16-s2-3"
    ps = [dbfs("build", name, "--datasets", tmp_path, "-P", 2, "--scheduler", "threads") for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in ps]
    assert all(p.returncode == 0 for p in ps), outs
    assert run("datasets", "verify", name, "--datasets", tmp_path).exit_code == 0
    assert not temporaries(tmp_path)


# ---- a full disk --------------------------------------------------------------------------------
def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


def _no_space_line(res):
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and "Traceback" not in res.stderr, res.stderr
    err = [l for l in lines if l.startswith("dbfs: error:")]
    assert len(err) == 1 and "no space left on device" in err[0] and "needs up to" in err[0] and "free" in err[0]
    return err[0]


def test_enospc_while_generating_keeps_the_old_copy(tmp_path, monkeypatch):
    assert run("-q", "generate", "--datasets", tmp_path, "--scale", 10, "--chunk-edges", 4096,
               "--scheduler", "threads").exit_code == 0
    before = store.open_dataset(NAME10, tmp_path).edges()[:]
    calls = {"n": 0}
    real = store_write._write_block

    def filling(path, block, start):
        calls["n"] += 1
        if calls["n"] == 2:
            _enospc()
        return real(path, block, start)

    monkeypatch.setattr(store_write, "_write_block", filling)
    err = _no_space_line(run("generate", "--datasets", tmp_path, "--scale", 10, "--chunk-edges", 4096, "--force",
                             "--scheduler", "threads"))
    assert str(tmp_path) in err and f"dataset {NAME10}" in err
    assert not temporaries(tmp_path)
    np.testing.assert_array_equal(store.open_dataset(NAME10, tmp_path).edges()[:], before)
    monkeypatch.setattr(store_write, "_write_block", _enospc)
    _no_space_line(run("generate", "--datasets", tmp_path / "new", "--scale", 9, "--scheduler", "threads"))
    assert not (tmp_path / "new" / "kron-s9-ef16-s2-3").exists() and not temporaries(tmp_path / "new")


def test_enospc_while_building_and_in_run(tmp_path, monkeypatch):
    assert run("-q", "generate", "--datasets", tmp_path, "--scale", 10, "--scheduler", "threads").exit_code == 0
    monkeypatch.setattr(partitioned, "_task_write", _enospc)
    err = _no_space_line(run("build", NAME10, "--datasets", tmp_path, "--scheduler", "threads"))
    assert "CSR variant p1-block" in err
    assert not temporaries(tmp_path) and not (tmp_path / NAME10 / "csr" / "p1-block").exists()
    _no_space_line(run("run", "--datasets", tmp_path, "--scale", 10, "--roots", 2, "--scheduler", "threads"))
    assert not temporaries(tmp_path)
    assert run("datasets", "verify", NAME10, "--datasets", tmp_path).exit_code == 0


def test_enospc_while_exporting(tmp_path, monkeypatch):
    from dbfs.store import to_npy as store_export

    assert run("-q", "generate", "--datasets", tmp_path, "--scale", 10, "--scheduler", "threads").exit_code == 0
    monkeypatch.setattr(store_export, "_stream", _enospc)
    err = _no_space_line(run("export", NAME10, "--datasets", tmp_path, "--out", tmp_path / "out" / "e.npy"))
    assert "e.npy" in err and not list((tmp_path / "out").iterdir())


TMPFS_SCRIPT = r"""
set -u
mkdir -p "$MNT" && mount -t tmpfs -o size="$SIZE" tmpfs "$MNT" || exit 99
cp -a "$SRC/$NAME" "$MNT/$NAME"
"$PY" -m dbfs.cli build "$NAME" --datasets "$MNT" --scheduler threads; echo "build_rc=$?"
"$PY" -m dbfs.cli -q datasets verify "$NAME" --datasets "$MNT"; echo "verify_rc=$?"
echo "left=$(ls -A "$MNT" "$MNT/$NAME/csr" 2>/dev/null | grep -c -E 'tmp-|old-')"
"$PY" -m dbfs.cli export "$NAME" --datasets "$MNT" --out "$MNT/e.npy"; echo "export_rc=$?"
echo "npy=$(ls -A "$MNT" | grep -c npy)"
"""


def test_enospc_on_a_real_small_tmpfs(tmp_path):
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs `unshare -rm`: user and mount namespaces)")
    name = "kron-s12-ef16-s2-3"
    src = tmp_path / "src"
    assert run("-q", "generate", "--datasets", src, "--scale", 12, "--scheduler", "threads").exit_code == 0
    size = sum(f.stat().st_size for f in (src / name).rglob("*") if f.is_file())
    env = {**os.environ, "MNT": str(tmp_path / "mnt"), "SIZE": str(size + (192 << 10)), "SRC": str(src),
           "NAME": name, "PY": sys.executable, "PYTHONPATH": str(REPO)}
    p = subprocess.run([unshare, "-rm", "bash", "-c", TMPFS_SCRIPT], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    if p.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()[-200:]}")
    out = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l and l.split("=")[0].isidentifier())
    errs = [l for l in p.stderr.splitlines() if l.startswith("dbfs: error:")]
    assert "Traceback" not in p.stderr, p.stderr
    assert out["build_rc"] == "2" and out["export_rc"] == "2", p.stdout + p.stderr
    assert len(errs) == 2 and all("no space left on device" in e and "free" in e for e in errs), errs
    assert out["verify_rc"] == "0" and out["left"] == "0" and out["npy"] == "0", p.stdout + p.stderr
