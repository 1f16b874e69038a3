"""Build hook: the wheel records the git commit it was built from (``flashinfer.__git_version__``).

A build from a git checkout writes ``flashinfer/_build_info.py`` into the wheel (and into the
sdist, whose wheel then ships it as it is) with the commit of ``HEAD`` (``+dirty`` when tracked
files have changes); a build without git or outside a checkout writes ``"unknown"``. Nothing is
written into the source tree.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_SHIPPED = "src/flashinfer/_build_info.py"


def _git(root: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    return result.stdout.strip() if result.returncode == 0 else ""


def git_commit(root: Path) -> str:
    try:
        commit = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}+dirty" if commit and dirty else commit or "unknown"


class BuildInfoHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        self._scratch = None
        if version == "editable" or (Path(self.root) / _SHIPPED).exists():
            return  # an editable install reads the checkout; an unpacked sdist carries the commit
        self._scratch = tempfile.mkdtemp(prefix="flashinfer-build-info-")
        path = Path(self._scratch) / "_build_info.py"
        commit = git_commit(Path(self.root))
        path.write_text(f'"""Written by the build (hatch_build.py)."""\n\nGIT_COMMIT = {commit!r}\n')
        # the sdist keeps it where the wheel build of that sdist finds it among the sources
        target = "flashinfer/_build_info.py" if self.target_name == "wheel" else _SHIPPED
        build_data["force_include"][str(path)] = target

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
