"""The backend names each GEMM accepts, and the rule each name keeps.

A name never picks a different implementation module: the tensor's device does (``ROUTES`` in
:mod:`._dispatch`). A name only selects FlashInfer's name-specific rules in the API layer
(``cutlass`` + e5m2 is an error, ``trtllm`` reads its scales by a different memory convention,
``tgv`` only writes bf16, ...). Every name runs on every device, so the hooks
``is_backend_supported`` / ``is_compute_capability_supported`` answer True for every known name
and capability; a call that a known name cannot serve raises
:class:`flashinfer.utils.BackendSupportedError` from the op itself (``mubin`` without
``output_scale``).
"""

from __future__ import annotations

from flashinfer._core.backends import BackendTable

BMM_BF16 = BackendTable(
    function="bmm_bf16",
    upstream=("cudnn", "cutlass", "cutile", "tgv", "auto"),
    mate=("mudnn",),
    notes={"tgv": "bf16 output only"},
)

BMM_FP8 = BackendTable(
    function="bmm_fp8",
    upstream=("cudnn", "cublas", "cutlass", "auto"),
    mate=("mudnn",),
    notes={"cutlass": "no e5m2"},
)

GEMM_FP8_NT_GROUPWISE = BackendTable(
    function="gemm_fp8_nt_groupwise",
    upstream=("cutlass", "trtllm", "cutile"),
    mate=("auto", "mudnn", "mubin"),
    notes={
        "cutlass": "needs `scale_major_mode`",
        "trtllm": "its scale convention (MN-major `a_scale`, K-major `b_scale`), (1, 128, 128), "
        "k >= 256, e4m3",
        "cutile": "K-major scales, (1, 128, 128) only",
        "mubin": "FP8 E4M3 output: needs `output_scale`",
    },
)

GEMM_FP8_NT_BLOCKSCALED = BackendTable(function="gemm_fp8_nt_blockscaled")

GROUP_GEMM_FP8_NT_GROUPWISE = BackendTable(
    function="group_gemm_fp8_nt_groupwise",
    upstream=("trtllm", "cutile"),
    mate=("auto", "mubin"),
    notes={
        "cutile": "K-major scales, 1-row A blocks (NotImplementedError otherwise, as upstream's cuTile kernel)"
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
        GEMM_FP8_NT_BLOCKSCALED,
        GROUP_GEMM_FP8_NT_GROUPWISE,
        GROUP_DEEPGEMM_FP8_NT_GROUPWISE,
        BATCH_DEEPGEMM_FP8_NT_GROUPWISE,
    )
}
