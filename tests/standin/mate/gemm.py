"""STAND-IN for ``mate.gemm`` (MATE 0.2.6): signatures and argument rules, float64 math.

Not MATE: nothing here says how MATE behaves on MUSA hardware. The functions take MATE 0.2.6's
exact signatures, raise MATE's documented errors for the argument rules the spec lists
(``spec/mate-api.md`` sections 3 and 4), compute in float64 on the tensors' device, and record
every call (arguments as passed, so tests can compare storage pointers with the caller's
tensors). Rows MATE leaves unspecified (padding rows, rows past ``masked_m``) are written with
:data:`UNSPECIFIED` so a test can tell whether the adapter restored them.
"""

from __future__ import annotations

import math

import torch

from ._recorder import record

UNSPECIFIED = 7.0
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_16BIT = (torch.float16, torch.bfloat16)
_TENSOR, _CHANNEL, _GROUP, _BLOCK = (-1, -1), (1, -1), (1, 128), (128, 128)
_FP8_RECIPES = {
    (_TENSOR, _TENSOR),
    (_CHANNEL, _TENSOR),
    (_CHANNEL, _CHANNEL),
    (_GROUP, _GROUP),
    (_GROUP, _BLOCK),
}


def _require(cond: bool, message: str, exc=ValueError) -> None:
    if not cond:
        raise exc(message)


def _last_dim_unit(x: torch.Tensor, what: str) -> None:
    _require(x.stride(-1) == 1, what, RuntimeError)


def _scale_grid(scale, arg, batch, rows, kblocks, recipe, fixed_scale_layout, nt):
    """Expand a scale to ``(batch, rows_blocks, kblocks)`` K-major logical order (float64)."""
    if recipe == _TENSOR:
        _require(scale.dim() == 0, f"{arg} must be a scalar tensor")
        return scale.double().reshape(1, 1, 1)
    _require(scale.dim() == 3, f"{arg} must be a 3D tensor")
    _require(scale.shape[0] == batch, f"{arg} batch dimension mismatch")
    _require(
        nt or fixed_scale_layout is True, "non-NT bmm with non-scalar scales requires fixed_scale_layout=True"
    )
    k_major, mn_major = (batch, rows, kblocks), (batch, kblocks, rows)
    shape = tuple(scale.shape)
    _require(
        shape in (k_major, mn_major), f"{arg} must have shape {k_major} (K-major) or {mn_major} (MN-major)"
    )
    if shape == k_major and shape == mn_major:
        return scale.double().transpose(1, 2) if fixed_scale_layout is True else scale.double()
    return scale.double() if shape == k_major else scale.double().transpose(1, 2)


def _expand(grid, rows, cols, block_rows, block_cols):
    grid = grid.repeat_interleave(block_rows, dim=-2)[..., :rows, :] if block_rows > 0 else grid
    return grid.repeat_interleave(block_cols, dim=-1)[..., :cols] if block_cols > 0 else grid


