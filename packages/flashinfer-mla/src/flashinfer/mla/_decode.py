"""MLA decode over a paged KV cache: ``trtllm_batch_decode_with_kv_cache_mla``.

FlashInfer v0.6.17's function, sparse (``sparse_mla_top_k > 0``) and dense, on every device.
The order inside: the option rules both cache forms share (no tensors), then the cache form's
``check``, given the rest positionally (``tests/mla/test_decode_options.py``) (its own rules in
FlashInfer's order, the outputs, one :class:`~._args.Decode` record: ``_unpacked_decode`` for rows
of the query's dtype, ``_packed_decode`` for the 656-byte rows), one call into the device's
implementation (``docs/internals.md``). Each rule is written once.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .._core.checks import describe, fail
from .._core.compile import one_node
from .._core.replay import Replay, Replays
from ..api_logging import flashinfer_api
from . import _checks, _packed_decode, _unpacked_decode
from ._args import Decode
from ._dispatch import DISPATCH, compile_layer
from ._metadata import DecodeMetadata

__all__ = ["trtllm_batch_decode_with_kv_cache_mla"]

_PACKED_DTYPE = torch.uint8


@one_node(compile_layer)
@flashinfer_api
def trtllm_batch_decode_with_kv_cache_mla(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor | None,
    max_seq_len: int,
    sparse_mla_top_k: int = 0,
    out: torch.Tensor | None = None,
    bmm1_scale: float | torch.Tensor = 1.0,
    bmm2_scale: float | torch.Tensor = 1.0,
    sinks: list[torch.Tensor] | None = None,
    skip_softmax_threshold_scale_factor: float | None = None,
    enable_pdl: bool | None = None,
    backend: str = "auto",
    is_var_seq: bool = True,
    uses_shared_paged_kv_idx: bool = True,
    lse: torch.Tensor | None = None,
    return_lse: bool = False,
    cute_dsl_impl: str = "auto",
    kv_scale_format: str = "auto",
    cum_seq_lens_q: torch.Tensor | None = None,
    max_q_len: int | None = None,
    multi_ctas_kv_counter_buffer: torch.Tensor | None = None,
    sparse_mla_top_k_lens: torch.Tensor | None = None,
    enable_dcp: bool = False,
    cp_world: int = 1,
    cp_rank: int = 0,
    causal_seqlens_kv_global: torch.Tensor | None = None,
    use_fp16_softmax: bool | None = None,
    metadata: DecodeMetadata | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Multi-head latent attention decode, sparse (per-token top-k slots) or dense (paged).

    Parameters
    ----------
    query : torch.Tensor
        ``[batch, q_len, num_heads, D]``, contiguous, D = ``kv_lora_rank + qk_rope_head_dim``
        (576 for DeepSeek): the absorbed NoPE part then the RoPE part. bfloat16, float16 or float8_e4m3fn,
        the same dtype as ``kv_cache``. With ``cum_seq_lens_q``: compact ``[total_q, num_heads, D]``.
    kv_cache : torch.Tensor
        ``[num_pages, page_size, D]`` or ``[num_pages, 1, page_size, D]``, last dim contiguous.
        Row ``[ckv (kv_lora_rank) | kpe]`` is K; its first ``kv_lora_rank`` values are V. Sparse
        mode views it, without a copy, as the flat pool ``[num_pages * page_size, D]``.
        **Packed form** (upstream's ``sparse`` backend): a uint8 cache of 656-byte rows,
        ``[num_pages, page_size, 656]`` or ``[num_pages, 1, page_size, 656]`` (512 e4m3 latent
        values, 4 float32 scales one per 128 of them, 64 bfloat16 RoPE values; see
        ``flashinfer.mla._packed_cache``), with a bfloat16 query of width 576, 512/64 dims,
        ``sparse_mla_top_k > 0`` and ``bmm2_scale == 1.0``. Its rules are in the Notes.
    workspace_buffer : torch.Tensor
        The caller's scratch bytes (int8/uint8, zeroed or not). Implementations may use it.
    qk_nope_head_dim : int
        Ignored (callers fold ``1/sqrt(qk_nope_head_dim + qk_rope_head_dim)`` into ``bmm1_scale``).
    kv_lora_rank, qk_rope_head_dim : int
        (512, 64), (256, 64), or (512, 0) with ``sparse_mla_top_k_lens``.
    block_tables : torch.Tensor
        Sparse: ``[batch, q_len, sparse_mla_top_k]`` int32, contiguous, each entry a physical
        token slot ``page * page_size + offset``. Dense: ``[batch, max_pages]`` int32 page ids,
        padded with -1 (entries past ``ceil(L / page_size)`` are never read).
    seq_lens : torch.Tensor
        ``[batch]`` int32, contiguous. Sparse: token t of request b considers the first
        ``n = min(sparse_mla_top_k, seq_lens[b] - (q_len - 1 - t))`` index positions (full KV
        lengths and per-row valid counts both work). Dense: token t attends positions
        ``0 .. L-1``, ``L = seq_lens[b] - (q_len - 1 - t)``.
    max_seq_len : int
        Accepted; work is bounded by ``seq_lens`` and the indices, never by this.
    sparse_mla_top_k : int
        0 for dense decode, else the index row length (a multiple of 4).
    out : torch.Tensor, optional
        ``[batch, q_len, num_heads, kv_lora_rank]`` bfloat16 (``[batch, num_heads, kv_lora_rank]``
        is accepted when q_len == 1), last dim contiguous, written in place and returned.
    bmm1_scale, bmm2_scale : float or torch.Tensor
        ``s_j = bmm1_scale * <q, K_j>``; ``out = bmm2_scale * softmax(s) @ V``. A Python float or
        a one-element float32 tensor on the query's device (same meaning).
    sinks : torch.Tensor or list of one torch.Tensor, optional
        ``[num_heads]`` float32 logits; each adds ``exp(sink)`` to its head's softmax denominator.
    skip_softmax_threshold_scale_factor : float, optional
        Must be None in sparse mode; accepted and ignored (exact softmax) in dense mode.
    enable_pdl, is_var_seq, cute_dsl_impl : optional
        Accepted for compatibility; no effect on results.
    kv_scale_format : str
        Read by the packed form only: ``auto``/``pow2_fp32`` (power-of-two scales) or
        ``arbitrary_fp32``, both dequantizing ``value * scale``; any other name raises
        ``ValueError`` there. The other cache forms do not read it (as upstream's backends
        for them).
    backend : str
        ``auto``, ``trtllm-gen``, ``cute-dsl``, ``xqa`` or ``sparse``: every name runs this
        device's implementation (see the README).
    uses_shared_paged_kv_idx : bool
        Must be True (one page table for K and V).
    lse : torch.Tensor, optional
        float32 ``[batch * q_len, num_heads]`` or ``[batch, q_len, num_heads]``, written in place
        whenever given.
    return_lse : bool
        Also return the LSE: base 2, ``log2(sum_j exp(s_j))``, without ``bmm2_scale`` and without
        sinks; +inf for a token with no valid key. Allocated as ``[batch * q_len, num_heads]``.
    cum_seq_lens_q : torch.Tensor, optional
        ``[batch + 1]`` int32 offsets of a compact query. Token i of request b has
        ``q_len_b = cum[b+1] - cum[b]`` and limit ``seq_lens[b] - (q_len_b - 1 - (i - cum[b]))``.
    max_q_len : int, optional
        Accepted with ``cum_seq_lens_q``.
    multi_ctas_kv_counter_buffer : torch.Tensor, optional
        Validated (contiguous, 16-byte aligned, large enough) and never written.
    sparse_mla_top_k_lens : torch.Tensor, optional
        Native (512, 0) dims only: ``[num_query_tokens]`` int32 per-token candidate counts.
    enable_dcp, cp_world, cp_rank, causal_seqlens_kv_global : optional
        Validated; ``enable_dcp=True`` raises ``NotImplementedError``.
    use_fp16_softmax : bool, optional
        A later FlashInfer keyword (SM107 trtllm-gen); accepted and ignored (softmax is float32).
    metadata : DecodeMetadata, optional
        From :func:`flashinfer.decode.get_batch_decode_metadata_mla` for this configuration;
        skips planning. None: planned in this call.

    Returns
    -------
    torch.Tensor or tuple of torch.Tensor
        ``out`` (bfloat16, contiguous when allocated), or ``(out, lse)`` with ``return_lse``.

    Raises
    ------
    ValueError
        FlashInfer's checks (dims, head dim, index shape, ``out``, ``seq_lens=None``, unknown
        backend, skip-softmax in sparse mode, counter buffer, DCP options), a metadata object for
        another configuration, a cache that cannot be viewed as a flat token pool, a non-tensor
        (None included) where a tensor belongs, named.
    TypeError
        A tensor scale that is not float32; ``metadata`` that is not a ``DecodeMetadata``.
    RuntimeError
        ``sparse_mla_top_k`` not a multiple of 4.
    NotImplementedError
        ``enable_dcp=True``, separate K/V page tables (576-wide form).

    Notes
    -----
    Sparse entries that are negative or ``>= num_pages * page_size`` are ignored and never read,
    wherever they sit among the first ``n`` positions. Dense page ids that are negative or
    ``>= num_pages`` are skipped the same way, and a token attends at most the positions its
    table row can address (``max_pages * page_size``): a ``seq_lens`` longer than that is cut
    there, not detected, since detecting it would read the lengths on the host. A token with no
    valid key gets out 0 and LSE +inf. Nothing is synchronized with the host, so the call can be
    graph-captured.

    The packed form follows upstream's ``sparse`` backend: ``seq_lens`` is None (every column
    active) or one active top-k length per query token, ``[batch, q_len]`` or
    ``[batch * q_len]`` (a ``[batch]`` tensor is ignored when ``q_len > 1``), with no causal
    shift; ``bmm1_scale`` is a float; its LSE includes the sinks' mass and is ``-inf`` for a
    token with no valid key (the sink's value with sinks); the cache must be viewable as the
    flat ``[num_pages * page_size, 656]`` pool and start on a 16-byte boundary.
    """
    # ---- a call signature seen before: its checks passed, its launches repeat (flashinfer._core.replay)
    key = None
    replayed = _REPLAYS.serves(query)  # False for a non-tensor: the checks below say
    if replayed and (
        sinks is None
        and cum_seq_lens_q is None
        and sparse_mla_top_k_lens is None
        and causal_seqlens_kv_global is None
    ):
        options = (
            qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim, max_seq_len, sparse_mla_top_k, bmm1_scale,
            bmm2_scale, skip_softmax_threshold_scale_factor, enable_pdl, backend, is_var_seq,
            uses_shared_paged_kv_idx, return_lse, cute_dsl_impl, kv_scale_format, max_q_len, enable_dcp,
            cp_world, cp_rank, use_fp16_softmax,
        )  # fmt: skip
        optional = (seq_lens, out, lse, multi_ctas_kv_counter_buffer)
        if lse is None and multi_ctas_kv_counter_buffer is None and seq_lens is not None and out is not None:
            tensors = (query, kv_cache, workspace_buffer, block_tables, seq_lens, out)  # the serving call
        else:  # the head says which are given
            tensors = tuple(
                t for t in (query, kv_cache, workspace_buffer, block_tables, *optional) if t is not None
            )
        key = (query.shape, *(t is None for t in optional), metadata, options, tuple(map(type, options)))
        replay = _REPLAYS.find(key, tensors)
        if replay is not None:
            return replay(query, kv_cache, workspace_buffer, block_tables, seq_lens, out, lse)

    # ---- the options both cache forms share, in the order FlashInfer checks them
    if backend not in _checks.BACKENDS:
        raise ValueError(
            f"Backend {backend} not supported (expected one of {list(_checks.BACKENDS)} for `backend`)"
        )
    if max_q_len is not None and cum_seq_lens_q is None:
        raise ValueError("max_q_len is only meaningful with cum_seq_lens_q (compact variable-length queries)")
    if enable_dcp is not False or cp_world != 1 or cp_rank != 0 or causal_seqlens_kv_global is not None:
        _checks.reject_parallel_options(enable_dcp, cp_world, cp_rank, causal_seqlens_kv_global)
    if use_fp16_softmax is not None and not isinstance(use_fp16_softmax, bool):
        fail(ValueError, "use_fp16_softmax", "None or a bool", describe(use_fp16_softmax))

    # ---- the cache form's rules and record, then one call into the device's implementation
    # the 656-byte rows are upstream's `sparse` backend form
    packed = isinstance(kv_cache, torch.Tensor) and kv_cache.dtype == _PACKED_DTYPE
    form = _packed_decode if packed else _unpacked_decode
    call, result = form.check(
        query,
        kv_cache,
        workspace_buffer,
        kv_lora_rank,
        qk_rope_head_dim,
        block_tables,
        seq_lens,
        sparse_mla_top_k,
        out,
        bmm1_scale,
        bmm2_scale,
        sinks,
        skip_softmax_threshold_scale_factor,
        uses_shared_paged_kv_idx,
        lse,
        return_lse,
        kv_scale_format,
        cum_seq_lens_q,
        multi_ctas_kv_counter_buffer,
        sparse_mla_top_k_lens,
        metadata,
    )
    if call is not None:
        impl = DISPATCH.module(query.device)
        if packed:
            impl_replay = impl.packed_sparse_decode(call)
        elif sparse_mla_top_k:
            impl_replay = impl.sparse_decode(call)
        else:
            impl_replay = impl.dense_decode(call)
        if key is not None and impl_replay is not None:
            given = (query, kv_cache, block_tables, seq_lens, workspace_buffer)
            _keep_replay(key, tensors, call, result, return_lse, lse is None, given, impl_replay)
    return result


