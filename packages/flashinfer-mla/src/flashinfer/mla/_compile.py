"""RoPE + FP8 quantize and the MLA decode as ``torch.library`` custom ops, for traced calls.

Imported by ``rope_quantize_fp8`` and ``trtllm_batch_decode_with_kv_cache_mla`` only while
Dynamo traces them (:mod:`flashinfer._core.compile` says why and how); ``mla_rope_quantize_fp8``
forwards to ``rope_quantize_fp8`` and so is one ``flashinfer::rope_quantize_fp8`` node. Each
wrapper allocates the outputs the caller left to the function (shapes and dtypes of the
contract, contiguous) and calls its op, which runs the public function eagerly with them when
the compiled graph runs.

A custom op takes tensors, scalars, strings and lists only, so the decode's other arguments are
flattened: a scale that may be a float or a tensor becomes both (one of them used), ``sinks``
(a tensor, a list of one, or None) a list and its form, and the ``metadata=`` object a key of
:func:`flashinfer._core.custom_ops.remember` (-1 for None).
"""

from __future__ import annotations

import torch

from .._core.custom_ops import custom_op, recall, remember
from ._decode import trtllm_batch_decode_with_kv_cache_mla as _eager_decode
from ._rope import rope_quantize_fp8 as _eager_rope

Tensor = torch.Tensor

# ------------------------------------------------------------------------- rope_quantize_fp8


@custom_op("rope_quantize_fp8", mutates_args=("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out"))
def _rope(
    q_rope: Tensor,
    k_rope: Tensor,
    q_nope: Tensor | None,
    k_nope: Tensor | None,
    cos_sin_cache: Tensor,
    pos_ids: Tensor,
    is_neox: bool,
    quantize_dtype: torch.dtype | None,
    quant_scale_q: float,
    quant_scale_kv: float,
    q_rope_out: Tensor,
    k_rope_out: Tensor,
    q_nope_out: Tensor,
    k_nope_out: Tensor,
    enable_pdl: bool,
) -> None:
    _eager_rope(
        q_rope,
        k_rope,
        q_nope,
        k_nope,
        cos_sin_cache,
        pos_ids,
        is_neox,
        quantize_dtype,
        quant_scale_q,
        quant_scale_kv,
        q_rope_out,
        k_rope_out,
        q_nope_out,
        k_nope_out,
        enable_pdl,
    )


def rope_quantize_fp8(
    q_rope,
    k_rope,
    q_nope,
    k_nope,
    cos_sin_cache,
    pos_ids,
    is_neox,
    quantize_dtype,
    quant_scale_q,
    quant_scale_kv,
    q_rope_out,
    k_rope_out,
    q_nope_out,
    k_nope_out,
    enable_pdl,
):
    """``rope_quantize_fp8`` as one node; returns the four outputs as the eager function does.

    Missing outputs are allocated with the shapes of their inputs (a missing nope input: its
    rope input's leading dimensions and width 0) and ``quantize_dtype``, else the dtype of the
    first given output, else float8_e4m3fn.
    """
    given = (q_rope_out, k_rope_out, q_nope_out, k_nope_out)
    dtype = quantize_dtype
    if dtype is None:
        dtype = next((out.dtype for out in given if out is not None), torch.float8_e4m3fn)
    shapes = (
        q_rope.shape,
        k_rope.shape,
        (*q_rope.shape[:-1], 0) if q_nope is None else q_nope.shape,
        (*k_rope.shape[:-1], 0) if k_nope is None else k_nope.shape,
    )
    outs = tuple(
        torch.empty(shape, dtype=dtype, device=q_rope.device) if out is None else out
        for out, shape in zip(given, shapes)
    )
    _rope(
        q_rope,
        k_rope,
        q_nope,
        k_nope,
        cos_sin_cache,
        pos_ids,
        bool(is_neox),
        quantize_dtype,
        quant_scale_q,
        quant_scale_kv,
        *outs,
        bool(enable_pdl),
    )
    return outs


# -------------------------------------------------------- trtllm_batch_decode_with_kv_cache_mla

# the forms `sinks` comes in; the op takes a list and this code
_NO_SINKS, _SINKS_TENSOR, _SINKS_LIST = 0, 1, 2