def bmm(
    a,
    b,
    out=None,
    *,
    trans_a=False,
    trans_b=True,
    scale_a=None,
    scale_b=None,
    scale_out=None,
    recipe_a=None,
    recipe_b=None,
    c=None,
    out_dtype=None,
    fixed_scale_layout=None,
    backend="auto",
):
    record(
        "gemm.bmm", a=a, b=b, out=out, trans_a=trans_a, trans_b=trans_b, scale_a=scale_a, scale_b=scale_b,
        scale_out=scale_out, recipe_a=recipe_a, recipe_b=recipe_b, c=c, out_dtype=out_dtype,
        fixed_scale_layout=fixed_scale_layout, backend=backend,
    )  # fmt: skip
    _last_dim_unit(a, "a must be contiguous in the declared major dimension")
    _last_dim_unit(b, "b must be contiguous in the declared major dimension")
    a_mk = a.transpose(-2, -1) if trans_a else a
    b_kn = b.transpose(-2, -1) if trans_b else b
    batch, m, k = a_mk.shape
    n = b_kn.shape[-1]
    _require(b_kn.shape[0] == batch and b_kn.shape[1] == k, "a and b shapes do not match", RuntimeError)
    _require(c is None, "the stand-in does not model `c`", NotImplementedError)
    if a.dtype in _16BIT:
        _require(scale_a is None and scale_b is None, "unscaled bmm takes no scales")
        _require(
            backend in ("auto", "mudnn", "mutlass"), "backend must be one of ['auto', 'mudnn', 'mutlass']"
        )
        _require(b.dtype == a.dtype, "a and b must have the same dtype", RuntimeError)
        dtype = out.dtype if out is not None else (out_dtype or a.dtype)
        _require(
            dtype in (a.dtype, torch.float32),
            "d must have the same dtype as a and b, or be fp32",
            RuntimeError,
        )
        result = a_mk.double() @ b_kn.double()
    else:
        _require(a.dtype in FP8 and b.dtype in FP8, "unscaled bmm only supports FP16 or BF16 inputs")
        _require(scale_a is not None and scale_b is not None, "FP8 inputs require scale_a and scale_b")
        _require(recipe_a is not None and recipe_b is not None, "FP8 inputs require recipe_a and recipe_b")
        recipe_a, recipe_b = tuple(recipe_a), tuple(recipe_b)
        _require((recipe_a, recipe_b) in _FP8_RECIPES, "FP8 bmm got unsupported recipe_a and recipe_b")
        _require(
            backend in ("auto", "mudnn", "mubin", "mutlass"),
            "backend must be one of ['auto', 'mudnn', 'mubin', 'mutlass']",
        )
        if recipe_a == _GROUP:
            _require(
                not (a.dtype == torch.float8_e4m3fn and b.dtype == torch.float8_e5m2),
                "E4M3 x E5M2 unsupported",
            )
        for s in (scale_a, scale_b):
            _require(s.dtype == torch.float32, "scales must be float32", RuntimeError)
        if scale_out is not None:
            _require(backend in ("auto", "mubin"), "scale_out requires the mubin backend")
            _require(
                (recipe_a, recipe_b) == (_GROUP, _BLOCK),
                "groupwise_gemm_8bit_fp8output_mubin needs (1,128,128)",
            )
            _require(not fixed_scale_layout, 'backend="mubin" only supports K-major scales')
        else:
            _require(backend != "mubin", 'backend="mubin" requires scale_out')
        kgran = recipe_a[1] if recipe_a[1] > 0 else k
        kblocks = math.ceil(k / kgran) if k else 0
        grids = []
        for arg, scale, rows, recipe in (
            ("scale_a", scale_a, m, recipe_a),
            ("scale_b", scale_b, n, recipe_b),
        ):
            rows_blocks = math.ceil(rows / recipe[0]) if recipe[0] > 0 else 1
            kb = kblocks if recipe[1] > 0 else 1
            grid = _scale_grid(
                scale, arg, batch, rows_blocks, kb, recipe, fixed_scale_layout, trans_b and not trans_a
            )
            grids.append(
                _expand(
                    grid,
                    rows,
                    k,
                    max(recipe[0], 0) if recipe != _TENSOR else 0,
                    kgran if recipe[1] > 0 else 0,
                )
            )
        a_deq = a_mk.double() * grids[0]
        b_deq = b_kn.double() * grids[1].transpose(-2, -1)
        result = a_deq @ b_deq
        dtype = out.dtype if out is not None else (out_dtype or a.dtype)
        if dtype in FP8 and scale_out is None:
            dtype = torch.bfloat16  # MATE's silent FP8 -> bf16 replacement without scale_out
        if scale_out is None:
            _require(
                dtype in (torch.bfloat16, torch.float16, torch.float32), "unsupported FP8 bmm output dtype"
            )
    if out is None:
        out = torch.empty((batch, m, n), dtype=dtype, device=a.device)
    _require(tuple(out.shape) == (batch, m, n), "d has the wrong shape", RuntimeError)
    _last_dim_unit(out, "d must be contiguous at the last dimension")
    if out_dtype is not None:
        _require(out.dtype == out_dtype, "out.dtype differs from out_dtype", RuntimeError)
    if scale_out is None:
        out.copy_(result)
        return out
    _require(
        out.dtype == torch.float8_e4m3fn and out.is_contiguous(),
        "mubin writes a contiguous e4m3 d",
        RuntimeError,
    )
    nb = math.ceil(n / 128)
    _require(
        tuple(scale_out.shape) == (batch, m, nb) and scale_out.dtype == torch.float32,
        "scale_out shape",
        RuntimeError,
    )
    padded = torch.nn.functional.pad(result, (0, nb * 128 - n))
    block_scale = padded.abs().view(batch, m, nb, 128).amax(-1).clamp_min(1e-12) / 448.0
    scale_out.copy_(block_scale)
    per_element = block_scale.repeat_interleave(128, dim=-1)[..., :n]
    out.copy_((result / per_element).clamp(-448, 448).to(torch.float8_e4m3fn))
    return out


