"""DBFS_REQUIRE_GPU=1 turns a gpu test's skip for a missing GPU stack into a failure (tests/_require_gpu.py)."""
import subprocess
import sys
import textwrap

import pytest

_TESTS = textwrap.dedent('''
    import pytest

    @pytest.mark.gpu
    def test_needs_a_module():
        pytest.importorskip("dbfs_no_such_gpu_module")

    @pytest.mark.gpu
    def test_needs_two_gpus():
        pytest.skip("needs 2 GPUs")

    def test_not_gpu():
        pytest.importorskip("dbfs_no_such_gpu_module")
''')


@pytest.mark.parametrize("require", ["1", None])
def test_missing_gpu_stack_fails_only_when_required(tmp_path, require):
    from pathlib import Path

    (tmp_path / "test_probe.py").write_text(_TESTS)
    (tmp_path / "conftest.py").write_text("from _require_gpu import pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parent)}
    if require:
        env["DBFS_REQUIRE_GPU"] = require
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path).stdout
    if require:
        assert "1 failed, 2 skipped" in out, out
        assert "DBFS_REQUIRE_GPU=1, but this gpu test was skipped" in out, out
    else:
        assert "3 skipped" in out, out
