"""Test sessions: one per distribution, packaging, lint and the example (the defaults, which run on
a CPU), and ``gpu`` / ``gpu-slow`` for ``tests/gpu`` on a CUDA machine (``nox -s gpu``).

Every session sees the packages of the Python that runs nox, be it a virtual environment or
the system's, so nothing downloads torch per session. A session is a plain virtual
environment whose ``zz_invoking_python.pth`` lists that interpreter's package folders.
``--system-site-packages`` cannot do this: it shows the *base* interpreter's packages, which
lack torch when nox runs from a virtual environment.

What a session needs beyond that, the invoking Python lacking it, is installed once under
``.nox`` and listed in the same ``.pth`` file, ahead of the invoking Python's folders: the
test tools of ``requirements-test.txt`` for every session, and Triton (about 640 MB) only
for the sessions whose tests run Triton kernels. The sessions themselves hold only the
editable installs of this repository.
"""

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import nox
from packaging.requirements import Requirement  # a dependency of nox itself

nox.options.sessions = [
    "tests-core",
    "tests-gemm",
    "tests-mla",
    "tests-integration",
    "triton",
    "packaging",
    "lint",
    "example",
]
nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).resolve().parent
PACKAGES = ["core", "gemm", "mla", "python"]
TEST_REQUIREMENTS = ROOT / "requirements-test.txt"
# The distributions' `triton` extra (the tests also need 3.4+, FastLaunch's protocol), and
# the version installed where the invoking Python has none: the H200's.
TRITON = "triton>=3.6"
TRITON_INSTALLED = "triton==3.6.0"
# The releases PyTorch ships (torch 2.11: 3.6.0, 2.12: 3.7.0, 2.13: 3.7.1, 2.14: 3.8.x) and PyPI's
# newest: the `triton` session runs the release-sensitive tests under each.
TRITON_RELEASES = ["3.6.0", "3.7.1", "3.8.0", "3.9.0"]
# What differs between releases: the launch protocol (against each release's own launcher), the
# portable kernels under each interpreter, every Gluon variant compiled for sm_90
TRITON_RELEASE_TESTS = [
    "tests/core/test_triton_launch.py",
    "tests/core/test_triton_compat.py",
    "tests/gemm/triton",
    "tests/mla/triton",
    "tests/gemm/test_gluon_compile.py",
    "tests/mla/test_gluon_decode_compile.py",
]
PTH_NAME = "zz_invoking_python.pth"  # sorts after the editable installs' .pth files


def invoking_python_paths() -> list[str]:
    """The folders of installed packages on this interpreter's ``sys.path``.

    Leaves out the standard library (every session has its own) and this repository's own
    folders (its root, and the ``src`` folders an editable install of it adds).
    """
    packages = str(ROOT / "packages") + os.sep
    kept = []
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        if not os.path.isdir(real) or real == str(ROOT) or real.startswith(packages):
            continue
        if os.path.basename(real) == "lib-dynload" or os.path.isfile(os.path.join(real, "os.py")):
            continue  # the standard library
        if real not in kept:
            kept.append(real)
    return kept


def missing(requirements: list[str]) -> list[str]:
    """The requirements the invoking Python does not satisfy."""
    absent = []
    for line in requirements:
        requirement = Requirement(line)
        try:
            if requirement.specifier.contains(importlib.metadata.version(requirement.name), prereleases=True):
                continue
        except importlib.metadata.PackageNotFoundError:
            pass
        absent.append(line)
    return absent


def shared_install(session, name: str, requirements: list[str]) -> list[str]:
    """A folder under ``.nox`` holding ``requirements`` (installed on first use), or none
    when the invoking Python satisfies them all."""
    if not requirements:
        return []
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    folder = Path(session.virtualenv.location).parent / f"_{name}-{key}"
    if not (folder / ".complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        session.run("python", "-m", "pip", "install", "-q", "--target", str(folder), *requirements)
        (folder / ".complete").touch()
    return [str(folder)]


def test_requirements() -> list[str]:
    lines = (line.split("#")[0].strip() for line in TEST_REQUIREMENTS.read_text().splitlines())
    return [line for line in lines if line]


def see_invoking_python(session, triton: bool = False, release: str | None = None) -> None:
    """Make the session see the test tools, the invoking Python's packages and, where asked,
    Triton: ``release`` (installed once under ``.nox``, ahead of any Triton the invoking Python
    has), else the invoking Python's own where it satisfies ``TRITON``, else ``TRITON_INSTALLED``."""
    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is None:
        session.error(
            f"torch is not installed in the Python that runs nox ({sys.executable}); "
            "install it there first: pip install torch==2.13.0 nox (see the README)"
        )
    site_dir = session.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
    ).strip()
    folders = shared_install(session, "tools", missing(test_requirements()))
    if release is not None:
        folders = shared_install(session, "triton", [f"triton=={release}"]) + folders
    elif triton and missing([TRITON]):
        folders += shared_install(session, "triton", [TRITON_INSTALLED])
    lines = folders + invoking_python_paths()
    Path(site_dir, PTH_NAME).write_text("".join(line + "\n" for line in lines))
    seen = session.run(
        "python", "-c", "import importlib.util as u; print(u.find_spec('torch').origin)", silent=True
    ).strip()
    if os.path.realpath(seen) != os.path.realpath(torch_spec.origin):
        session.error(f"the session sees torch at {seen}, not the invoking Python's {torch_spec.origin}")


