"""The tensor rules of ``trtllm_batch_decode_with_kv_cache_mla``, in FlashInfer's terms.

Each rule is written once and reads shapes, dtypes, strides and devices only (never tensor
values), so it is legal inside graph capture. Exception types follow FlashInfer v0.6.17: its
Python checks raise ``ValueError``/``TypeError``, its C++ checks surface as ``RuntimeError``.
The option rules both cache forms share are at the top of the public function; each form's own
in its ``check``.

The device rule is :func:`flashinfer._core.checks.check_device`; the passing path tests the
device inline before calling it, as every guarded rule here does (``if x.device != device:``), so
a call that passes costs no function call per tensor (with the seven tensors a decode reads,
those calls would exceed the budget of ``benchmarks/host_time.py --section api-layer``;
``benchmarks/RESULTS.md``, "Host time").
"""

from __future__ import annotations

import math
from typing import NoReturn

import torch

from .._core.backends import BackendTable
from .._core.checks import check_device, check_last_dim_contiguous, check_no_overlap, describe, fail
from ..utils import get_device_sm_count, get_trtllm_gen_multi_ctas_kv_counter_bytes

# Every name runs this device's implementation; none keeps a rule of its own.
DECODE_BACKENDS = BackendTable(
    function="trtllm_batch_decode_with_kv_cache_mla",
    upstream=("auto", "trtllm-gen", "cute-dsl", "xqa", "sparse"),
)
BACKENDS = frozenset(DECODE_BACKENDS.names)
MLA_DIMS = ((512, 64), (256, 64), (512, 0))
DTYPES = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)
WORKSPACE_DTYPES = (torch.int8, torch.uint8)
_INT32 = torch.int32
_FLOAT32 = torch.float32


def reject_parallel_options(enable_dcp, cp_world, cp_rank, causal_seqlens_kv_global) -> NoReturn:
    """Raise for decode-context-parallel options off their defaults (``enable_dcp=False``,
    ``cp_world=1``, ``cp_rank=0``, no ``causal_seqlens_kv_global``; the caller tests that):
    DCP is not served by this build."""
    if enable_dcp is not False:
        if not isinstance(enable_dcp, bool):
            fail(ValueError, "enable_dcp", "a bool", describe(enable_dcp))
        raise NotImplementedError(
            "enable_dcp=True (decode context parallelism) is not served by this build; run the decode "
            "without DCP (enable_dcp=False)"
        )
    if not isinstance(cp_world, int) or cp_world < 1:
        fail(ValueError, "cp_world", "an int >= 1", describe(cp_world))
    raise ValueError("cp_world, cp_rank and causal_seqlens_kv_global need enable_dcp=True")


def reject_topk(topk: int) -> NoReturn:
    """Raise FlashInfer's C++ error for a ``sparse_mla_top_k`` that is not a multiple of 4 (the
    caller tests that), where the decode and its metadata meet it."""
    raise RuntimeError(f"SparseMlaTopK must be a multiple of 4, got sparse_mla_top_k={topk}")


def check_decode_scale(scale, name: str, device: torch.device) -> float | torch.Tensor:
    """A finite Python float (ints become floats), or a one-element float32 tensor on ``device``."""
    if type(scale) is float and math.isfinite(scale):
        return scale
    if isinstance(scale, torch.Tensor):
        if scale.dtype != _FLOAT32:
            raise TypeError(f"{name} tensor must have dtype torch.float32, got {scale.dtype}")
        if scale.numel() != 1:
            fail(ValueError, name, "a float or a one-element float32 tensor", scale)
        if scale.device != device:
            check_device(scale, name, device, "query")
        return scale
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        fail(TypeError, name, "a float or a one-element float32 tensor", describe(scale))
    if not math.isfinite(scale):
        fail(ValueError, name, "a finite scale", describe(scale))
    return float(scale)