# replays of the call signatures seen (flashinfer._core.replay)
_REPLAYS = Replays("trtllm_batch_decode_with_kv_cache_mla")


class _DecodeReplay(NamedTuple):
    """A repeated call signature's decode: its outputs allocated as the checks would, its record
    made from its arguments, the implementation's launches repeated (``_keep_replay``)."""

    scales: tuple  # (bmm1_scale, bmm2_scale) as the record holds them: floats
    out_shape: tuple  # of the output allocated when none is given
    out_3d: bool  # a 3-D out given: the record holds its [batch, 1, heads, rank] view
    lse_shape: tuple | None  # of the LSE allocated for return_lse when none is given
    return_lse: bool
    impl: Replay

    def __call__(self, query, kv_cache, workspace, block_tables, seq_lens, out, lse):
        device = query.device
        if out is None:
            out = out4 = torch.empty(*self.out_shape, dtype=torch.bfloat16, device=device)
        else:
            _checks.check_decode_out_pointers(out, query, kv_cache)
            out4 = out.unsqueeze(1) if self.out_3d else out
        if self.lse_shape is not None:
            lse = torch.empty(*self.lse_shape, dtype=torch.float32, device=device)
        self.impl(
            Decode._make(
                (query, kv_cache, block_tables, seq_lens, *self.scales, None, out4, lse, None, workspace)
            )
        )
        return (out, lse) if self.return_lse else out


def _keep_replay(
    key, tensors: tuple, call, result, return_lse: bool, no_lse_given: bool, given: tuple, impl_replay
) -> None:
    """Keep the implementation's replay for the signature ``key, tensors`` where the record is the
    arguments as given (``query, kv_cache, block_tables, seq_lens, workspace_buffer``), the
    outputs as returned (a 3-D
    ``out``'s 4-D view) and float scales: a repeated call then makes its record from its own
    arguments without the checks."""
    out, lse = result if return_lse else (result, call.lse)
    scales = (call.bmm1_scale, call.bmm2_scale)
    recorded = (call.query, call.kv_cache, call.table, call.seq_lens, call.workspace)
    as_given = (
        all(r is g for r, g in zip(recorded, given))
        and call.sinks is None
        and call.lse is lse
        and type(scales[0]) is float
        and type(scales[1]) is float
        and (call.out is out or call.out.dim() == out.dim() + 1)
    )
    if as_given:
        lse_shape = tuple(lse.shape) if return_lse and no_lse_given else None
        _REPLAYS.put(
            key,
            tensors,
            _DecodeReplay(scales, tuple(out.shape), call.out is not out, lse_shape, return_lse, impl_replay),
        )
