"""The argument records the RoPE and decode API layers hand to every implementation.

One immutable record per op, built once by the public function after validation (every field
satisfies its docstring) and passed, as one argument, to ``_reference``, ``_cuda`` and ``_mate``
and on to the Triton launchers. Fields hold the caller's tensors as given; views an
implementation may want (the flat token pool, a 3-D LSE) are properties, made only by the
implementations that read them: a view costs host time (``benchmarks/RESULTS.md``, "Host time").
"""

from __future__ import annotations

from typing import NamedTuple

import torch

# rope_quantize_fp8's output parameters, in its order
ROPE_OUTPUTS = ("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out")


def rope_output_dtype(given: tuple) -> tuple[torch.dtype, str]:
    """The dtype of the outputs ``rope_quantize_fp8`` allocates when ``quantize_dtype`` is None,
    and the argument it comes from: the first given output's, else float8_e4m3fn (upstream)."""
    for name, out in zip(ROPE_OUTPUTS, given):
        if out is not None:
            return out.dtype, name
    return torch.float8_e4m3fn, "quantize_dtype"


def rope_outputs(inputs: tuple, given: tuple, dtype: torch.dtype) -> tuple:
    """``rope_quantize_fp8``'s four outputs: each one ``given``, else a contiguous tensor of its
    input's shape (a missing nope input: its rope input's leading dimensions and width 0) and
    ``dtype``, on the first input's device. ``inputs`` are ``(q_rope, k_rope, q_nope, k_nope)``.

    The one allocation rule of the op: the eager call and the ``torch.compile`` layer use it."""
    q_rope, k_rope, q_nope, k_nope = inputs
    shapes = (
        q_rope.shape,
        k_rope.shape,
        (*q_rope.shape[:-1], 0) if q_nope is None else q_nope.shape,
        (*k_rope.shape[:-1], 0) if k_nope is None else k_nope.shape,
    )
    device = q_rope.device
    return tuple(
        torch.empty(shape, dtype=dtype, device=device) if out is None else out
        for out, shape in zip(given, shapes)
    )


class Rope(NamedTuple):
    """RoPE on the rope parts, then scale and saturating FP8 cast of all four parts.

    Attributes
    ----------
    q_rope, q_nope : torch.Tensor
        ``(nnz, Hq, R)`` and ``(nnz, Hq, N)`` fp16/bf16 (one dtype); N may be 0.
    k_rope, k_nope : torch.Tensor
        ``(nnz, Hk, R)`` / ``(nnz, Hk, N)``, or 2-D ``(nnz, R)`` / ``(nnz, N)`` for one K head
        (passed through as the caller gave them; an ``unsqueeze`` costs host time).
    cos_sin_cache : torch.Tensor
        ``(max_pos, R)`` float32 or bf16, contiguous: first half cos, second half sin.
    pos_ids : torch.Tensor
        ``(nnz,)`` int32/int64, contiguous. A position outside ``[0, max_pos)`` is never read:
        that token's rope outputs are written as NaN.
    is_neox : bool
        Rotate the two halves (True) or adjacent pairs (False).
    quant_scale_q, quant_scale_kv : float
        Quantization multipliers (finite Python floats).
    q_rope_out, k_rope_out, q_nope_out, k_nope_out : torch.Tensor
        FP8 (e4m3 or e5m2, one dtype), the shapes and ranks of their inputs, written in place.

    Every tensor has ``stride(-1) == 1`` (or a last dimension <= 1); other strides are free,
    including 0. The cast saturates (clamp to the FP8 finite maximum first).
    """

    q_rope: torch.Tensor
    k_rope: torch.Tensor
    q_nope: torch.Tensor
    k_nope: torch.Tensor
    cos_sin_cache: torch.Tensor
    pos_ids: torch.Tensor
    is_neox: bool
    quant_scale_q: float
    quant_scale_kv: float
    q_rope_out: torch.Tensor
    k_rope_out: torch.Tensor
    q_nope_out: torch.Tensor
    k_nope_out: torch.Tensor


