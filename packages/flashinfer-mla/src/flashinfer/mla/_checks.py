"""Validation of ``trtllm_batch_decode_with_kv_cache_mla`` arguments, in FlashInfer's terms.

Each check reads shapes, dtypes, strides and devices only (never tensor values), so it is
legal inside graph capture. Exception types follow FlashInfer v0.6.17: its Python checks raise
``ValueError``/``TypeError``, its C++ checks surface as ``RuntimeError``.
"""

from __future__ import annotations

import math

import torch

from .._core.backends import BackendTable
from .._core.checks import check_device, check_last_dim_contiguous, check_no_overlap, check_tensor, fail
from ..utils import get_device_sm_count, get_trtllm_gen_multi_ctas_kv_counter_bytes

# Every name runs this device's implementation; none keeps a rule of its own.
DECODE_BACKENDS = BackendTable(
    function="trtllm_batch_decode_with_kv_cache_mla",
    upstream=("auto", "trtllm-gen", "cute-dsl", "xqa", "sparse"),
)
BACKENDS = DECODE_BACKENDS.names
MLA_DIMS = ((512, 64), (256, 64), (512, 0))
DTYPES = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def check_options(
    kv_lora_rank,
    qk_rope_head_dim,
    sparse_mla_top_k,
    skip_softmax_threshold_scale_factor,
    backend,
    uses_shared_paged_kv_idx,
    cum_seq_lens_q,
    max_q_len,
    sparse_mla_top_k_lens,
    enable_dcp,
    cp_world,
    cp_rank,
    causal_seqlens_kv_global,
    use_fp16_softmax,
) -> None:
    """Checks on the non-tensor options, in the order FlashInfer makes them."""
    if backend not in BACKENDS:
        raise ValueError(f"Backend {backend} not supported (expected one of {list(BACKENDS)} for `backend`)")
    if max_q_len is not None and cum_seq_lens_q is None:
        raise ValueError("max_q_len is only meaningful with cum_seq_lens_q (compact variable-length queries)")
    if (kv_lora_rank, qk_rope_head_dim) not in MLA_DIMS:
        raise ValueError(
            f"Unsupported MLA dimensions: kv_lora_rank={kv_lora_rank}, qk_rope_head_dim={qk_rope_head_dim}; "
            f"expected one of {list(MLA_DIMS)}"
        )
    if not isinstance(sparse_mla_top_k, int) or sparse_mla_top_k < 0:
        fail(ValueError, "sparse_mla_top_k", "a non-negative int", sparse_mla_top_k)
    native = qk_rope_head_dim == 0
    if native and (sparse_mla_top_k == 0 or sparse_mla_top_k_lens is None):
        raise ValueError(
            "the native (512, 0) MLA dimensions need sparse_mla_top_k > 0 and sparse_mla_top_k_lens"
        )
    if sparse_mla_top_k_lens is not None and not native:
        raise ValueError("sparse_mla_top_k_lens is only supported with the native (512, 0) MLA dimensions")
    if sparse_mla_top_k > 0 and sparse_mla_top_k % 4:
        raise RuntimeError(f"SparseMlaTopK must be a multiple of 4, got sparse_mla_top_k={sparse_mla_top_k}")
    if sparse_mla_top_k > 0 and skip_softmax_threshold_scale_factor is not None:
        raise ValueError("skip_softmax is not supported for sparse MLA")
    if not isinstance(enable_dcp, bool):
        fail(ValueError, "enable_dcp", "a bool", enable_dcp)
    if not isinstance(cp_world, int) or cp_world < 1:
        fail(ValueError, "cp_world", "an int >= 1", cp_world)
    if not enable_dcp and (cp_world != 1 or cp_rank != 0 or causal_seqlens_kv_global is not None):
        raise ValueError("cp_world, cp_rank and causal_seqlens_kv_global need enable_dcp=True")
    if enable_dcp:
        raise NotImplementedError(
            "enable_dcp=True (decode context parallelism) is not served by this build; run the decode "
            "without DCP (enable_dcp=False)"
        )
    if not uses_shared_paged_kv_idx:
        raise NotImplementedError(
            "uses_shared_paged_kv_idx=False (separate K and V page tables) is not served by this build; "
            "MLA reads K and V from the same cache rows, pass one shared page table"
        )
    if use_fp16_softmax is not None and not isinstance(use_fp16_softmax, bool):
        fail(ValueError, "use_fp16_softmax", "None or a bool", use_fp16_softmax)


