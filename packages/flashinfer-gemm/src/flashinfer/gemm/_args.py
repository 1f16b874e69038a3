"""The argument records the GEMM API layer hands to every implementation.

One immutable record per op, built once by the public function after validation (so every
field already satisfies what its docstring says; through ``_make`` from a tuple of every field,
which costs less host time than the constructor's argument binding) and passed, as one argument, to
``_reference``, ``_cuda`` and ``_mate`` and on to the Triton launchers (only with every size
above zero: at ``k == 0`` the API calls the record's ``zero_fill`` instead, :func:`._dispatch.run`). Fields hold the caller's
tensors as given; views an implementation may want (a 0-dim scale, the logical orientation of
an MN-major scale) are properties, made only by the implementations that read them: a view
costs more host time than the whole validation of a call (``benchmarks/RESULTS.md``, "Host time").
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from flashinfer._core.constants import E4M3_MAX, OUTPUT_SCALE_FLOOR

from ._group_gemm_segments import row_groups, rows_in_segments


class Bmm(NamedTuple):
    """``out = cast((A.float() @ B.float()) * A_scale * B_scale)``, b, m, n, k > 0.

    Attributes
    ----------
    A : torch.Tensor
        ``(b, m, k)``: both operands bf16/fp16 (one dtype) or both FP8 (e4m3/e5m2, may mix);
        any strides.
    B : torch.Tensor
        ``(b, k, n)``, any strides (column-major ``B.stride(-2) == 1`` or row-major).
    out : torch.Tensor
        ``(b, m, n)`` bf16/fp16/fp32 (FP8: bf16/fp16), any strides, written in place.
    a_scale_given, b_scale_given : torch.Tensor or None
        FP8 only: float32 dequantization multipliers as the caller gave them: ``()`` or ``(1,)``
        per tensor, ``(b, m, 1)`` or ``(b, 1, m)`` (A) and ``(b, 1, n)`` or ``(b, n, 1)`` (B)
        per channel. None for 16-bit operands. Their views :attr:`a_scale` and :attr:`b_scale`
        broadcast against ``out``.
    """

    A: torch.Tensor
    B: torch.Tensor
    out: torch.Tensor
    a_scale_given: torch.Tensor | None = None
    b_scale_given: torch.Tensor | None = None

    def zero_fill(self) -> None:
        """The product at ``k == 0``: every element zero."""
        self.out.zero_()

    @property
    def a_scale(self) -> torch.Tensor | None:
        """A's scale as a 0-dim tensor or a ``(b, m, 1)`` view (broadcasts against ``out``)."""
        return _scale_view(self.a_scale_given, rows_last=False)

    @property
    def b_scale(self) -> torch.Tensor | None:
        """B's scale as a 0-dim tensor or a ``(b, 1, n)`` view (broadcasts against ``out``)."""
        return _scale_view(self.b_scale_given, rows_last=True)


def _scale_view(scale, rows_last: bool):
    if scale is None or scale.dim() == 0:
        return scale
    if scale.dim() == 1:
        return scale.view(())
    # (b, rows, 1) or (b, 1, rows); when rows == 1 both read the same
    if (scale.shape[1] == 1) == rows_last:
        return scale
    return scale.transpose(1, 2)