class Decode(NamedTuple):
    """One MLA decode call, sparse (per-token slot lists) or dense (page tables).

    Attributes
    ----------
    query : torch.Tensor
        ``(B, q_len, H, D)`` bf16, fp16 or e4m3, contiguous; D = kv_lora_rank + rope dim.
    kv_cache : torch.Tensor
        ``(pages, page_size, D)`` or ``(pages, 1, page_size, D)``, the query's dtype, last dim
        contiguous: :attr:`pool` (sparse) or :attr:`pages` (dense). Sparse: the page stride is
        a whole number of row strides, at least ``page_size`` of them.
    table : torch.Tensor
        Sparse: ``(B, q_len, topk)`` int32 contiguous physical token slots. Token t of request b
        considers positions ``p < n = min(topk, seq_lens[b] - (q_len - 1 - t))``; entries outside
        ``[0, S)`` among them are ignored and never read. Dense: ``(B, max_pages)`` int32 page
        ids; token t attends positions ``0 .. L-1``, ``L = seq_lens[b] - (q_len - 1 - t)``, at
        page ``table[b, pos // page_size]``; ids outside ``[0, pages)`` are skipped, entries past
        ``ceil(L / page_size)`` never read.
    seq_lens : torch.Tensor or None
        int32 list lengths; which meaning is the cache form's (the decode kernel's
        ``kernels.mla_decode.Lengths``). Unpacked form: ``(B,)``, token t of request b
        considers ``seq_lens[b] - (q_len - 1 - t)`` positions (``CAUSAL``; per-row lengths of a
        call flattened to one token per row read the same with q_len 1). Packed form:
        ``(B * q_len,)``, one length per query token (``PER_TOKEN``), or None: every position
        (``ALL``).
    bmm1_scale, bmm2_scale : float or torch.Tensor
        A Python float or a one-element float32 tensor on the device:
        ``s_j = bmm1_scale * <q, K_j>``, ``out = bmm2_scale * softmax(s) @ V`` with
        ``V_j = K_j[:kv_lora_rank]``.
    sinks : torch.Tensor or None
        ``(H,)`` float32: each adds ``exp(sinks[h])`` to its head's softmax denominator.
    out : torch.Tensor
        ``(B, q_len, H, kv_lora_rank)`` bf16, last dim contiguous, written in place.
    lse : torch.Tensor or None
        float32 ``(B * q_len, H)`` or ``(B, q_len, H)``, any strides: the base-2 LSE
        ``log2(sum_j exp(s_j))`` without sinks, written in place; its 3-D view is :attr:`lse3`.
        Empty rows: out 0, lse +inf.
    plan : object
        Sparse: the implementation's ``decode_plan`` for this call's shape, from the caller's
        ``metadata``; None: the implementation plans the call itself (it owns its schedule).
        Dense: None.
    workspace : torch.Tensor
        The caller's 1-D int8/uint8 ``workspace_buffer`` (not zeroed), for scratch.
    """

    query: torch.Tensor
    kv_cache: torch.Tensor
    table: torch.Tensor
    seq_lens: torch.Tensor | None
    bmm1_scale: float | torch.Tensor
    bmm2_scale: float | torch.Tensor
    sinks: torch.Tensor | None
    out: torch.Tensor
    lse: torch.Tensor | None
    plan: object
    workspace: torch.Tensor

    @property
    def pool(self) -> torch.Tensor:
        """The cache as one flat ``(rows, D)`` pool of rows one row stride apart (a view).

        A page stride of ``page_size`` rows (no padding) makes it ``(pages * page_size, D)``
        with slot ``s`` at row ``s``; a padded page stride (FlashMLA pads each page by a row)
        puts each page's padding rows in the pool too: map slots with :meth:`pool_rows`.
        """
        kv = self.kv_cache
        pages, page_size, dim = kv.shape[0], kv.shape[-2], kv.shape[-1]
        if page_size == 1 or kv.stride(0) == page_size * kv.stride(-2):
            return kv.view(pages * page_size, dim)
        # rows one row stride apart from the first row of the first page (the API layer has
        # checked that pages are whole rows apart)
        rows = (pages - 1) * self.rows_per_page + page_size if pages else 0
        return kv.as_strided((rows, dim), (kv.stride(-2), 1))

    @property
    def rows_per_page(self) -> int:
        """Pool rows from one page to the next: ``page_size``, or more for a padded page stride."""
        kv = self.kv_cache
        return 1 if kv.shape[-2] == 1 else kv.stride(0) // kv.stride(-2)

    def pool_rows(self, slots: torch.Tensor) -> torch.Tensor:
        """Rows of :attr:`pool` holding token ``slots`` (``page * page_size + row``; int64, valid)."""
        page_size, rows_per_page = self.kv_cache.shape[-2], self.rows_per_page
        if rows_per_page == page_size:
            return slots
        return slots // page_size * rows_per_page + slots % page_size

    @property
    def pages(self) -> torch.Tensor:
        """The cache as ``(pages, page_size, D)`` (a view of a 4-D cache)."""
        return self.kv_cache.squeeze(1) if self.kv_cache.dim() == 4 else self.kv_cache

    @property
    def lse3(self) -> torch.Tensor | None:
        """``lse`` as a ``(B, q_len, H)`` view (splitting one dimension is always a view)."""
        lse = self.lse
        if lse is None or lse.dim() == 3:
            return lse
        return lse.unflatten(0, self.query.shape[:2])


# `_make` is `tuple.__new__` itself: a record is built with no Python frame (about 100 ns of host
# time a call; the API layers pass every field, so namedtuple's length check has nothing to catch)
for _record in (Rope, Decode):
    _record._make = classmethod(tuple.__new__)
