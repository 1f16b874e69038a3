"""FlashInfer v0.6.17's FP8 tile quantization test helpers, on any PyTorch device.

(:func:`per_token_cast_to_fp8`, DeepGEMM's 1 x 128 row quantizer that upstream's
``tests/gemm/test_fp8_blockscale_gemm.py`` uses, is at the end.)

Same results as upstream's ``flashinfer.testing.utils.quantize_fp8`` / ``dequantize_fp8``
(which need einops and numpy), with PyTorch reshapes only. A tensor is cut into tiles of
``tile_shape``; each tile gets one power-of-two scale and FP8 E4M3 values:

- ``scale = 2 ** ceil(log2(max(amax_tile, 1e-4) / 448))`` (computed in the input's dtype, as
  upstream), so the dequantized values ``fp8 * scale`` are exact products;
- ``x_fp8 = (x / (scale + 1e-8)).to(float8_e4m3fn)``.

``scale_major_mode`` says how the scale tensor is laid out: ``"K"`` gives ``[rows/t0,
cols/t1]`` (for 3-D input ``[d0/t0, d1/t1, d2/t2]``); any other value ("MN") swaps the last two
block axes: ``[cols/t1, rows/t0]`` (3-D: ``[d0/t0, d2/t2, d1/t1]``).
"""

from __future__ import annotations

import torch

__all__ = ["dequantize_fp8", "per_token_cast_to_fp8", "quantize_fp8"]

_E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max


def _block_counts(x: torch.Tensor, scale_shape, tile_shape, scale_major_mode: str) -> tuple:
    """Scale blocks along each dimension of ``x``, checked against ``tile_shape``."""
    blocks = tuple(scale_shape)
    if scale_major_mode != "K":  # MN: the last two block axes are stored swapped
        blocks = blocks[:-2] + (blocks[-1], blocks[-2])
    for dim, (size, count, tile) in enumerate(zip(x.shape, blocks, tile_shape)):
        if count * tile != size:
            raise ValueError(
                f"expected scale_shape {tuple(scale_shape)} and tile_shape {tuple(tile_shape)} to tile "
                f"`x` of shape {tuple(x.shape)} exactly (mode {scale_major_mode!r}), got {count} x {tile} "
                f"!= {size} along dimension {dim}"
            )
    return blocks