def check_scale(scale, name: str, device: torch.device):
    """A Python float, or a one-element float32 tensor on ``device`` returned as a 0-dim view."""
    if isinstance(scale, torch.Tensor):
        if scale.dtype != torch.float32:
            raise TypeError(f"{name} tensor must have dtype torch.float32, got {scale.dtype}")
        if scale.numel() != 1:
            fail(ValueError, name, "a float or a one-element float32 tensor", scale)
        check_device(scale, name, device, "query")
        return scale if scale.dim() == 0 else scale.reshape(())  # a view costs host time
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        fail(TypeError, name, "a float or a one-element float32 tensor", scale)
    if not math.isfinite(scale):
        fail(ValueError, name, "a finite scale", scale)
    return float(scale)


def check_query_and_cache(query, kv_cache, head_dim: int, compact: bool) -> None:
    """Query ``[B, q_len, H, D]`` (``[total_q, H, D]`` compact) and a cache of the same dtype."""
    check_tensor(query, "query")
    check_tensor(kv_cache, "kv_cache")
    want = 3 if compact else 4
    if query.dim() != want:
        shape = (
            "[total_q, num_heads, head_dim] (with cum_seq_lens_q)"
            if compact
            else "[batch, q_len, num_heads, head_dim]"
        )
        fail(ValueError, "query", f"a {want}-D {shape} tensor", query)
    if query.dtype not in DTYPES:
        fail(
            ValueError,
            "query",
            "dtype torch.bfloat16, torch.float16 or torch.float8_e4m3fn",
            f"dtype {query.dtype}",
        )
    if kv_cache.dtype != query.dtype:
        fail(
            ValueError,
            "kv_cache",
            f"the query's dtype {query.dtype} (mixed query/cache dtypes are not supported)",
            f"dtype {kv_cache.dtype}",
        )
    for name, x in (("query", query), ("kv_cache", kv_cache)):
        if x.shape[-1] != head_dim:
            raise ValueError(
                f"Expected head dim {head_dim} (kv_lora_rank + qk_rope_head_dim) for `{name}`, got {x.shape[-1]}"
            )
    if not query.is_contiguous():
        fail(ValueError, "query", "a contiguous tensor", query)
    if kv_cache.dim() == 4 and kv_cache.shape[1] != 1 or kv_cache.dim() not in (3, 4):
        fail(
            ValueError,
            "kv_cache",
            "a [num_pages, page_size, head_dim] or [num_pages, 1, page_size, head_dim] tensor",
            kv_cache,
        )
    check_last_dim_contiguous(kv_cache, "kv_cache")
    check_device(kv_cache, "kv_cache", query.device, "query")


def flat_token_pool(kv_cache: torch.Tensor) -> torch.Tensor:
    """View ``[pages, (1,) page_size, D]`` as the flat ``[pages * page_size, D]`` pool (never a copy)."""
    try:
        return kv_cache.view(-1, kv_cache.shape[-1])
    except RuntimeError:
        fail(
            ValueError,
            "kv_cache",
            "a cache whose pages can be viewed as one flat [num_pages * page_size, head_dim] token pool "
            "(page stride = page_size * row stride)",
            kv_cache,
        )


def check_int32(x, name: str, shape, device: torch.device, contiguous: bool = True) -> None:
    """An int32 tensor of exactly ``shape`` on ``device``."""
    check_tensor(x, name, ValueError)
    if x.dtype != torch.int32:
        fail(ValueError, name, "dtype torch.int32", f"dtype {x.dtype}")
    if tuple(x.shape) != tuple(shape):
        fail(ValueError, name, f"shape {tuple(shape)}", x)
    check_device(x, name, device, "query")
    if contiguous and not x.is_contiguous():
        fail(ValueError, name, "a contiguous tensor", x)


def check_sparse_indices(block_tables, shape, device) -> None:
    """Sparse mode: ``block_tables`` holds per-token physical slots, exactly ``shape``."""
    check_tensor(block_tables, "block_tables", ValueError)
    if tuple(block_tables.shape) != tuple(shape):
        raise ValueError(
            f"Expected page_table.shape == {tuple(shape)} for `block_tables` in sparse mode "
            f"([batch, q_len, sparse_mla_top_k] of physical token slots), got {tuple(block_tables.shape)}"
        )
    check_int32(block_tables, "block_tables", shape, device)


