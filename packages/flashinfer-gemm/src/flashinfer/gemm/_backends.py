"""The backend names each GEMM accepts, and what each name means on each device.

A name never picks a different implementation module: the tensor's device does (see
:mod:`flashinfer._core.dispatch`). A name only selects FlashInfer's name-specific rules in the
API layer (``cutlass`` + e5m2 is an error, ``trtllm`` reads its scales by a different memory
convention, ``tgv`` only writes bf16, ...). Every name runs on every device, so the hooks
``is_backend_supported`` / ``is_compute_capability_supported`` answer True for every known name
and capability; a call that a known name cannot serve raises
:class:`flashinfer.utils.BackendSupportedError` from the op itself (``mubin`` without
``output_scale``).
"""

from __future__ import annotations

from flashinfer._core.backends import BackendTable

_REFERENCE = "reference (float32 PyTorch)"

BMM_BF16 = BackendTable(
    function="bmm_bf16",
    upstream=("cudnn", "cutlass", "cutile", "tgv", "auto"),
    mate=("mudnn",),
    meaning={
        "cudnn": {"cpu": _REFERENCE, "cuda": "cuBLAS (torch.bmm)", "musa": "MATE muDNN"},
        "cutlass": {"cpu": _REFERENCE, "cuda": "cuBLAS (torch.bmm)", "musa": "MATE muDNN"},
        "cutile": {"cpu": _REFERENCE, "cuda": "cuBLAS (torch.bmm)", "musa": "MATE muDNN"},
        "tgv": {
            "cpu": _REFERENCE + "; bf16 output only",
            "cuda": "cuBLAS (torch.bmm); bf16 output only",
            "musa": "MATE muDNN; bf16 output only",
        },
        "auto": {"cpu": _REFERENCE, "cuda": "cuBLAS (torch.bmm)", "musa": "MATE muDNN"},
        "mudnn": {"cpu": _REFERENCE, "cuda": "cuBLAS (torch.bmm)", "musa": "MATE muDNN"},
    },
)

BMM_FP8 = BackendTable(
    function="bmm_fp8",
    upstream=("cudnn", "cublas", "cutlass", "auto"),
    mate=("mudnn",),
    meaning={
        "cudnn": {"cpu": _REFERENCE, "cuda": "torch._scaled_mm (cuBLASLt) or Triton", "musa": "MATE muDNN"},
        "cublas": {"cpu": _REFERENCE, "cuda": "torch._scaled_mm (cuBLASLt) or Triton", "musa": "MATE muDNN"},
        "cutlass": {
            "cpu": _REFERENCE + "; no e5m2",
            "cuda": "torch._scaled_mm (cuBLASLt) or Triton; no e5m2",
            "musa": "MATE muDNN; no e5m2",
        },
        "auto": {"cpu": _REFERENCE, "cuda": "torch._scaled_mm (cuBLASLt) or Triton", "musa": "MATE muDNN"},
        "mudnn": {"cpu": _REFERENCE, "cuda": "torch._scaled_mm (cuBLASLt) or Triton", "musa": "MATE muDNN"},
    },
)

_GROUPWISE_CUDA = "torch._scaled_mm blockwise (sm90) or Triton"
_FP8_OUTPUT = "; with `output_scale`: FP8 E4M3 output"

GEMM_FP8_NT_GROUPWISE = BackendTable(
    function="gemm_fp8_nt_groupwise",
    upstream=("cutlass", "trtllm", "cutile"),
    mate=("auto", "mudnn", "mubin"),
    meaning={
        "cutlass": {
            "cpu": _REFERENCE + "; scale_major_mode required" + _FP8_OUTPUT,
            "cuda": _GROUPWISE_CUDA + "; scale_major_mode required" + _FP8_OUTPUT,
            "musa": "MATE muDNN (MATE MUBIN with `output_scale`); scale_major_mode required",
        },
        "trtllm": {
            "cpu": _REFERENCE + "; trtllm scale layout" + _FP8_OUTPUT,
            "cuda": _GROUPWISE_CUDA + "; trtllm scale layout" + _FP8_OUTPUT,
            "musa": "MATE muDNN (MATE MUBIN with `output_scale`); trtllm scale layout",
        },
        "cutile": {
            "cpu": _REFERENCE + "; K-major scales, (1, 128, 128) only" + _FP8_OUTPUT,
            "cuda": _GROUPWISE_CUDA + "; K-major scales, (1, 128, 128) only" + _FP8_OUTPUT,
            "musa": "MATE muDNN (MATE MUBIN with `output_scale`); K-major scales, (1, 128, 128) only",
        },
        "auto": {
            "cpu": _REFERENCE + _FP8_OUTPUT,
            "cuda": _GROUPWISE_CUDA + _FP8_OUTPUT,
            "musa": "MATE muDNN; MATE MUBIN with `output_scale`",
        },
        "mudnn": {
            "cpu": _REFERENCE + _FP8_OUTPUT,
            "cuda": _GROUPWISE_CUDA + _FP8_OUTPUT,
            "musa": "MATE muDNN (MATE MUBIN with `output_scale`)",
        },
        "mubin": {
            "cpu": _REFERENCE + "; FP8 E4M3 output, needs `output_scale`",
            "cuda": "Triton blockwise kernel; FP8 E4M3 output, needs `output_scale`",
            "musa": "MATE MUBIN; FP8 E4M3 output, needs `output_scale`",
        },
    },
)

GROUP_DEEPGEMM_FP8_NT_GROUPWISE = BackendTable(function="group_deepgemm_fp8_nt_groupwise")

BATCH_DEEPGEMM_FP8_NT_GROUPWISE = BackendTable(function="batch_deepgemm_fp8_nt_groupwise")

TABLES = {
    table.function: table
    for table in (
        BMM_BF16,
        BMM_FP8,
        GEMM_FP8_NT_GROUPWISE,
        GROUP_DEEPGEMM_FP8_NT_GROUPWISE,
        BATCH_DEEPGEMM_FP8_NT_GROUPWISE,
    )
}
