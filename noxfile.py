"""Test sessions: one per distribution, packaging, lint and the example.

Sessions reuse the installed torch (virtualenv with system site packages) so nothing
downloads torch per session; each session installs this repository's distributions into
its own environment, editable.
"""

import nox

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

PACKAGES = ["core", "gemm", "mla", "python"]
TEST_REQUIREMENTS = "requirements-test.txt"
SITE = ["--system-site-packages"]


def install_all_editable(session):
    session.install("-r", TEST_REQUIREMENTS)
    args = []
    for name in PACKAGES:
        args += ["-e", f"packages/flashinfer-{name}"]
    session.install("--no-deps", *args)


def run_tests(session, folder):
    install_all_editable(session)
    session.run("python", "-m", "pytest", f"tests/{folder}", "-q", *session.posargs)


@nox.session(name="tests-core", venv_params=SITE)
def tests_core(session):
    """flashinfer-core and the metapackage: utils, dispatch, MATE loading, show-config, surface."""
    run_tests(session, "core")


@nox.session(name="tests-gemm", venv_params=SITE)
def tests_gemm(session):
    """flashinfer-gemm: the five GEMM APIs, the MATE adapter, Triton kernels under the interpreter."""
    run_tests(session, "gemm")


@nox.session(name="tests-mla", venv_params=SITE)
def tests_mla(session):
    """flashinfer-mla: RoPE + FP8 quantize, sparse and dense MLA decode, metadata, MATE adapter."""
    run_tests(session, "mla")


@nox.session(name="tests-integration", venv_params=SITE)
def tests_integration(session):
    """Cross-package checks: the caller patterns end to end, hardening, fuzzing."""
    run_tests(session, "integration")


@nox.session(venv_params=SITE)
def packaging(session):
    """Build the four wheels and install them in fresh environments in every combination."""
    session.install("-r", TEST_REQUIREMENTS)
    session.run("python", "-m", "pytest", "tests/packaging", "-q", *session.posargs)


@nox.session(venv_params=SITE)
def lint(session):
    """ruff: lint and format check."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(venv_params=SITE)
def example(session):
    """Run the end-to-end example (RoPE -> FP8 -> sparse decode) on the best device present."""
    install_all_editable(session)
    session.run("python", "examples/fp8_mla_decode.py")