class Groupwise(NamedTuple):
    """``out[i, j] = sum_kb sa[i // block_m, kb] * sb[j // block_n, kb] * sum_{k in kb} a[i, k] b[j, k]``.

    Attributes
    ----------
    a, b : torch.Tensor
        ``(m, k)`` and ``(n, k)`` FP8 with ``stride(-1) == 1``; m, n, k > 0.
    a_scale_given, b_scale_given : torch.Tensor
        float32 block scales as the caller stored them. Their logical views are
        :attr:`a_scale` ``(ceil(m / block_m), ceil(k / block_k))`` and :attr:`b_scale`
        ``(ceil(n / block_n), ceil(k / block_k))``.
    a_scale_mn_major, b_scale_mn_major : bool
        Whether the logical view is the transpose of the stored tensor.
    block_m, block_n, block_k : int
        The scale granularity, ``(1 or 128, 128, 128)``.
    out : torch.Tensor
        ``(m, n)`` bf16/fp16, any strides; or float8_e4m3fn when ``output_scale`` is given.
    output_scale : torch.Tensor or None
        float32 ``(m, ceil(n / 128))`` contiguous, written by the implementation:
        ``output_scale[i, jb] = max(amax_{j in jb} |acc[i, j]|, 1e-12) / 448`` and
        ``out[i, j] = e4m3(clamp(acc[i, j] / output_scale[i, j // 128], -448, 448))``.
    """

    a: torch.Tensor
    b: torch.Tensor
    a_scale_given: torch.Tensor
    b_scale_given: torch.Tensor
    a_scale_mn_major: bool
    b_scale_mn_major: bool
    block_m: int
    block_n: int
    block_k: int
    out: torch.Tensor
    output_scale: torch.Tensor | None = None

    def zero_fill(self) -> None:
        """The product at ``k == 0``: zeros, and the floor of ``output_scale`` (FP8 output)."""
        self.out.zero_()
        if self.output_scale is not None:
            self.output_scale.fill_(OUTPUT_SCALE_FLOOR / E4M3_MAX)

    @property
    def a_scale(self) -> torch.Tensor:
        """The logical ``(ceil(m / block_m), ceil(k / block_k))`` view (any strides)."""
        return self.a_scale_given.t() if self.a_scale_mn_major else self.a_scale_given

    @property
    def b_scale(self) -> torch.Tensor:
        """The logical ``(ceil(n / block_n), ceil(k / block_k))`` view (any strides)."""
        return self.b_scale_given.t() if self.b_scale_mn_major else self.b_scale_given


class GroupedContiguous(NamedTuple):
    """``out[r] = dequant(a)[r] @ dequant(b[m_indices[r]]).T`` (DeepGEMM's contiguous layout).

    Attributes
    ----------
    a : torch.Tensor
        ``(m, k)`` float8_e4m3fn, ``stride(-1) == 1``; m, n, k > 0.
    b : torch.Tensor
        ``(G, n, k)`` float8_e4m3fn, ``stride(-1) == 1``.
    a_scale : torch.Tensor
        float32 ``(m, ceil(k / 128))``, any strides.
    b_scale : torch.Tensor
        float32 ``(G, ceil(n / 128), ceil(k / 128))``, any strides.
    m_indices : torch.Tensor
        ``(m,)`` int32 contiguous. Rows whose id is outside ``[0, G)`` are never computed, their
        ``out`` rows never written, and ``b`` is never read out of bounds.
    out : torch.Tensor
        ``(m, n)`` bf16, ``stride(-1) == 1``.
    """

    a: torch.Tensor
    b: torch.Tensor
    a_scale: torch.Tensor
    b_scale: torch.Tensor
    m_indices: torch.Tensor
    out: torch.Tensor

    def zero_fill(self) -> None:
        """The product at ``k == 0``: zeros in the rows whose id is in ``[0, G)``."""
        valid = (self.m_indices >= 0) & (self.m_indices < self.b.shape[0])
        self.out.masked_fill_(valid.unsqueeze(1), 0)


class GroupedMasked(NamedTuple):
    """``out[g, r] = dequant(a[g])[r] @ dequant(b[g]).T`` for ``r < masked_m[g]``.

    Attributes
    ----------
    a : torch.Tensor
        ``(G, m, k)`` float8_e4m3fn, ``stride(-1) == 1``; rows past ``masked_m[g]`` are never
        read.
    b : torch.Tensor
        ``(G, n, k)`` float8_e4m3fn, ``stride(-1) == 1``.
    a_scale : torch.Tensor
        float32 ``(G, m, ceil(k / 128))``, any strides.
    b_scale : torch.Tensor
        float32 ``(G, ceil(n / 128), ceil(k / 128))``, any strides.
    masked_m : torch.Tensor
        ``(G,)`` int32: valid rows per group, clamped to ``[0, m]`` by the implementation.
    expected_m : int
        A positive hint of the typical ``masked_m``: kernel configuration only.
    out : torch.Tensor
        ``(G, m, n)`` bf16, ``stride(-1) == 1``; rows past ``masked_m[g]`` are left untouched.
    """

    a: torch.Tensor
    b: torch.Tensor
    a_scale: torch.Tensor
    b_scale: torch.Tensor
    masked_m: torch.Tensor
    expected_m: int
    out: torch.Tensor


