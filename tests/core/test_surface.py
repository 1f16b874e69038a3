"""The public surface: root exports, versions, lazy imports, show-config."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import torch
from packaging.version import Version

import flashinfer

# Upstream v0.6.17 names (flashinfer-api.md §1.2-1.3, §2); ours must be a subset.
UPSTREAM_ROOT = {
    "bmm_bf16", "bmm_fp8", "autotune", "SfLayout", "next_positive_power_of_2", "gemm", "rope",
    "decode", "mla", "utils", "jit", "autotuner", "prefill", "BatchMLAPagedAttentionWrapper",
    "apply_rope_with_cos_sin_cache", "apply_rope_with_cos_sin_cache_inplace", "xqa_mla",
}  # fmt: skip
UPSTREAM_GEMM = {
    "SegmentGEMMWrapper", "bmm_bf16", "bmm_fp8", "bmm_mxfp8", "mm_bf16", "mm_fp4", "mm_fp8",
    "mm_mxfp8", "tgv_gemm_sm100", "group_gemm_mxfp4_nt_groupwise",
    "group_gemm_mxfp8_mxfp4_nt_groupwise", "group_gemm_nvfp4_nt_groupwise",
    "batch_deepgemm_fp8_nt_groupwise", "group_deepgemm_fp8_nt_groupwise", "gemm_fp8_nt_blockscaled",
    "gemm_fp8_nt_groupwise", "group_gemm_fp8_nt_groupwise", "fp8_blockscale_gemm_sm90",
    "mm_bf16_fp4", "prepare_bf16_fp4_weights", "tinygemm_bf16", "is_cuda_tile_available",
}  # fmt: skip


def test_root_exports():
    assert set(flashinfer.__all__) <= UPSTREAM_ROOT
    for name in flashinfer.__all__:
        assert hasattr(flashinfer, name), name
    assert flashinfer.bmm_fp8 is flashinfer.gemm.bmm_fp8
    assert flashinfer.bmm_bf16 is flashinfer.gemm.bmm_bf16
    for sub in ("gemm", "rope", "decode", "mla", "utils", "prefill", "jit", "autotuner"):
        assert getattr(flashinfer, sub).__name__ == f"flashinfer.{sub}"


def test_gemm_all_is_upstreams():
    assert set(flashinfer.gemm.__all__) <= UPSTREAM_GEMM
    for name in ("bmm_bf16", "bmm_fp8", "gemm_fp8_nt_groupwise", "group_deepgemm_fp8_nt_groupwise",
                 "batch_deepgemm_fp8_nt_groupwise"):  # fmt: skip
        assert name in flashinfer.gemm.__all__
        assert getattr(flashinfer.gemm.gemm_base, name) is getattr(flashinfer.gemm, name)


def test_decode_is_the_same_object_in_both_modules():
    import flashinfer.decode
    import flashinfer.mla

    assert (
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla
        is flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
    )
    assert (
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla.__name__
        == "trtllm_batch_decode_with_kv_cache_mla"
    )


def test_version_is_pep440_with_musa_label():
    for spelling in ("flashinfer-python", "flashinfer_python"):
        assert importlib.metadata.version(spelling) == flashinfer.__version__
    version = Version(flashinfer.__version__)
    assert version.local == "musa" and version.release == (0, 6, 17)
    for dist in ("flashinfer-core", "flashinfer-gemm", "flashinfer-mla"):
        assert Version(importlib.metadata.version(dist)).local == "musa"


def test_import_loads_no_optional_backend():
    code = (
        "import sys, flashinfer, flashinfer.gemm, flashinfer.rope, flashinfer.decode;"
        "loaded = [m for m in ('mate', 'torch_musa', 'triton') if m in sys.modules];"
        "print(','.join(loaded))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_readme_routing_tables_are_generated_from_the_routes():
    from pathlib import Path

    from flashinfer._config import routes_markdown

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = readme.split("--markdown -->\n", 1)[1].split("\n<!-- end of generated tables -->", 1)[0]
    assert block == routes_markdown(), "regenerate with: python -m flashinfer show-config --markdown"


def test_show_config_is_truthful_here():
    result = subprocess.run(
        [sys.executable, "-m", "flashinfer", "show-config"], capture_output=True, text=True, check=True
    )
    report = result.stdout
    assert torch.__version__ in report
    assert f"flashinfer-python    {flashinfer.__version__}" in report
    assert "MATE                 not installed" in report
    assert "on cpu -> reference" in report
    if not torch.cuda.is_available():
        assert "cuda:0" not in report
    for op in (
        "bmm_fp8",
        "gemm_fp8_nt_groupwise",
        "rope_quantize_fp8",
        "trtllm_batch_decode_with_kv_cache_mla",
    ):
        assert op in report
