"""Test sessions: one per distribution, packaging, lint and the example.

Every session sees the packages of the Python that runs nox, be it a virtual environment or
the system's, so nothing downloads torch per session. A session is a plain virtual
environment whose ``zz_invoking_python.pth`` lists that interpreter's package folders; they
come after the session's own, so what a session installs (the test tools, this repository's
distributions, editable) wins. ``--system-site-packages`` cannot do this: it shows the *base*
interpreter's packages, which lack torch when nox runs from a virtual environment.

Triton (about 640 MB installed) is seen only by the sessions whose tests run Triton kernels:
from the Python that runs nox where it has a recent enough one, else from one copy installed
into ``.nox/_triton`` and shared by those sessions.
"""

import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

import nox
from packaging.requirements import Requirement  # a dependency of nox itself

nox.options.sessions = [
    "tests-core",
    "tests-gemm",
    "tests-mla",
    "tests-integration",
    "packaging",
    "lint",
    "example",
]
nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).resolve().parent
PACKAGES = ["core", "gemm", "mla", "python"]
TEST_REQUIREMENTS = "requirements-test.txt"
# The distributions' `triton` extra; the tests also need Triton 3.4+ (FastLaunch's protocol).
TRITON = Requirement("triton>=3.6")
PTH_NAME = "zz_invoking_python.pth"  # sorts after the editable installs' .pth files


def invoking_python_paths() -> list[str]:
    """The folders of installed packages on this interpreter's ``sys.path``.

    Leaves out the standard library (every session has its own) and this repository's own
    folders (its root, and the ``src`` folders an editable install of it adds).
    """
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib")}
    stdlib.add(os.path.join(os.path.realpath(paths["platstdlib"]), "lib-dynload"))
    packages = str(ROOT / "packages") + os.sep
    kept = []
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        if not os.path.isdir(real) or real in stdlib or real == str(ROOT) or real.startswith(packages):
            continue
        if real not in kept:
            kept.append(real)
    return kept


def triton_paths(session) -> list[str]:
    """Where a session that runs Triton kernels finds Triton (installing it once if needed)."""
    try:
        if TRITON.specifier.contains(importlib.metadata.version("triton"), prereleases=True):
            return []  # the invoking Python's own, already listed in the .pth file
    except importlib.metadata.PackageNotFoundError:
        pass
    shared = Path(session.virtualenv.location).parent / "_triton"
    if not (shared / "triton").is_dir():
        session.run("python", "-m", "pip", "install", "-q", "--no-deps", "--target", str(shared), str(TRITON))
    return [str(shared)]


def see_invoking_python(session, triton: bool = False) -> None:
    """Make the session see the invoking Python's packages (and Triton where asked)."""
    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is None:
        session.error(
            f"torch is not installed in the Python that runs nox ({sys.executable}); "
            "install it there first: pip install torch==2.13.0 nox (see the README)"
        )
    site_dir = session.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
    ).strip()
    extra = triton_paths(session) if triton else []
    Path(site_dir, PTH_NAME).write_text("".join(p + "\n" for p in invoking_python_paths() + extra))
    seen = session.run(
        "python", "-c", "import importlib.util as u; print(u.find_spec('torch').origin)", silent=True
    ).strip()
    if os.path.realpath(seen) != os.path.realpath(torch_spec.origin):
        session.error(f"the session sees torch at {seen}, not the invoking Python's {torch_spec.origin}")


def install_all_editable(session):
    session.install("-r", TEST_REQUIREMENTS)
    args = []
    for name in PACKAGES:
        args += ["-e", f"packages/flashinfer-{name}"]
    session.install("--no-deps", *args)


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


@nox.session
def packaging(session):
    """Build the wheels and sdists, install them in fresh environments, run the README's quick start."""
    see_invoking_python(session)
    session.install("-r", TEST_REQUIREMENTS)
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
