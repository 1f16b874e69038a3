"""The backend names each GEMM accepts, and the rules names keep.

A name never picks a different implementation module: the tensor's device does (``ROUTES`` in
:mod:`._dispatch`). A name only keeps FlashInfer's name-specific rules, written here once as
data: the op checks them (``TABLE.enforce(backend, *context)``; where the default name has
rules, behind the one-call guard ``TABLE.holds[backend](*context)``) and the README's table
shows them. Every name runs on every device, so the hooks ``is_backend_supported`` /
``is_compute_capability_supported`` answer True for every known name and capability; a call
that a known name cannot serve raises :class:`flashinfer.utils.BackendSupportedError` from the
op itself (``mubin`` without ``output_scale``).
"""

from __future__ import annotations

import torch

from flashinfer._core.backends import BackendTable, Rule
from flashinfer._core.errors import BackendSupportedError

_E5M2 = torch.float8_e5m2
_ROW_BLOCKS = (1, 128, 128)

BMM_BF16 = BackendTable(
    function="bmm_bf16",
    upstream=("cudnn", "cutlass", "cutile", "tgv", "auto"),
    mate=("mudnn",),
    context=("out_dtype",),
    # upstream's heuristic keeps cudnn, cutlass and tgv, in that order; never cutile
    auto_order=("cudnn", "cutlass", "tgv", "mudnn"),
    rules={
        "tgv": (
            Rule(
                "out_dtype",
                "torch.bfloat16 (the TGV backend for bmm_bf16 only supports bfloat16 output)",
                lambda out_dtype: out_dtype == torch.bfloat16,
                lambda out_dtype: str(out_dtype),
            ),
        ),
    },
)

_E5M2_TEXT = "float8_e4m3fn (e5m2 is not supported for bmm_fp8 with cutlass backend)"
BMM_FP8 = BackendTable(
    function="bmm_fp8",
    upstream=("cudnn", "cublas", "cutlass", "auto"),
    mate=("mudnn",),
    context=("A.dtype", "B.dtype"),
    # upstream's heuristic order: cutlass (no e5m2), cublas, cudnn
    auto_order=("cutlass", "cublas", "cudnn", "mudnn"),
    rules={
        "cutlass": (
            Rule("A", _E5M2_TEXT, lambda a, b: a != _E5M2, lambda a, b: f"dtype {a}"),
            Rule("B", _E5M2_TEXT, lambda a, b: b != _E5M2, lambda a, b: f"dtype {b}"),
        ),
    },
)

GEMM_FP8_NT_GROUPWISE = BackendTable(
    function="gemm_fp8_nt_groupwise",
    upstream=("cutlass", "trtllm", "cutile"),
    mate=("auto", "mudnn", "mubin"),
    context=("scale_major_mode", "scale_granularity_mnk", "k", "output_scale"),
    rules={
        "cutlass": (
            Rule(
                "scale_major_mode",
                "'K' or 'MN' (scale_major_mode is required in CUTLASS)",
                lambda mode, granularity, k, output_scale: mode is not None,
                lambda mode, granularity, k, output_scale: "None",
            ),
        ),
        "trtllm": (
            Rule(
                "scale_granularity_mnk",
                "(1, 128, 128) (scale_granularity_mnk must be (1, 128, 128) in TRTLLM)",
                lambda mode, granularity, k, output_scale: granularity == _ROW_BLOCKS,
                lambda mode, granularity, k, output_scale: str(granularity),
            ),
            Rule(
                "a",
                "a.shape[1] >= 256 (a.shape[1] must be >= 256 in TRTLLM)",
                lambda mode, granularity, k, output_scale: k >= 256,
                lambda mode, granularity, k, output_scale: f"a.shape[1] = {k}",
            ),
        ),
        "cutile": (
            Rule(
                "scale_major_mode",
                "'K' or None (cutile supports scale_major_mode='K' only)",
                lambda mode, granularity, k, output_scale: mode != "MN",
                lambda mode, granularity, k, output_scale: repr(mode),
            ),
            Rule(
                "scale_granularity_mnk",
                "(1, 128, 128) (cutile supports scale_granularity_mnk=(1, 128, 128) only)",
                lambda mode, granularity, k, output_scale: granularity == _ROW_BLOCKS,
                lambda mode, granularity, k, output_scale: str(granularity),
            ),
        ),
        "mudnn": (
            Rule(
                "output_scale",
                "None: 'mudnn' writes bf16/fp16 output (use backend 'mubin' or 'auto' for FP8 output)",
                lambda mode, granularity, k, output_scale: output_scale is None,
                lambda mode, granularity, k, output_scale: "a tensor",
                BackendSupportedError,
            ),
        ),
        "mubin": (
            Rule(
                "output_scale",
                "a float32 [m, ceil(n/128)] tensor: 'mubin' writes FP8 E4M3 output (use backend 'auto' "
                "or 'mudnn' for bf16/fp16 output)",
                lambda mode, granularity, k, output_scale: output_scale is not None,
                lambda mode, granularity, k, output_scale: "None",
                BackendSupportedError,
            ),
        ),
    },
)

GEMM_FP8_NT_BLOCKSCALED = BackendTable(function="gemm_fp8_nt_blockscaled")

GROUP_GEMM_FP8_NT_GROUPWISE = BackendTable(
    function="group_gemm_fp8_nt_groupwise",
    upstream=("trtllm", "cutile"),
    mate=("auto", "mubin"),
    context=("scale_major_mode", "scale_granularity_mnk"),
    rules={
        # upstream's cuTile kernel raises these (NotImplementedError)
        "cutile": (
            Rule(
                "scale_major_mode",
                "'K' (cuTile gemm_fp8_nt_groupwise only supports scale_major_mode='K' in v1; MN-major "
                "scale support is a follow-up)",
                lambda mode, granularity: mode == "K",
                lambda mode, granularity: repr(mode),
                NotImplementedError,
            ),
            Rule(
                "scale_granularity_mnk",
                "scale_granularity_mnk[0] == 1 (cuTile gemm_fp8_nt_groupwise requires per-token-group "
                "scales on M)",
                lambda mode, granularity: granularity[0] == 1,
                lambda mode, granularity: str(granularity),
                NotImplementedError,
            ),
        ),
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
