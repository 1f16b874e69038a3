"""The GEMM package's dispatcher, and what each implementation does per op (for show-config)."""

from __future__ import annotations

from flashinfer._core.dispatch import Dispatcher

DISPATCH = Dispatcher("flashinfer.gemm")

DESCRIPTION = {
    "bmm_bf16": {
        "reference": "torch.matmul in float32, cast once to the output dtype",
        "cuda": "cuBLAS through torch.bmm (fp32 accumulation); B transposed views, never copied",
        "mate": "mate.gemm.bmm (muDNN), NT or NN without copies; fp16 output from bf16 inputs "
        "through an fp32 scratch",
    },
    "bmm_fp8": {
        "reference": "dequantize to float32, torch.matmul, scale, cast once",
        "cuda": "torch._scaled_mm (cuBLASLt FP8) for one batch where it takes the layout; "
        "otherwise the batched Triton kernel",
        "mate": "mate.gemm.bmm (muDNN) with tensor or channel recipes and 0-dim scale views",
    },
    "gemm_fp8_nt_groupwise": {
        "reference": "dequantize both operands by their scale blocks, torch.matmul in float32",
        "cuda": "torch._scaled_mm blockwise 1x128/128x128 (sm90, bf16 output) or the Triton blockwise kernel",
        "mate": "mate.gemm.bmm (muDNN) with recipes (1,128)/(128,128); MUBIN with FP8 output",
    },
    "group_deepgemm_fp8_nt_groupwise": {
        "reference": "one float32 matmul per group, rows selected by m_indices",
        "cuda": "persistent Triton blockwise FP8 kernel",
        "mate": "mate.gemm.ragged_m_moe_gemm_8bit (MUBIN) into a scratch; -1 rows kept",
    },
    "batch_deepgemm_fp8_nt_groupwise": {
        "reference": "batched float32 matmul, rows past masked_m kept",
        "cuda": "persistent Triton blockwise FP8 kernel",
        "mate": "mate.gemm.masked_moe_gemm_8bit (MUBIN) into a scratch; rows past masked_m kept",
    },
}