def check_dense_tables(block_tables, batch: int, device) -> None:
    """Dense mode: ``block_tables`` is ``[batch, max_pages]`` of page ids."""
    check_tensor(block_tables, "block_tables", ValueError)
    if block_tables.dim() != 2 or block_tables.shape[0] != batch:
        fail(ValueError, "block_tables", f"a [{batch}, max_pages] page table", block_tables)
    check_int32(block_tables, "block_tables", block_tables.shape, device, contiguous=False)


def check_sinks(sinks, heads: int, device):
    """Per-head sink logits ``[num_heads]`` float32: a tensor or a one-element list of it."""
    if sinks is None:
        return None
    if isinstance(sinks, (list, tuple)):
        if len(sinks) != 1:
            fail(
                ValueError,
                "sinks",
                "a [num_heads] tensor or a list holding one",
                f"a list of {len(sinks)} items",
            )
        sinks = sinks[0]
    check_tensor(sinks, "sinks", ValueError)
    if sinks.dtype != torch.float32 or tuple(sinks.shape) != (heads,):
        fail(ValueError, "sinks", f"a float32 tensor of shape ({heads},)", sinks)
    check_device(sinks, "sinks", device, "query")
    return sinks


def check_out(out, shape, query, kv_cache, accept_3d: bool) -> torch.Tensor:
    """``out`` is ``shape`` bfloat16 on the query's device; returns its 4-D (or 3-D) view."""
    check_tensor(out, "out", ValueError)
    if accept_3d and out.dim() == 3 and tuple(out.shape) == (shape[0], *shape[2:]):
        view = out.unsqueeze(1)  # an older FlashInfer's [batch, heads, kv_lora_rank] for q_len == 1
    elif tuple(out.shape) == tuple(shape):
        view = out
    else:
        view = None
    if view is None or out.dtype != torch.bfloat16 or out.device != query.device:
        raise ValueError(
            f"Invalid shape/dtype/device of out: expected shape {tuple(shape)}, torch.bfloat16 on "
            f"{query.device}, got shape {tuple(out.shape)}, {out.dtype} on {out.device}"
        )
    check_last_dim_contiguous(out, "out")
    check_no_overlap(out, "out", {"query": query, "kv_cache": kv_cache})
    return view


def check_lse(lse, rows: int, q_len: int, heads: int, device) -> torch.Tensor:
    """``lse`` is float32 ``(rows, heads)`` or ``(rows // q_len, q_len, heads)``; returns the 3-D view."""
    check_tensor(lse, "lse", ValueError)
    batch = rows // q_len
    if tuple(lse.shape) not in ((rows, heads), (batch, q_len, heads)) or lse.dtype != torch.float32:
        fail(
            ValueError,
            "lse",
            f"a float32 tensor of shape ({rows}, {heads}) or ({batch}, {q_len}, {heads})",
            lse,
        )
    check_device(lse, "lse", device, "query")
    # Splitting one dimension is always a view, whatever the strides.
    return lse.unflatten(0, (batch, q_len)) if lse.dim() == 2 else lse


def check_counter_buffer(buffer, batch: int, heads: int, device) -> None:
    """The multi-CTA counter buffer: never written here, but validated like FlashInfer does.

    Upstream accepts it with trtllm-gen only; here every backend name runs the same
    implementation, so it is accepted with all of them (vLLM may pair it with ``cute-dsl``).
    """
    if buffer is None:
        return
    check_tensor(buffer, "multi_ctas_kv_counter_buffer", ValueError)
    if not buffer.is_contiguous():
        raise ValueError("multi_ctas_kv_counter_buffer must be contiguous")
    if buffer.data_ptr() % 16:
        raise ValueError("multi_ctas_kv_counter_buffer must be 16-byte aligned")
    needed = get_trtllm_gen_multi_ctas_kv_counter_bytes(batch, heads, get_device_sm_count(device))
    have = buffer.numel() * buffer.element_size()
    if have < needed:
        raise ValueError(f"multi_ctas_kv_counter_buffer is too small: {have} bytes, need at least {needed}")
