"""The README's quick start, run as a newcomer runs it: a clean clone, a fresh virtual environment.

The two commands are read from the README's "Quick start" block and run unchanged, with the
fresh environment's ``bin`` first on ``PATH``. The environment sees this interpreter's torch
and tools through a ``.pth`` file (as in the other packaging tests), so the README's
``pip install torch==2.13.0 nox`` finds them installed and downloads nothing. The nested
``python -m nox`` runs every session again, except this test.

The base interpreter of the fresh environment may have a torch of its own (on CI it does),
which would hide sessions that look at the base interpreter instead of the environment that
runs nox (the defect of ``--system-site-packages``). So the test also checks which torch each
session saw. Only committed work is tested: the clone is of ``HEAD``.
"""

from __future__ import annotations

import os
import re
import subprocess
import venv
from pathlib import Path

import pytest
import torch
from conftest import ROOT, check

NOXFILE = ROOT / "noxfile.py"

NESTED = "FLASHINFER_IN_README_TEST"  # set for the nested run; tests/packaging/conftest.py reads it
PINNED_TORCH = "2.13.0"


def quick_start_commands() -> list[str]:
    section = (ROOT / "README.md").read_text().split("\n## Quick start\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_quick_start_block_is_the_two_commands():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    assert "python examples/fp8_mla_decode.py" in commands[0]
    assert commands[1].endswith("python -m nox")


def test_install_lines_bound_torch():
    """Every install command of the README's Install table bounds torch (an unbounded one let pip
    pull a newer, untested CUDA build), within the versions the distributions declare."""
    section = (ROOT / "README.md").read_text().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"`(pip install [^`]*)`", section.split("\n\n", 2)[1])
    assert len(commands) == 3, commands
    for command in commands:
        assert '"torch>=2.11,<2.14"' in command, command


def _folder_size(path: Path) -> int:
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.mark.skipif(
    torch.__version__.split("+")[0] != PINNED_TORCH,
    reason=f"the quick start pins torch {PINNED_TORCH}; this machine has {torch.__version__}, "
    "and installing the pin here would download a multi-GB build",
)
def test_quick_start_in_a_fresh_venv_from_a_clean_clone(tmp_path, host_site):
    clone = tmp_path / "clone"
    check(["git", "clone", "-q", "--no-checkout", str(ROOT), str(clone)])
    head = check(["git", "-C", str(ROOT), "rev-parse", "HEAD"]).strip()
    check(["git", "-C", str(clone), "checkout", "-q", head])

    env_path = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_path)
    site = next((env_path / "lib").glob("python*/site-packages"))
    (site / "zz_host_tools.pth").write_text(f"{host_site}\n")
    bin_dir = env_path / "bin"
    # The venv's own old setuptools would shadow the one torch was installed with.
    check([bin_dir / "python", "-m", "pip", "uninstall", "-y", "-q", "setuptools"])

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(env_path), PYTHONNOUSERSITE="1")
    env.update({NESTED: "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    for command in quick_start_commands():
        result = subprocess.run(
            ["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=2400
        )
        assert result.returncode == 0, f"{command} failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
        if "examples/" in command:
            assert result.stdout.rstrip().endswith("OK"), result.stdout

    nox_dir = clone / ".nox"
    saw_torch = {}
    for pth in nox_dir.glob("*/lib/python*/site-packages/zz_invoking_python.pth"):
        python = pth.parents[3] / "bin" / "python"
        code = "import importlib.util as u; print(u.find_spec('torch').origin)"
        saw_torch[pth.parents[3].name] = check([python, "-c", code]).strip()
    # the `triton` session runs once per release of noxfile.py's TRITON_RELEASES
    releases = re.findall(r'"([\d.]+)"', re.search(r"TRITON_RELEASES = \[(.*?)\]", NOXFILE.read_text())[1])
    expected = {"tests-core", "tests-gemm", "tests-mla", "tests-integration", "packaging", "example"}
    expected |= {f"triton-release-{release.replace('.', '-')}" for release in releases}
    assert set(saw_torch) == expected, saw_torch
    for session, origin in saw_torch.items():
        assert origin.startswith(str(host_site)), f"{session} saw torch at {origin}, not the fresh venv's"

    # each release installed once, shared by the sessions that need it (3.6.0: the kernel sessions too)
    installed = sorted(
        path.name[len("triton-") : -len(".dist-info")] for path in nox_dir.glob("*/triton-*.dist-info")
    )
    assert installed == sorted(releases), f"Triton installs under .nox: {installed}"
    assert list(nox_dir.glob("*/lib/python*/site-packages/triton")) == [], (
        "a session installed its own Triton"
    )
    # no session holds a copy of torch: beside the Triton releases (0.6-1.0 GB each) .nox stays small
    tritons = sum(_folder_size(folder) for folder in nox_dir.glob("_triton-*"))
    assert tritons < len(releases) * 1.2 * 2**30, f"the Triton releases take {tritons / 2**20:.0f} MiB"
    rest = _folder_size(nox_dir) - tritons
    assert rest < 2**30, f".nox holds {rest / 2**20:.0f} MiB beside the Triton releases"
