"""``_flashinfer_parts``: on a partial install, importing a missing part of the ``flashinfer``
namespace names the distribution that ships it, and probes still see nothing.

Run in a subprocess whose path holds flashinfer-core and flashinfer-gemm only, with the finder
installed as ``_flashinfer_parts.pth`` installs it (the wheels themselves: tests/packaging).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[2] / "packages"

PROBE = """
import os, sys, torch  # torch first: its path entry may hold installed parts too
# an environment with every part installed (nox's editable installs): only core and gemm stay
parts = os.environ["PARTS_UNDER_TEST"].split(os.pathsep)
sys.path[:] = [p for p in sys.path if p in parts or not os.path.isdir(os.path.join(p or ".", "flashinfer"))]
import importlib.util, _flashinfer_parts
_flashinfer_parts.install()
_flashinfer_parts.install()  # once only
assert sum(isinstance(f, _flashinfer_parts.MissingPartFinder) for f in __import__("sys").meta_path) == 1
assert importlib.util.find_spec("flashinfer.mla") is None  # a probe is not an import
import flashinfer.gemm  # an installed part is found before the finder is asked
try:
    import flashinfer.nothing
except ModuleNotFoundError as e:
    assert str(e) == "No module named 'flashinfer.nothing'", e
import flashinfer.mla
"""


def test_a_missing_part_names_its_distribution():
    path = os.pathsep.join(str(PACKAGES / name / "src") for name in ("flashinfer-core", "flashinfer-gemm"))
    env = {**os.environ, "PYTHONPATH": path, "PARTS_UNDER_TEST": path}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=PACKAGES
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ModuleNotFoundError: No module named 'flashinfer.mla': it is shipped by the flashinfer-mla distribution"
    ), result.stderr
