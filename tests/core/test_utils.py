"""flashinfer.utils and the small upstream modules callers probe for."""

from __future__ import annotations

import os

import pytest
import torch

import flashinfer.utils as utils
from flashinfer.autotuner import autotune, is_tuning
from flashinfer.jit import MissingJITCacheError, build_jit_specs
from flashinfer.jit.gemm import gen_fp8_blockscale_gemm_sm90_module
from flashinfer.tllm_enums import SfLayout


def test_exception_classes_are_exceptions():
    for cls in (utils.BackendSupportedError, utils.GPUArchitectureError, utils.LibraryError):
        assert issubclass(cls, Exception) and not issubclass(cls, ValueError)
    err = MissingJITCacheError("missing", spec="spec")
    assert isinstance(err, RuntimeError) and err.spec == "spec"


def test_jit_warm_up_of_upstream_tests_has_nothing_to_build():
    # tests/gemm/test_fp8_blockscale_gemm.py: an autouse fixture builds its module unless a JIT
    # cache is installed; here nothing is built ahead of time
    assert utils.has_flashinfer_jit_cache() is False
    spec = gen_fp8_blockscale_gemm_sm90_module()
    assert spec.name == "fp8_blockscale_gemm_sm90"
    assert build_jit_specs([spec], verbose=False) is None


def test_compute_capability_on_cpu_keeps_upstreams_error():
    with pytest.raises(ValueError, match="device must be a cuda device"):
        utils.get_compute_capability(torch.device("cpu"))


def test_sm_count_on_cpu_is_the_core_count():
    assert utils.get_device_sm_count(torch.device("cpu")) == (os.cpu_count() or 1)


@pytest.mark.parametrize(("batch", "heads", "sms"), [(1, 1, 132), (4, 128, 132), (128, 128, 78), (3, 5, 7)])
def test_counter_bytes(batch, heads, sms):
    need = max(batch * heads, sms)
    padded = need if need % 8 == 0 else need + (8 - need % 8)
    assert utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(batch, heads, sms) == padded * 4


@pytest.mark.parametrize(("x", "expected"), [(0, 1), (1, 1), (2, 2), (3, 4), (64, 64), (65, 128)])
def test_next_positive_power_of_2(x, expected):
    assert utils.next_positive_power_of_2(x) == expected


def test_round_up_and_ceil_div():
    assert [utils.round_up(x, 8) for x in (1, 8, 9)] == [8, 8, 16]
    assert [utils.ceil_div(x, 128) for x in (1, 128, 129)] == [1, 1, 2]


def test_host_integer_helpers_match_tritons():
    """The kernels' launchers use these on the host instead of Triton's constexpr functions."""
    import triton

    for n in range(1, 300):
        assert utils.next_positive_power_of_2(n) == triton.next_power_of_2(n)
        for d in (1, 3, 16, 128):
            assert utils.ceil_div(n, d) == triton.cdiv(n, d)


def test_architecture_probes_are_false_off_cuda():
    cpu = torch.device("cpu")
    for probe in (
        utils.is_sm90a_supported,
        utils.is_sm100a_supported,
        utils.is_sm100f_supported,
        utils.is_sm110a_supported,
        utils.is_sm120a_supported,
        utils.is_sm121a_supported,
        utils.device_support_pdl,
    ):
        assert probe(cpu) is False


def test_backend_requirement_gate():
    @utils.supported_compute_capability([90, 100])
    def check_fast(x, backend):
        return x.shape[0] > 0

    @utils.backend_requirement({"fast": check_fast})
    def op(x, backend="fast"):
        return x

    assert op.is_backend_supported("fast") and op.is_backend_supported("fast", 90)
    assert not op.is_backend_supported("fast", 80) and not op.is_backend_supported("slow")
    assert op.is_compute_capability_supported(100) and not op.is_compute_capability_supported(89)
    assert op.has_backend_choices() and op.has_backend("fast")
    x = torch.ones(2)
    with pytest.raises(ValueError, match="device must be a cuda device"):
        op(x)
    assert op(x, skip_check=True) is x


def test_autotune_context_manager():
    assert not is_tuning()
    with autotune():
        assert is_tuning()
        with autotune(False):
            assert not is_tuning()
        assert is_tuning()
    assert not is_tuning()


def test_sf_layout_members():
    assert {m.name for m in SfLayout} == {"layout_128x4", "layout_8x4", "layout_linear"}