class GroupedSegments(NamedTuple):
    """Rows ``[e[g], e[g + 1])`` of ``out`` are those rows of ``dequant(a)`` times ``dequant(b[g]).T``.

    ``e = cummax(clamp(m_indptr, 0, m))`` are the effective offsets (:mod:`._group_gemm_segments`); rows
    outside ``[e[0], e[G])`` are left untouched.

    Attributes
    ----------
    a : torch.Tensor
        ``(m, k)`` FP8 (e4m3/e5m2), ``stride(-1) == 1``; m, n, k > 0.
    b : torch.Tensor
        ``(G, n, k)`` FP8 (e4m3/e5m2, may differ from ``a``), ``stride(-1) == 1``; G >= 1.
    a_scale : torch.Tensor
        float32 per-row ``(m, ceil(k / 128))`` logical view (the API expands 128-row blocks).
    b_scale : torch.Tensor
        float32 ``(G, ceil(n / 128), ceil(k / 128))`` logical view, any strides.
    m_indptr : torch.Tensor
        ``(G + 1,)`` int32 row offsets, read on the device only.
    out : torch.Tensor
        ``(m, n)`` bf16/fp16, any strides.
    """

    a: torch.Tensor
    b: torch.Tensor
    a_scale: torch.Tensor
    b_scale: torch.Tensor
    m_indptr: torch.Tensor
    out: torch.Tensor

    def as_contiguous(self) -> GroupedContiguous:
        """This call as the contiguous grouped GEMM: one group id per row
        (:func:`~._group_gemm_segments.row_groups`), so rows outside every segment are left
        untouched."""
        return GroupedContiguous(
            self.a, self.b, self.a_scale, self.b_scale, row_groups(self.m_indptr, self.a.shape[0]), self.out
        )

    def zero_fill(self) -> None:
        """The product at ``k == 0``: zeros in the rows of the segments."""
        self.out.masked_fill_(rows_in_segments(self.m_indptr, self.out.shape[0]).unsqueeze(1), 0)


class QuantizeBlocks(NamedTuple):
    """FP8 E4M3 quantization per ``block_rows x 128`` block, as upstream's SM90 GEMM does it.

    Per block, in float32 with correctly rounded steps: ``q = 448 / amax`` (1 if amax == 0),
    ``out = e4m3(clamp(x * q, -448, 448))`` (round to nearest even), ``scale = 1 / q``.

    Attributes
    ----------
    x : torch.Tensor
        ``(rows, cols)`` bf16, ``stride(-1) == 1``, ``cols % 128 == 0``.
    block_rows : int
        1 (per-row 1x128 blocks) or 128 (128x128 blocks).
    out : torch.Tensor
        ``(rows, cols)`` float8_e4m3fn, ``stride(-1) == 1``.
    scale : torch.Tensor
        float32 ``(ceil(rows / block_rows), cols / 128)`` logical view, any strides, written.
    """

    x: torch.Tensor
    block_rows: int
    out: torch.Tensor
    scale: torch.Tensor


# `_make` is `tuple.__new__` itself: a record is built with no Python frame (about 100 ns of host
# time a call; the API layers pass every field, so namedtuple's length check has nothing to catch)
for _record in (Bmm, Groupwise, GroupedContiguous, GroupedMasked, GroupedSegments, QuantizeBlocks):
    _record._make = classmethod(tuple.__new__)