# `workspace_buffer` is scratch no caller reads (partials written and combined inside one call, in
# stream order), so it is not declared: as a mutated input, a 128-384 MiB buffer would be copied
# wherever functionalization cannot write it in place, and CUDA-graph trees skip graphs that
# mutate their inputs.
@custom_op("trtllm_batch_decode_with_kv_cache_mla", mutates_args=("out", "lse"))
def _decode(
    query: Tensor,
    kv_cache: Tensor,
    workspace_buffer: Tensor,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    block_tables: Tensor,
    seq_lens: Tensor | None,
    max_seq_len: int,
    sparse_mla_top_k: int,
    out: Tensor,
    bmm1_scale: float,
    bmm1_scale_tensor: Tensor | None,
    bmm2_scale: float,
    bmm2_scale_tensor: Tensor | None,
    sinks: list[Tensor],
    sinks_form: int,
    skip_softmax_threshold_scale_factor: float | None,
    enable_pdl: bool | None,
    backend: str,
    is_var_seq: bool,
    uses_shared_paged_kv_idx: bool,
    lse: Tensor | None,
    return_lse: bool,
    cute_dsl_impl: str,
    kv_scale_format: str,
    cum_seq_lens_q: Tensor | None,
    max_q_len: int | None,
    multi_ctas_kv_counter_buffer: Tensor | None,
    sparse_mla_top_k_lens: Tensor | None,
    enable_dcp: bool,
    cp_world: int,
    cp_rank: int,
    causal_seqlens_kv_global: Tensor | None,
    use_fp16_softmax: bool | None,
    metadata: int,
) -> None:
    _eager_decode(
        query,
        kv_cache,
        workspace_buffer,
        qk_nope_head_dim,
        kv_lora_rank,
        qk_rope_head_dim,
        block_tables,
        seq_lens,
        max_seq_len,
        sparse_mla_top_k,
        out,
        bmm1_scale if bmm1_scale_tensor is None else bmm1_scale_tensor,
        bmm2_scale if bmm2_scale_tensor is None else bmm2_scale_tensor,
        None if sinks_form == _NO_SINKS else sinks[0] if sinks_form == _SINKS_TENSOR else sinks,
        skip_softmax_threshold_scale_factor,
        enable_pdl,
        backend,
        is_var_seq,
        uses_shared_paged_kv_idx,
        lse,
        return_lse,
        cute_dsl_impl,
        kv_scale_format,
        cum_seq_lens_q,
        max_q_len,
        multi_ctas_kv_counter_buffer,
        sparse_mla_top_k_lens,
        enable_dcp,
        cp_world,
        cp_rank,
        causal_seqlens_kv_global,
        use_fp16_softmax,
        None if metadata < 0 else recall(metadata),
    )


def _scale(scale) -> tuple:
    """``(float, None)`` for a Python number, ``(1.0, tensor)`` for a tensor scale."""
    if isinstance(scale, torch.Tensor):
        return 1.0, scale
    return scale, None


def trtllm_batch_decode_with_kv_cache_mla(
    query,
    kv_cache,
    workspace_buffer,
    qk_nope_head_dim,
    kv_lora_rank,
    qk_rope_head_dim,
    block_tables,
    seq_lens,
    max_seq_len,
    sparse_mla_top_k,
    out,
    bmm1_scale,
    bmm2_scale,
    sinks,
    skip_softmax_threshold_scale_factor,
    enable_pdl,
    backend,
    is_var_seq,
    uses_shared_paged_kv_idx,
    lse,
    return_lse,
    cute_dsl_impl,
    kv_scale_format,
    cum_seq_lens_q,
    max_q_len,
    multi_ctas_kv_counter_buffer,
    sparse_mla_top_k_lens,
    enable_dcp,
    cp_world,
    cp_rank,
    causal_seqlens_kv_global,
    use_fp16_softmax,
    metadata,
):
    """The decode as one node; returns ``out``, or ``(out, lse)`` with ``return_lse``.

    ``out`` is allocated as ``query.shape[:-1] + (kv_lora_rank,)`` bfloat16 (``[batch, q_len,
    heads, kv_lora_rank]``, or ``[total_q, heads, kv_lora_rank]`` for a compact query) and, with
    ``return_lse``, ``lse`` as float32 ``[tokens, heads]``, tokens the product of the query's
    leading dimensions: the eager function's allocations.
    """
    if out is None:
        out = torch.empty((*query.shape[:-1], kv_lora_rank), dtype=torch.bfloat16, device=query.device)
    if lse is None and return_lse:
        tokens = query.shape[0] if query.dim() == 3 else query.shape[0] * query.shape[1]
        lse = torch.empty((tokens, query.shape[-2]), dtype=torch.float32, device=query.device)
    if sinks is None:
        sinks_list, sinks_form = [], _NO_SINKS
    elif isinstance(sinks, torch.Tensor):
        sinks_list, sinks_form = [sinks], _SINKS_TENSOR
    else:
        sinks_list, sinks_form = list(sinks), _SINKS_LIST
    _decode(
        query,
        kv_cache,
        workspace_buffer,
        qk_nope_head_dim,
        kv_lora_rank,
        qk_rope_head_dim,
        block_tables,
        seq_lens,
        max_seq_len,
        sparse_mla_top_k,
        out,
        *_scale(bmm1_scale),
        *_scale(bmm2_scale),
        sinks_list,
        sinks_form,
        skip_softmax_threshold_scale_factor,
        enable_pdl,
        backend,
        is_var_seq,
        uses_shared_paged_kv_idx,
        lse,
        return_lse,
        cute_dsl_impl,
        kv_scale_format,
        cum_seq_lens_q,
        max_q_len,
        multi_ctas_kv_counter_buffer,
        sparse_mla_top_k_lens,
        enable_dcp,
        cp_world,
        cp_rank,
        causal_seqlens_kv_global,
        use_fp16_softmax,
        -1 if metadata is None else remember(metadata),
    )
    return (out, lse) if return_lse else out