def _grouped_operands(input_a, input_b, out, k_major_a_scale_only: bool):
    (a, a_scale), (b, b_scale) = input_a, input_b
    for x, what in ((a, "a"), (b, "b")):
        _require(x.dtype in FP8, f"{what} must be FP8")
        _last_dim_unit(x, f"{what} must be contiguous at the last dimension")
    for s in (a_scale, b_scale):
        _require(s.dtype == torch.float32, "scales must be float32", RuntimeError)
    _require(b_scale.is_contiguous(), "b_scale must be contiguous", RuntimeError)
    if k_major_a_scale_only:
        # The real kernel misreads other layouts silently; the stand-in refuses them.
        _require(a_scale.is_contiguous(), "a_scale must be K-major contiguous", RuntimeError)
    _require(out is not None and out.is_contiguous(), "out must be a contiguous tensor", RuntimeError)
    _require(out.dtype in (torch.bfloat16, torch.float16), "out must be bf16 or fp16", RuntimeError)
    k = a.shape[-1]
    a_deq = a.double() * _expand(a_scale.double(), a.shape[-2], k, 1, 128)
    b_deq = b.double() * _expand(b_scale.double(), b.shape[-2], k, 128, 128)
    return a_deq, b_deq


def _check_granularity(scale_granularity_mnk) -> None:
    if scale_granularity_mnk is not None:
        _require(tuple(scale_granularity_mnk)[1:] == (128, 128), "n and k granularities must be 128")


def ragged_m_moe_gemm_8bit(
    input_a,
    input_b,
    ragged_tokens_info,
    out,
    gemm_mode="per_token",
    major_a_mode="K",
    major_b_mode="K",
    scale_granularity_mnk=None,
    num_mp=None,
    alignment_m=None,
    backend="auto",
):
    record(
        "gemm.ragged_m_moe_gemm_8bit", input_a=input_a, input_b=input_b, ragged_tokens_info=ragged_tokens_info,
        out=out, gemm_mode=gemm_mode, major_a_mode=major_a_mode, major_b_mode=major_b_mode,
        scale_granularity_mnk=scale_granularity_mnk, num_mp=num_mp, alignment_m=alignment_m, backend=backend,
    )  # fmt: skip
    _require(backend in ("auto", "mubin", "mutlass"), "backend must be one of ['auto', 'mubin', 'mutlass']")
    _require(gemm_mode in ("per_token", "per_expert"), "Not supported gemm mode", AssertionError)
    _require(alignment_m in (None, 128, 256), "alignment_m must be 128 or 256")
    _check_granularity(scale_granularity_mnk)
    if gemm_mode == "per_expert":
        _ragged_per_expert(input_a, input_b, ragged_tokens_info, out, major_a_mode, major_b_mode)
        return out
    ids = ragged_tokens_info
    _require(
        ids.dtype == torch.int32 and ids.is_contiguous() and ids.dim() == 1,
        "ragged_tokens_info int32 contiguous",
        RuntimeError,
    )
    a_deq, b_deq = _grouped_operands(input_a, input_b, out, k_major_a_scale_only=True)
    align = alignment_m or 128
    host_ids = ids.tolist()
    _require(
        max(host_ids, default=-1) < b_deq.shape[0],
        "group id out of range: the kernel would read b out of bounds",
        IndexError,
    )
    result = torch.full(out.shape, UNSPECIFIED, dtype=torch.float64, device=out.device)
    for g in sorted(set(host_ids) - {-1}):
        rows = [r for r, x in enumerate(host_ids) if x == g]
        _require(
            rows == list(range(rows[0], rows[0] + len(rows))) and rows[0] % align == 0,
            f"group {g} is not one aligned segment",
        )
        result[rows[0] : rows[-1] + 1] = a_deq[rows[0] : rows[-1] + 1] @ b_deq[g].t()
    out.copy_(result)