def install_all_editable(session):
    args = ["--no-deps", "--no-build-isolation"]  # hatchling comes with the test tools
    for name in PACKAGES:
        args += ["-e", f"packages/flashinfer-{name}"]
    session.install(*args)


def run_tests(session, folder, triton=False):
    see_invoking_python(session, triton=triton)
    install_all_editable(session)
    session.run("python", "-m", "pytest", f"tests/{folder}", "-q", *session.posargs)


@nox.session(name="tests-core")
def tests_core(session):
    """flashinfer-core and the metapackage: utils, dispatch, MATE loading, show-config, surface."""
    run_tests(session, "core", triton=True)


@nox.session(name="tests-gemm")
def tests_gemm(session):
    """flashinfer-gemm: the five GEMM APIs, the MATE adapter, Triton kernels under the interpreter."""
    run_tests(session, "gemm", triton=True)


@nox.session(name="tests-mla")
def tests_mla(session):
    """flashinfer-mla: RoPE + FP8 quantize, sparse and dense MLA decode, metadata, MATE adapter."""
    run_tests(session, "mla", triton=True)


@nox.session(name="tests-integration")
def tests_integration(session):
    """Cross-package checks: the caller patterns end to end, hardening, fuzzing."""
    run_tests(session, "integration")


@nox.session(name="triton")
@nox.parametrize("release", TRITON_RELEASES)
def triton_releases(session, release):
    """The release-sensitive tests under each Triton release users get (``TRITON_RELEASES``), each
    in its own environment: FastLaunch's protocol against that release's launcher, the portable
    kernels under its interpreter, every Gluon kernel variant compiled for sm_90 (no GPU needed)."""
    see_invoking_python(session, release=release)
    install_all_editable(session)
    seen = session.run("python", "-c", "import triton; print(triton.__version__)", silent=True).split()[-1]
    if seen != release:
        session.error(f"the session sees Triton {seen}, not {release}")
    # each folder in its own pytest process: tests/core and tests/{gemm,mla}/triton set
    # TRITON_INTERPRET before Triton's first import, the compile tests compile in a subprocess
    for folder in TRITON_RELEASE_TESTS:
        workers = ["-n", "2"] if folder.endswith("/triton") else []  # the interpreted kernels: CPU-bound
        session.run(
            "python", "-m", "pytest", folder, "-q", "-p", "no:cacheprovider", *workers, *session.posargs
        )


def run_gpu_tests(session, marker):
    """``tests/gpu`` on its own (compiled Triton kernels: never under ``TRITON_INTERPRET``, which
    the CPU folders set when collected in the same run), with pytest-xdist workers where it is
    installed (``-n 8``; posargs replace it, e.g. ``-- -n 0``)."""
    see_invoking_python(session, triton=True)
    install_all_editable(session)
    probe = "import torch; print(int(torch.cuda.is_available()), torch.cuda.device_count())"
    available, count = session.run("python", "-c", probe, silent=True).split()[-2:]
    if available != "1":
        session.error(
            f"the {session.name} session needs a CUDA device; torch sees none (device count {count})"
        )
    workers = []
    if not any(arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in session.posargs):
        has_xdist = session.run(
            "python",
            "-c",
            "import importlib.util as u; print(int(u.find_spec('xdist') is not None))",
            silent=True,
        ).split()[-1]
        workers = ["-n", "8"] if has_xdist == "1" else []
    env = {"TRITON_INTERPRET": "0"}
    session.run(
        "python", "-m", "pytest", "tests/gpu", "-q", "-m", marker, *workers, *session.posargs, env=env
    )


@nox.session(name="gpu")
def gpu(session):
    """tests/gpu without the long tail: the op table on CUDA per kernel tier (real sizes, error
    inputs), graphs, memory, routing, sanitizer cases. Needs a CUDA GPU; not a default session."""
    run_gpu_tests(session, "not slow")


@nox.session(name="gpu-slow")
def gpu_slow(session):
    """tests/gpu's long tail (``slow``): the largest real-size rows and every kernel configuration.
    Needs a CUDA GPU; not a default session."""
    run_gpu_tests(session, "slow")


@nox.session
def packaging(session):
    """Build the wheels and sdists, install them in fresh environments, run the README's quick start."""
    see_invoking_python(session)
    session.run("python", "-m", "pytest", "tests/packaging", "-q", *session.posargs)


@nox.session
def lint(session):
    """ruff: lint and format check."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def example(session):
    """Run the end-to-end example (RoPE -> FP8 -> sparse decode) on the best device present."""
    see_invoking_python(session)
    install_all_editable(session)
    session.run("python", "examples/fp8_mla_decode.py")