def _tiled(x: torch.Tensor, blocks: tuple) -> torch.Tensor:
    """``x`` viewed as ``(b0, t0, b1, t1[, b2, t2])``."""
    shape = []
    for size, count in zip(x.shape, blocks):
        shape += [count, size // count if count else 0]
    return x.reshape(shape)


def _expand(scale_blocks: torch.Tensor, x_shape) -> torch.Tensor:
    """Per-block values (in ``x``'s block order) repeated over their tiles."""
    for dim, size in enumerate(x_shape):
        count = scale_blocks.shape[dim]
        scale_blocks = scale_blocks.repeat_interleave(size // count if count else 0, dim=dim)
    return scale_blocks


def _swap_last_two(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(-1, -2)


def quantize_fp8(x, scale_shape, tile_shape, scale_major_mode):
    """Quantize a 2-D or 3-D tensor to FP8 E4M3 with one power-of-two scale per tile.

    Parameters
    ----------
    x : torch.Tensor
        ``[rows, cols]`` or ``[d0, d1, d2]``, usually float32.
    scale_shape : tuple of int
        The shape of the returned scale tensor (block counts, in ``scale_major_mode`` order).
    tile_shape : tuple of int
        The tile size along each dimension of ``x``.
    scale_major_mode : str
        ``"K"`` (block axes in ``x``'s order) or any other value for MN (last two swapped).

    Returns
    -------
    tuple of torch.Tensor
        ``(x_fp8, x_scale)``: ``x_fp8`` has ``x``'s shape and dtype float8_e4m3fn; ``x_scale``
        has ``scale_shape`` and ``x``'s dtype.

    Raises
    ------
    AssertionError
        ``x`` not 2-D or 3-D, or shapes of another rank (as upstream).
    ValueError
        ``scale_shape`` x ``tile_shape`` does not tile ``x`` exactly.

    Examples
    --------
    >>> import torch
    >>> x = torch.randn(4, 256)
    >>> x_fp8, scale = quantize_fp8(x, (4, 2), (1, 128), "K")
    >>> x_fp8.dtype, tuple(scale.shape)
    (torch.float8_e4m3fn, (4, 2))
    >>> bool((dequantize_fp8(x_fp8, scale, "K") - x).abs().max() <= 2**-4 * x.abs().max())
    True
    """
    ndim = x.ndim
    assert ndim in [2, 3], f"x.ndim must be 2 or 3, but got {ndim}"
    assert ndim == len(scale_shape) == len(tile_shape)
    blocks = _block_counts(x, scale_shape, tile_shape, scale_major_mode)
    fp8_amax = torch.tensor(_E4M3_MAX, device=x.device, dtype=torch.float32)
    reduce_dims = tuple(range(1, 2 * ndim, 2))
    abs_max = _tiled(x.abs(), blocks).amax(dim=reduce_dims).clamp(1e-4)  # blocks in x's order
    x_scale = abs_max / fp8_amax
    x_scale = torch.pow(2.0, torch.ceil(torch.log2(x_scale.abs())))
    scales_repeated = _expand(x_scale, x.shape)
    x_fp8 = (x / (scales_repeated + 1e-8)).to(torch.float8_e4m3fn)
    if scale_major_mode != "K":
        x_scale = _swap_last_two(x_scale)
    return x_fp8, x_scale


def dequantize_fp8(x, x_scale, scale_major_mode):
    """``x.float()`` times its tile's scale: the inverse of :func:`quantize_fp8`.

    Parameters
    ----------
    x : torch.Tensor
        ``[rows, cols]`` or ``[d0, d1, d2]`` FP8 values.
    x_scale : torch.Tensor
        One scale per tile, laid out as :func:`quantize_fp8` returns it for
        ``scale_major_mode``; the tile size is inferred from the shapes.
    scale_major_mode : str
        ``"K"`` or any other value for MN.

    Returns
    -------
    torch.Tensor
        float32 (or wider, following ``x_scale``), ``x``'s shape.
    """
    ndim = x.ndim
    assert ndim in [2, 3], f"x.ndim must be 2 or 3, but got {ndim}"
    assert ndim == len(x_scale.shape)
    blocks = x_scale if scale_major_mode == "K" else _swap_last_two(x_scale)
    tiles = [size // count if count else 0 for size, count in zip(x.shape, blocks.shape)]
    _block_counts(x, tuple(x_scale.shape), tiles, scale_major_mode)
    return x.to(torch.float32) * _expand(blocks, x.shape)


def per_token_cast_to_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x [m, n]`` to FP8 E4M3 in 1 x 128 blocks with power-of-two scales (DeepGEMM's).

    Each block's scale is ``2 ** ceil(log2(max(amax, 1e-4) / 448))`` in float32 (a UE8M0
    value), its values ``e4m3(x / scale)``.

    Parameters
    ----------
    x : torch.Tensor
        ``[m, n]``, ``n`` a multiple of 128, any float dtype.

    Returns
    -------
    tuple of torch.Tensor
        ``(x_fp8 [m, n] float8_e4m3fn, scale [m, n // 128] float32)``.

    Raises
    ------
    AssertionError
        ``x`` not 2-D or ``n`` not a multiple of 128 (as upstream).

    Examples
    --------
    >>> x = torch.randn(2, 256)
    >>> x_fp8, scale = per_token_cast_to_fp8(x)
    >>> tuple(scale.shape), bool(torch.all(scale == 2.0 ** torch.log2(scale).round()))
    ((2, 2), True)
    """
    assert x.dim() == 2 and x.size(1) % 128 == 0
    m, n = x.shape
    blocks = x.view(m, -1, 128)
    amax = blocks.abs().float().amax(dim=2).clamp(1e-4)
    scale = torch.pow(2.0, torch.ceil(torch.log2(amax / _E4M3_MAX)))
    return (blocks * (1.0 / scale.unsqueeze(2))).to(torch.float8_e4m3fn).view(m, n), scale
