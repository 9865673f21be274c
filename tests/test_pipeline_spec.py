"""`dbfs pipeline run FILE.yaml`: the shipped spec runs stage by stage and reuses stored outputs; bad specs are one line."""
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _small(tmp_path, scale=10, roots=4) -> Path:
    """pipelines/graph500.yaml with a smaller SCALE and fewer roots (the rest as shipped)."""
    text = (REPO / "pipelines" / "graph500.yaml").read_text()
    text = text.replace("scale: 16", f"scale: {scale}").replace("roots: 64", f"roots: {roots}")
    p = tmp_path / "g500.yaml"
    p.write_text(text)
    return p


def test_shipped_spec_parses():
    from dbfs.pipeline_spec import load_spec

    spec = load_spec(REPO / "pipelines" / "graph500.yaml")
    assert [n for n, _ in spec["stages"]] == ["generate", "build", "run"]
    assert spec["run_config"].n_roots == 64 and spec["run_config"].backend == "cpu"


def test_pipeline_run_reuses_stored_outputs(tmp_path, dbfs_cli):
    spec, ds = _small(tmp_path), tmp_path / "ds"
    first = dbfs_cli("pipeline", "run", spec, "--datasets", ds, "--scheduler", "threads")
    assert "SCALE:                          10" in first.stdout and "NBFS:                           4" in first.stdout
    assert "bfs  harmonic_mean_TEPS" in first.stdout
    name = "kron-s10-ef16-s2-3"
    csr = ds / name / "csr" / "p1-block" / "zarr.json"
    stamp = csr.stat().st_mtime_ns
    second = dbfs_cli("pipeline", "run", spec, "--datasets", ds, "--scheduler", "threads")
    assert "NBFS:                           4" in second.stdout
    assert csr.stat().st_mtime_ns == stamp, "the stored CSR must be reused, not rebuilt"


BAD = [
    ("stages: []", "'stages'"),
    ("stage: []", "unknown key 'stage'"),
    ("- 1\n- 2", "must be a mapping"),
    ("stages:\n  - generate: {scale: 8, sclae: 9}", "unknown key 'sclae'"),
    ("stages:\n  - build: {}", "first stage must be 'generate'"),
    ("stages:\n  - generate: {scale: 8}\n  - search: {}", "stage 2 is 'search'"),
    ("stages:\n  - generate: {scale: 8}\n  - run: {backend: cpu, energy: true}", "--energy"),
    ("stages: [", "not valid YAML"),
]


@pytest.mark.parametrize("text,words", BAD)
def test_bad_spec_is_one_line(text, words, tmp_path, dbfs_cli):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    res = dbfs_cli("pipeline", "run", p, "--datasets", tmp_path / "ds", "--scheduler", "threads", ok=False)
    err = res.stderr.strip()
    assert res.exit_code == 2 and len(err.splitlines()) == 1 and words in err, err
    assert not (tmp_path / "ds").exists()


def test_user_profile_folder(tmp_path, monkeypatch):
    from dbfs.cluster import load_profile, profile_names

    (tmp_path / "mine.yaml").write_text("type: local\nworkers: 1\nthreads_per_worker: 1\n")
    monkeypatch.setenv("DBFS_PROFILES", str(tmp_path))
    assert "mine" in profile_names() and load_profile("mine")["workers"] == 1
    (tmp_path / "typo.yaml").write_text("type: local\nmemory_limt: 1GB\n")
    with pytest.raises(Exception, match="unknown key 'memory_limt'"):
        load_profile("typo")


@pytest.mark.slow
def test_profiles_resolve_after_a_wheel_install(tmp_path):
    """A non-editable install (a built wheel in a fresh venv; the dependencies from this
    environment through a .pth path, whose editable dbfs finder is not loaded) finds the
    packaged profiles by name from any directory."""
    import site
    import shutil

    src, wheels = tmp_path / "src", tmp_path / "wheels"
    shutil.copytree(REPO / "dbfs", src / "dbfs", ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / f, src / f)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)],
                   check=True, timeout=600)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    inner = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    Path(inner, "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    whl = next(wheels.glob("dbfs-*.whl"))
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(whl)], check=True, timeout=600)
    code = ("import dbfs, dbfs.cluster as c; assert 'site-packages' in dbfs.__file__, dbfs.__file__; "
            "print(c.load_profile('local-4x4')['workers'], c.profile_names())")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("4 ") and "slurm" in p.stdout