def check_query_and_cache(
    query, q_shape, kv_cache, kv_lora_rank: int, rope_dim: int, compact: bool, sparse: bool
):
    """Query ``[B, q_len, H, D]`` (``[total_q, H, D]`` compact; ``q_shape``), contiguous; a cache of
    its dtype, ``[pages, page_size, D]`` or ``[pages, 1, page_size, D]``."""
    kv_dtype = kv_cache.dtype
    if len(q_shape) != (3 if compact else 4):
        layout = (
            "a 3-D [total_q, num_heads, head_dim] tensor (with cum_seq_lens_q)"
            if compact
            else ("a 4-D [batch, q_len, num_heads, head_dim] tensor")
        )
        fail(ValueError, "query", layout, query)
    dtype = query.dtype
    if dtype not in DTYPES:
        fail(
            ValueError,
            "query",
            "dtype torch.bfloat16, torch.float16 or torch.float8_e4m3fn",
            f"dtype {dtype}",
        )
    if kv_dtype != dtype:
        expected = f"the query's dtype {dtype} (mixed query/cache dtypes are not supported)"
        fail(ValueError, "kv_cache", expected, f"dtype {kv_dtype}")
    shape = kv_cache.shape
    head_dim = kv_lora_rank + rope_dim
    if q_shape[-1] != head_dim or shape[-1] != head_dim:
        _wrong_head_dim(q_shape[-1], shape[-1], kv_lora_rank, rope_dim)
    if not query.is_contiguous():
        fail(ValueError, "query", "a contiguous tensor", query)
    if len(shape) not in (3, 4) or (len(shape) == 4 and shape[1] != 1):
        expected = "a [num_pages, page_size, head_dim] or [num_pages, 1, page_size, head_dim] tensor"
        fail(ValueError, "kv_cache", expected, kv_cache)
    if not kv_cache.is_contiguous():
        check_last_dim_contiguous(kv_cache, "kv_cache")
    if kv_cache.device != query.device:
        check_device(kv_cache, "kv_cache", query.device, "query")
    if sparse:
        check_page_stride(kv_cache, "head_dim")


def _wrong_head_dim(query_width: int, kv_width: int, kv_lora_rank: int, rope_dim: int):
    head_dim = kv_lora_rank + rope_dim
    for name, width in (("query", query_width), ("kv_cache", kv_width)):
        if width != head_dim:
            # Say which dimensions this width would mean: the caller may have passed the wrong ones.
            meant = [f"kv_lora_rank={r}, qk_rope_head_dim={d}" for r, d in MLA_DIMS if r + d == width]
            hint = f"; a {width}-wide {name} means {meant[0]}" if meant else ""
            raise ValueError(
                f"Expected head dim {head_dim} (kv_lora_rank={kv_lora_rank} + qk_rope_head_dim={rope_dim}) "
                f"for `{name}`, got {width}{hint}"
            )


def check_page_stride(kv_cache, row: str) -> None:
    """Sparse decode reads the cache as one flat pool of rows one row stride apart (a view, never
    a copy), each page's padding rows included: the page stride must be a whole number of row
    strides, at least ``page_size`` of them (FlashMLA pads each page by a row)."""
    # the shape and stride tuples, each read once: `stride(dim)` parses its argument, at several
    # times the cost of the tuple (host time)
    shape, strides = kv_cache.shape, kv_cache.stride()
    pages, page_size = shape[0], shape[-2]
    page_stride, row_stride = strides[0], strides[-2]
    if pages > 1 and page_size > 1 and (page_stride % row_stride or page_stride < page_size * row_stride):
        expected = (
            f"pages a whole number of rows apart (page stride a multiple of the row stride, at least "
            f"page_size rows), readable as one pool of [{row}] rows"
        )
        fail(ValueError, "kv_cache", expected, kv_cache)


def check_int32(x, name: str, shape: tuple | None, device: torch.device, contiguous: bool = True) -> None:
    """An int32 tensor of exactly ``shape`` (None: a shape the caller has checked) on ``device``."""
    if x.dtype != _INT32:
        fail(ValueError, name, "dtype torch.int32", f"dtype {x.dtype}")
    if shape is not None and x.shape != shape:
        fail(ValueError, name, f"shape {shape}", x)
    if x.device != device:
        check_device(x, name, device, "query")
    if contiguous and not x.is_contiguous():
        fail(ValueError, name, "a contiguous tensor", x)


def check_sparse_indices(block_tables, shape: tuple, device: torch.device) -> None:
    """Sparse mode: ``block_tables`` holds per-token physical slots, exactly ``shape``."""
    if block_tables.shape != shape:
        raise ValueError(
            f"Expected page_table.shape == {shape} for `block_tables` in sparse mode "
            f"([batch, q_len, sparse_mla_top_k] of physical token slots), got {tuple(block_tables.shape)}"
        )
    check_int32(block_tables, "block_tables", None, device)


