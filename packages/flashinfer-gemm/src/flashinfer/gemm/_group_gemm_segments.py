"""Row segments of the grouped GEMM (``m_indptr``), turned into what each implementation reads.

``group_gemm_fp8_nt_groupwise`` gives group ``g`` the rows ``[m_indptr[g], m_indptr[g + 1])``.
The offsets live on the device, so nothing here reads them on the host: every helper is a few
small tensor operations (no synchronization; CUDA-graph capturable).

Any ``m_indptr`` is made safe first, so no implementation ever reads outside ``a``, ``b`` or
the scales: the effective offsets are ``e = cummax(clamp(m_indptr, 0, m))`` (non-decreasing,
within ``[0, m]``). For a well-formed ``m_indptr`` (non-decreasing, ``m_indptr[-1] <= m``)
``e == m_indptr``. Rows outside ``[e[0], e[G])`` belong to no group.
"""

from __future__ import annotations

import torch


def segment_ends(m_indptr: torch.Tensor, m: int) -> torch.Tensor:
    """The effective offsets ``e`` (int64, ``[G + 1]``): clamped to ``[0, m]``, non-decreasing."""
    return torch.cummax(m_indptr.long().clamp(0, m), dim=0).values


def row_groups(m_indptr: torch.Tensor, m: int) -> torch.Tensor:
    """``[m]`` int32: the group of each row; -1 before ``e[0]`` and ``G`` from ``e[G]`` on."""
    ends = segment_ends(m_indptr, m)
    rows = torch.arange(m, device=m_indptr.device)
    groups = torch.searchsorted(ends[1:], rows, right=True)
    return torch.where(rows < ends[0], -1, groups).to(torch.int32)


def rows_in_segments(m_indptr: torch.Tensor, m: int) -> torch.Tensor:
    """``[m]`` bool: whether a row belongs to a group (``e[0] <= r < e[G]``)."""
    ends = segment_ends(m_indptr, m)
    rows = torch.arange(m, device=m_indptr.device)
    return (rows >= ends[0]) & (rows < ends[-1])


def packed_counts(m_indptr: torch.Tensor, m: int) -> torch.Tensor:
    """``[G]`` int32 row counts for groups packed back to back from row 0.

    Group 0 is given the rows ``[0, e[1])`` (rows before ``e[0]`` are computed with group 0
    and must be discarded by the caller), group ``g > 0`` the rows ``[e[g], e[g + 1])``: the
    layout of MATE's ``gemm_mode="per_expert"``.
    """
    ends = segment_ends(m_indptr, m)
    starts = torch.cat([ends[:1] * 0, ends[1:-1]])
    return (ends[1:] - starts).to(torch.int32)


def row_block_scales(a_scale: torch.Tensor, m_indptr: torch.Tensor, m: int, block_m: int) -> torch.Tensor:
    """Per-row A scales ``[m, kb]`` from scales per ``block_m`` rows of each group.

    Upstream's grouped kernel starts group ``g``'s scale rows at ``m_indptr[g] // block_m``, so
    row ``r`` of group ``g`` reads scale row ``e[g] // block_m + (r - e[g]) // block_m`` (the same
    as ``r // block_m`` when groups start at multiples of ``block_m``). Rows outside every group
    read row 0; their results are discarded.
    """
    ends = segment_ends(m_indptr, m)
    groups = row_groups(m_indptr, m).long().clamp(0, max(ends.numel() - 2, 0))
    starts = ends[groups]
    rows = torch.arange(m, device=m_indptr.device)
    blocks = (starts // block_m + (rows - starts).clamp_min(0) // block_m).clamp(0, a_scale.shape[0] - 1)
    return a_scale.index_select(0, blocks)
