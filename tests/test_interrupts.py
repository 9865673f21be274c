"""A Ctrl-C is never lost: a KeyboardInterrupt Python raised inside a finalizer ("Exception ignored") is
delivered again to the main thread (:func:`dbfs.cli._keep_interrupts`, installed by ``dbfs``'s entry point).

The case that made ``dbfs run`` finish with exit 0 after SIGINT: the signal landed while a Dask future's
``__del__`` ran, and Python printed the interrupt as ignored. Checked in a child process: with the hook, the
interrupt raised in a finalizer stops the loop after it (and prints no ignored-exception traceback); without
it, the loop runs on to its end.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
import sys
{install}
class Finalized:
    def __del__(self):
        raise KeyboardInterrupt
x = Finalized()
del x
try:
    for i in range(100_000_000):
        pass
    print("ran to the end")
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.parametrize("hooked", [True, False])
def test_an_interrupt_raised_in_a_finalizer_is_delivered_again(hooked):
    install = "from dbfs.cli import _keep_interrupts; _keep_interrupts()" if hooked else ""
    p = subprocess.run([sys.executable, "-c", CHILD.format(install=install)], capture_output=True, text=True,
                       timeout=120)
    if hooked:
        assert p.stdout.strip() == "interrupted", (p.stdout, p.stderr)
        assert "Exception ignored" not in p.stderr, p.stderr
    else:       # what Python does alone: the interrupt is printed as ignored and lost
        assert p.stdout.strip() == "ran to the end", (p.stdout, p.stderr)
        assert "Exception ignored" in p.stderr, p.stderr