def check_dense_tables(block_tables, batch: int, device: torch.device) -> None:
    """Dense mode (``sparse_mla_top_k == 0``): ``block_tables`` is ``[batch, max_pages]`` page ids."""
    if block_tables.dim() != 2 or block_tables.shape[0] != batch:
        expected = (
            f"a [{batch}, max_pages] page table (sparse_mla_top_k=0 means dense decode; pass the top-k "
            "to read [batch, q_len, sparse_mla_top_k] sparse indices)"
        )
        fail(ValueError, "block_tables", expected, block_tables)
    check_int32(block_tables, "block_tables", None, device, contiguous=False)


def check_workspace(workspace, device: torch.device) -> None:
    """The caller's scratch bytes: a 1-D int8/uint8 tensor on ``device`` (never zeroed here)."""
    if workspace.dtype not in WORKSPACE_DTYPES or workspace.dim() != 1:
        fail(ValueError, "workspace_buffer", "a 1-D int8 or uint8 tensor (scratch bytes)", workspace)
    if workspace.device != device:
        check_device(workspace, "workspace_buffer", device, "query")


def check_sinks(sinks, heads: int, device: torch.device) -> torch.Tensor:
    """Per-head sink logits ``[num_heads]`` float32: a tensor or a one-element list of it."""
    if isinstance(sinks, (list, tuple)):
        if len(sinks) != 1:
            fail(
                ValueError,
                "sinks",
                "a [num_heads] tensor or a list holding one",
                f"a list of {len(sinks)} items",
            )
        sinks = sinks[0]
    if not isinstance(sinks, torch.Tensor):
        fail(ValueError, "sinks", "a [num_heads] float32 tensor", describe(sinks))
    if sinks.dtype != _FLOAT32 or sinks.shape != (heads,):
        fail(ValueError, "sinks", f"a float32 tensor of shape ({heads},)", sinks)
    if sinks.device != device:
        check_device(sinks, "sinks", device, "query")
    return sinks


def check_decode_out(out, shape: tuple, query, kv_cache, accept_3d: bool) -> torch.Tensor:
    """``out`` is ``shape`` bfloat16 on the query's device; returns it (a 3-D one as a 4-D view)."""
    out_shape = out.shape
    if out_shape == shape:
        view = out
    elif accept_3d and len(out_shape) == 3 and out_shape == (shape[0], *shape[2:]):
        view = out.unsqueeze(1)  # an older FlashInfer's [batch, heads, kv_lora_rank] for q_len == 1
    else:
        view = None
    if view is None or out.dtype != torch.bfloat16 or out.device != query.device:
        raise ValueError(
            f"Invalid shape/dtype/device of out: expected shape {shape}, torch.bfloat16 on "
            f"{query.device}, got shape {tuple(out_shape)}, {out.dtype} on {out.device}"
        )
    if not out.is_contiguous():
        check_last_dim_contiguous(out, "out")
    check_decode_out_pointers(out, query, kv_cache)
    return view


def check_decode_out_pointers(out, query, kv_cache) -> None:
    """The rule on ``out`` that reads pointers (a repeated call signature checks it again)."""
    check_no_overlap(out, "out", ("query", "kv_cache"), query, kv_cache)


def check_lse(lse, rows: int, q_len: int, heads: int, device: torch.device) -> None:
    """``lse`` is float32 ``(rows, heads)`` or ``(rows // q_len, q_len, heads)`` on ``device``."""
    batch = rows // q_len
    if lse.dtype != _FLOAT32 or (lse.shape != (rows, heads) and lse.shape != (batch, q_len, heads)):
        fail(
            ValueError,
            "lse",
            f"a float32 tensor of shape ({rows}, {heads}) or ({batch}, {q_len}, {heads})",
            lse,
        )
    if lse.device != device:
        check_device(lse, "lse", device, "query")


def check_counter_buffer(buffer, batch: int, heads: int, device: torch.device) -> None:
    """The multi-CTA counter buffer: never written here, but validated like FlashInfer does.

    Upstream accepts it with trtllm-gen only; here every backend name runs the same
    implementation, so it is accepted with all of them (vLLM may pair it with ``cute-dsl``).
    """
    if not buffer.is_contiguous():
        raise ValueError("multi_ctas_kv_counter_buffer must be contiguous")
    if buffer.data_ptr() % 16:
        raise ValueError("multi_ctas_kv_counter_buffer must be 16-byte aligned")
    needed = get_trtllm_gen_multi_ctas_kv_counter_bytes(batch, heads, get_device_sm_count(device))
    have = buffer.numel() * buffer.element_size()
    if have < needed:
        raise ValueError(f"multi_ctas_kv_counter_buffer is too small: {have} bytes, need at least {needed}")
