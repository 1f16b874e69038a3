"""Fixtures for the packaging tests: the four sdists and wheels, built once, and fresh environments.

A fresh environment is a plain ``venv`` (no system site packages) whose ``.pth`` file adds
one folder of symbolic links to what the running interpreter has installed (torch, the
build tools), leaving out everything of this repository. Lines of a ``.pth`` file only
extend ``sys.path``, so the environment sees exactly the flashinfer distributions
installed into it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = {
    "flashinfer-core": ROOT / "packages" / "flashinfer-core",
    "flashinfer-gemm": ROOT / "packages" / "flashinfer-gemm",
    "flashinfer-mla": ROOT / "packages" / "flashinfer-mla",
    "flashinfer-python": ROOT / "packages" / "flashinfer-python",
}
VERSION = "0.6.17+musa"

# test_readme.py runs `python -m nox` in a clone, whose packaging session would run it again.
collect_ignore = ["test_readme.py"] if os.environ.get("FLASHINFER_IN_README_TEST") else []


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, **kwargs)
    return result


def check(cmd, **kwargs) -> str:
    result = run(cmd, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Path:
    """Build each distribution's sdist, then its wheel from that sdist (no build isolation:
    hatchling comes from this environment), into one folder."""
    out = tmp_path_factory.mktemp("dist")
    for path in DISTRIBUTIONS.values():
        check([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(path)])
    return out


def _one_per_distribution(folder: Path, suffix: str) -> dict[str, Path]:
    found = {}
    for name in DISTRIBUTIONS:
        matches = list(folder.glob(name.replace("-", "_") + "-*" + suffix))
        assert len(matches) == 1, f"expected one {suffix} for {name}, found {matches}"
        found[name] = matches[0]
    return found


@pytest.fixture(scope="session")
def wheels(built) -> dict[str, Path]:
    """The four wheels, each built from its sdist."""
    return _one_per_distribution(built, ".whl")


@pytest.fixture(scope="session")
def sdists(built) -> dict[str, Path]:
    """The four source distributions."""
    return _one_per_distribution(built, ".tar.gz")


class Env:
    """A fresh virtual environment with torch visible and nothing of this repository."""

    def __init__(self, path: Path, find_links: Path | None):
        self.path = path
        self.python = path / "bin" / "python"
        self.find_links = find_links

    def pip(self, *args) -> str:
        return check([self.python, "-m", "pip", *args])

    def install(self, *names, editable=False) -> str:
        if editable:
            args = ["--no-build-isolation", "--no-index"]
            for name in names:
                args += ["-e", str(DISTRIBUTIONS[name])]
            return self.pip("install", "-q", *args)
        return self.pip("install", "-q", "--no-index", "--find-links", str(self.find_links), *names)

    def uninstall(self, *names) -> str:
        return self.pip("uninstall", "-y", "-q", *names)

    def python_ok(self, code: str) -> str:
        return check([self.python, "-c", code], cwd=self.path)

    def python_fails(self, code: str) -> str:
        result = run([self.python, "-c", code], cwd=self.path)
        assert result.returncode != 0, f"expected failure, got success:\n{result.stdout}"
        return result.stderr


def _is_ours(name: str) -> bool:
    return "flashinfer" in name.lower()


def package_folders() -> list[Path]:
    """The folders of installed packages this interpreter sees: every ``sys.path`` folder
    holding distribution metadata (a nox session also sees the invoking Python's, through a
    ``.pth`` file; see noxfile.py)."""
    folders = []
    for entry in sys.path:
        path = Path(os.path.abspath(entry or "."))
        if path.is_dir() and path not in folders and any(path.glob("*.dist-info")):
            folders.append(path)
    assert Path(os.path.abspath(torch.__file__)).parents[1] in folders, (torch.__file__, folders)
    return folders


@pytest.fixture(scope="session")
def host_site(tmp_path_factory) -> Path:
    """Links to the installed packages this interpreter sees, minus this repository's."""
    site = tmp_path_factory.mktemp("host-site")
    for source in package_folders():
        for entry in source.iterdir():
            target = site / entry.name
            if not _is_ours(entry.name) and not entry.name.endswith(".pth") and not target.exists():
                target.symlink_to(entry)
    return site


@pytest.fixture
def make_env(tmp_path, wheels, host_site):
    """Factory of fresh environments that can install the built wheels offline."""
    find_links = next(iter(wheels.values())).parent
    counter = [0]

    def make() -> Env:
        counter[0] += 1
        path = tmp_path / f"env{counter[0]}"
        venv.EnvBuilder(with_pip=True).create(path)
        site = next((path / "lib").glob("python*/site-packages"))
        (site / "zz_host_tools.pth").write_text(f"{host_site}\n")
        env = Env(path, find_links)
        # The venv's own old setuptools would shadow the one torch was installed with.
        env.uninstall("setuptools")
        return env

    return make
