"""``DBFS_REQUIRE_GPU=1`` (set on the GPU machines): a ``gpu`` test skipped for a missing GPU stack fails.

A test marked ``gpu`` skips where cupy, dask-cuda, NCCL or a CUDA device is missing, which is right on a
machine without a GPU and wrong on one with: there the skip hides a broken install. With the variable
set, such a skip (its reason names a module that could not be imported, a missing CUDA device or NCCL)
is reported as a failure with the skip's reason. Other skips (e.g. a test that needs two GPUs on a
one-GPU machine) stay skips.
"""
import os
import re

import pytest

_MISSING = re.compile(r"could not import|no CUDA device|NCCL|No module named", re.I)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.skipped or os.environ.get("DBFS_REQUIRE_GPU") != "1" or item.get_closest_marker("gpu") is None:
        return
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    if _MISSING.search(reason):
        rep.outcome = "failed"
        rep.longrepr = f"DBFS_REQUIRE_GPU=1, but this gpu test was skipped: {reason}"
