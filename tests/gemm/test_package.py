"""The GEMM package as shipped: docstring examples run on CPU, the README's backend table is the
code's, and importing or calling on CPU loads neither MATE nor Triton."""

from __future__ import annotations

import doctest
import subprocess
import sys

import pytest

from flashinfer.gemm import (
    _bmm,
    _deepgemm_fp8_nt,
    _fp8_blockscale_gemm_sm90,
    _gemm_fp8_nt,
    _group_gemm_fp8_nt,
)


@pytest.mark.parametrize(
    "module",
    [_bmm, _gemm_fp8_nt, _deepgemm_fp8_nt, _group_gemm_fp8_nt, _fp8_blockscale_gemm_sm90],
    ids=lambda m: m.__name__,
)
def test_docstring_examples_run_on_cpu(module):
    results = doctest.testmod(module, raise_on_error=False)
    assert results.attempted > 0 and results.failed == 0


def test_import_and_cpu_call_load_neither_mate_nor_triton():
    code = (
        "import sys, torch, flashinfer.gemm as G\n"
        "A = torch.randn(1, 2, 16).to(torch.float8_e4m3fn)\n"
        "B = torch.randn(1, 16, 4).to(torch.float8_e4m3fn)\n"
        "G.bmm_fp8(A, B, torch.ones(1), torch.ones(1), torch.bfloat16)\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('mate', 'triton', 'torch_musa')\n"
        "          or m in ('flashinfer.gemm._cuda', 'flashinfer.gemm._mate')]\n"
        "print(loaded)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_routes_describe_every_op_on_every_implementation():
    from flashinfer._core.dispatch import KINDS
    from flashinfer.gemm import __all__ as public
    from flashinfer.gemm._dispatch import DISPATCH, ROUTES

    assert set(ROUTES) == set(public) - {"is_cuda_tile_available"}
    assert all(set(kinds) == set(KINDS) for kinds in ROUTES.values())
    assert set(DISPATCH.loaders) == set(KINDS)
