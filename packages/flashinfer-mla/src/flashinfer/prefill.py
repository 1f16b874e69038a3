"""``flashinfer.prefill``: present because engines reach it as an attribute of ``flashinfer``.

No prefill API is in this build's scope (the contract covers GEMMs, MLA RoPE + FP8 quantize
and MLA decode). ``trtllm_ragged_attention_deepseek`` exists so attribute access works, and
raises a clear error when called.
"""

__all__ = ["trtllm_ragged_attention_deepseek"]


def trtllm_ragged_attention_deepseek(*args, **kwargs):
    """Not provided by this build; raises ``NotImplementedError``."""
    raise NotImplementedError(
        "flashinfer.prefill.trtllm_ragged_attention_deepseek is not part of this build "
        "(it provides the GEMM, MLA RoPE + FP8 quantize and MLA decode APIs only)"
    )