def _ragged_per_expert(input_a, input_b, counts, out, major_a_mode, major_b_mode) -> None:
    """``gemm_mode="per_expert"``: ``counts[e]`` rows per expert, packed back to back from row 0."""
    _require(major_a_mode == "K", "m_grouped_contig_gemm_8bit_mubin only supports K-major A")
    _require(major_b_mode == "K", "the stand-in models K-major B only", NotImplementedError)
    _require(
        counts.dtype == torch.int32 and counts.is_contiguous() and counts.dim() == 1,
        "ragged_tokens_info int32 contiguous",
        RuntimeError,
    )
    a_deq, b_deq = _grouped_operands(input_a, input_b, out, k_major_a_scale_only=True)
    _require(counts.shape[0] == b_deq.shape[0], "one token count per expert", RuntimeError)
    host_counts = counts.tolist()
    _require(
        min(host_counts, default=0) >= 0 and sum(host_counts) <= a_deq.shape[0],
        "token counts outside [0, m]: the kernel would read a out of bounds",
        IndexError,
    )
    result = torch.full(out.shape, UNSPECIFIED, dtype=torch.float64, device=out.device)
    start = 0
    for e, count in enumerate(host_counts):
        result[start : start + count] = a_deq[start : start + count] @ b_deq[e].t()
        start += count
    out.copy_(result)


def masked_moe_gemm_8bit(
    input_a,
    input_b,
    masked_tokens_info,
    out,
    scale_granularity_mnk=None,
    expect_tokens=None,
    enable_overlap=False,
    signal=None,
    backend="auto",
):
    record(
        "gemm.masked_moe_gemm_8bit", input_a=input_a, input_b=input_b, masked_tokens_info=masked_tokens_info,
        out=out, scale_granularity_mnk=scale_granularity_mnk, expect_tokens=expect_tokens,
        enable_overlap=enable_overlap, signal=signal, backend=backend,
    )  # fmt: skip
    _require(backend in ("auto", "mubin", "mutlass"), "backend must be one of ['auto', 'mubin', 'mutlass']")
    _require(not enable_overlap, "the stand-in does not model enable_overlap", NotImplementedError)
    _check_granularity(scale_granularity_mnk)
    masked = masked_tokens_info
    _require(
        masked.dtype == torch.int32 and masked.is_contiguous(),
        "masked_tokens_info int32 contiguous",
        RuntimeError,
    )
    a_scale = input_a[1]
    if a_scale.stride(-1) != 1:  # MN-major, detected from strides
        _require(
            a_scale.transpose(-2, -1).is_contiguous(),
            "MN-major a_scale must be a transposed contiguous tensor",
            RuntimeError,
        )
    a_deq, b_deq = _grouped_operands(input_a, input_b, out, k_major_a_scale_only=False)
    max_m = a_deq.shape[1]
    counts = masked.tolist()
    _require(
        all(0 <= c <= max_m for c in counts),
        "masked_m outside [0, max_m]: the kernel would read a out of bounds",
        IndexError,
    )
    result = torch.full(out.shape, UNSPECIFIED, dtype=torch.float64, device=out.device)
    for g, count in enumerate(counts):
        result[g, :count] = a_deq[g, :count] @ b_deq[g].t()
    out.copy_(result)
    return out
