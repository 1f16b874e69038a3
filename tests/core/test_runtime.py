"""The shared runtime: dispatch, argument checks, backend hooks, lazy MATE loading."""

from __future__ import annotations

import inspect
import sys

import pytest
import torch

from flashinfer._core import checks, dispatch
from flashinfer._core import mate as mate_loader
from flashinfer._core.backends import BackendTable, gated
from flashinfer.utils import LibraryError


def test_implementation_kind_by_device(monkeypatch):
    monkeypatch.setattr(dispatch, "ROUTING", dispatch.ROUTING._replace(force_reference=False))
    assert dispatch.implementation_kind(torch.device("cpu")) == "reference"
    assert dispatch.implementation_kind("musa") == "mate"
    expected_cuda = "cuda" if dispatch.triton_available() else "reference"
    assert dispatch.implementation_kind("cuda") == expected_cuda
    assert dispatch.implementation_kind("meta") == "reference"


def test_force_reference_env(monkeypatch):
    from flashinfer.gemm._dispatch import DISPATCH

    forced = dispatch.ROUTING._replace(force_reference=True)
    monkeypatch.setattr(dispatch, "ROUTING", forced)
    assert dispatch.implementation_kind("musa") == "reference"
    assert dispatch.implementation_kind("cuda") == "reference"
    assert DISPATCH.module(torch.device("cuda", 0)).__name__ == "flashinfer.gemm._reference"
    monkeypatch.setattr(dispatch, "ROUTING", forced._replace(force_reference=False))
    assert dispatch.implementation_kind("musa") == "mate"
    expected_cuda = "cuda" if dispatch.triton_available() else "reference"
    assert DISPATCH.kind(torch.device("cuda", 0)) == expected_cuda  # the cache follows the routing


def test_force_reference_env_is_read_at_import():
    import subprocess
    import sys

    code = "from flashinfer._core import dispatch; print(dispatch.implementation_kind('musa'))"
    env = {**__import__("os").environ, dispatch.FORCE_REFERENCE_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "reference"


def test_check_messages_name_argument_expected_and_received():
    with pytest.raises(ValueError, match=r"expected dtype torch.bfloat16 for `A`, got dtype torch.float16"):
        checks.fail(ValueError, "A", "dtype torch.bfloat16", "dtype torch.float16")
    with pytest.raises(TypeError, match="expected a torch.Tensor for `seq_lens`, got 'x' \\(a str\\)"):
        checks.require_tensors(A=torch.zeros(1), out=None, seq_lens="x", optional=("out",))
    # None passes only for the optional names
    with pytest.raises(TypeError, match="expected a torch.Tensor for `A_scale`, got None"):
        checks.require_tensors(A=torch.zeros(1), out=None, A_scale=None, optional=("out",))
    # a caller's string value is quoted, never mistaken for a description
    assert checks.describe("bfloat16") == "'bfloat16' (a str)"
    # the last-dimension rule: unit stride, a last dimension of one element, or a 0-dim tensor
    for passes in (torch.zeros(3, 1)[:, ::2], torch.zeros(4, 6)[:, :3], torch.zeros(()), torch.zeros(3, 0)):
        checks.check_last_dim_contiguous(passes, "x")
    with pytest.raises(RuntimeError, match=r"last dimension is contiguous \(stride 1; why\) for `x`"):
        checks.check_last_dim_contiguous(torch.zeros(2, 3).t(), "x", RuntimeError, "why")


def test_overlap_detection():
    base = torch.zeros(10, 8)
    assert checks.overlaps(base[:5], base[4:])
    assert not checks.overlaps(base[:5], base[5:])
    assert not checks.overlaps(base, torch.zeros(10, 8))
    assert not checks.overlaps(torch.zeros(4, device="meta"), torch.zeros(4, device="meta"))  # no memory
    with pytest.raises(ValueError, match="expected a buffer that does not overlap `A` for `out`"):
        checks.check_no_overlap(base[2:4], "out", ("B", "A"), None, base[3:6])


def test_gated_hooks_hide_skip_check():
    table = BackendTable("op", upstream=("cublas", "auto"), mate=("mudnn",))

    @gated(table)
    def op(a, backend="auto", *, skip_check=False):
        return a

    assert list(inspect.signature(op).parameters) == ["a", "backend"]
    assert op(1, skip_check=True) == 1
    assert op.is_backend_supported("mudnn", 31) and op.is_backend_supported("cublas", 90)
    assert not op.is_backend_supported("cudnn")
    assert op.is_compute_capability_supported(90) and op.has_backend_choices()
    with pytest.raises(
        ValueError,
        match=r"expected one of \['cublas', 'auto', 'mudnn'\] \(op\) for `backend`, got 'nope' \(a str\)",
    ):
        table.check("nope")


def test_mate_missing(no_mate):
    assert mate_loader.find_function("mate.gemm", "bmm") is None
    with pytest.raises(LibraryError, match="not installed"):
        mate_loader.require_function("mate.gemm", "bmm", "bmm_fp8")


def test_unrelated_mate(unrelated_mate):
    assert mate_loader.mate_version() is None
    with pytest.raises(LibraryError, match="unrelated project"):
        mate_loader.require_function("mate.gemm", "bmm", "bmm_fp8")


def test_broken_mate_module_is_said_with_its_import_error(tmp_path, monkeypatch):
    """A MATE module whose own dependency is missing is not taken for an older MATE."""
    package = tmp_path / "mate"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "gemm.py").write_text("import mate_dependency_that_is_not_installed\n")
    for name in [n for n in sys.modules if n == "mate" or n.startswith("mate.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    mate_loader.reset_cache()
    try:
        with pytest.raises(LibraryError, match="mate.gemm is installed but fails to import.*mate_dependency"):
            mate_loader.require_function("mate.gemm", "bmm", "bmm_fp8")
        assert mate_loader.find_function("mate.deep_gemm", "m_grouped_gemm") is None  # absent: None
    finally:
        for name in [n for n in sys.modules if n == "mate" or n.startswith("mate.")]:
            del sys.modules[name]
        mate_loader.reset_cache()


def test_mate_too_old(mate_standin):
    with pytest.raises(LibraryError, match=r"needs mate.gemm.no_such_function.*install MATE 0.2.6 or newer"):
        mate_loader.require_function("mate.gemm", "no_such_function", "bmm_fp8")
    assert mate_loader.mate_version() is not None
