"""The float64 oracles, the input builders and the tolerance rules of every test (one module).

Oracles are written from the FlashInfer v0.6.17 contract, independently of the package (whose
reference implementation works in float32, blocked and online): one float64 product of the
dequantized operands for the GEMMs (the per-K-block sums regrouped), gather-mask-softmax over
every candidate key for decode (FlashMLA style), a float64 rotation for RoPE.

Inputs are exactly representable: FP8 operands are random values already cast to FP8, scales
are powers of two, decode inputs are values already in the cache dtype. So what is left between
an implementation and its oracle is the accumulation and one rounding to the output dtype.

Tolerance rules, one per output dtype, stated here once:

- bf16 / fp16 / fp32 GEMM outputs (:func:`assert_matches`): every element within
  ``RTOL[dtype] * |ref| + ACC_TOL * ref_abs`` (half an output ulp plus a bound on float32
  accumulation, ``ref_abs`` the same product over absolute values); fp16 adds 2**-24 for
  subnormals. An implementation on tensor cores adds ``slack * rms(ref)`` (``optable.CUDA_SLACK``,
  tests/gpu's ``*_ACCUM_TOL``); past that, a block-scaled FP8 GEMM on CUDA is held to no worse
  than cuBLASLt's error on the same inputs (:func:`assert_matches_or_no_worse`,
  :func:`cublas_blockscaled`, per-tensor FP8: :func:`cublas_fp8_bmm`).
- FP8 E4M3 GEMM outputs with a per-128-column scale (:func:`assert_fp8_output`): one E4M3 ulp.
- FP8 RoPE outputs (:func:`assert_fp8_close`): within one FP8 step, and at most 1% of the
  elements not bit-exact (a rounding tie between float32 and float64).
- bf16 decode outputs (:func:`assert_decode_close`): rtol 1e-2 / atol 2e-3 (one bf16 rounding
  plus float32 sums); the base-2 LSE (float32): rtol 1e-5 / atol 1e-4.
"""

from __future__ import annotations

import math

import torch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
RTOL = {BF16: 2.0**-8, FP16: 2.0**-11, FP32: 2.0**-23}
ACC_TOL = 2.0**-16
LOG2E = 1.0 / math.log(2.0)
INT32_MAX = 2**31 - 1
E4M3_MAX = 448.0
# E4M3 keeps 3 mantissa bits: rounding to nearest costs at most 2**-4 relative in the normal
# range and half the subnormal step (2**-9) absolute; the three float32 roundings of the
# quantization (q = 448 / amax, x * q, 1 / q) add at most 2**-20 relative.
E4M3_REL = 2.0**-4 + 2.0**-20
E4M3_SUBNORMAL_HALF_STEP = 2.0**-10


# ============================================================================ inputs


def _shape(shape) -> tuple:
    """``f(2, 3)`` and ``f((2, 3))`` alike."""
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else shape


def fp8(*shape, dtype=E4M3, scale=3.0, generator=None, device=None):
    """Random values that are exactly FP8 (never all zero)."""
    return (torch.randn(_shape(shape), generator=generator, device=device) * scale).to(dtype)


def pow2(*shape, low=-3, high=4, generator=None, device=None):
    """Random power-of-two scales in [2**low, 2**(high-1)] (default [1/8, 8])."""
    return 2.0 ** torch.randint(low, high, _shape(shape), generator=generator, device=device).float()


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


def poison(tensor: torch.Tensor) -> None:
    """Fill a caller buffer with NaN (FP8: its NaN bits), so every element must be overwritten."""
    if tensor.dtype in (E4M3, E5M2):
        tensor.view(torch.uint8).fill_(0x7F)
    else:
        tensor.fill_(math.nan)


def strided_out(*shape, dtype):
    """A NaN-poisoned output whose last dimension has stride 2 (a view into a larger buffer)."""
    base = torch.full((*shape[:-1], 2 * shape[-1]), float("nan"), dtype=dtype)
    return base[..., ::2]


def col_major(x):
    """``x (b, k, n)`` as the transpose view of a contiguous ``(b, n, k)`` tensor."""
    return x.transpose(-2, -1).contiguous().transpose(-2, -1)


def quantized(shape, dtype, scale=1.0) -> torch.Tensor:
    """Random values exactly representable in ``dtype`` (so the oracle sees the same inputs)."""
    return (torch.randn(shape) * scale).clamp(-8, 8).to(dtype)


def cos_sin_cache(
    max_pos: int, rope_dim: int, base: float = 10000.0, yarn_mscale: float = 1.0
) -> torch.Tensor:
    """``[max_pos, rope_dim]`` float32: cos half then sin half (FlashInfer / vLLM layout)."""
    inv_freq = base ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq
    return (torch.cat((angles.cos(), angles.sin()), dim=-1) * yarn_mscale).float()


def physical_slots(batch, q_len, topk, seq_lens, page_size, num_pages, pad_to=None):
    """Per-token slot lists like the callers build them: logical positions through a random page map.

    Each request gets its own pages; token t lists logical positions ``0 .. n_t-1`` (shuffled),
    then -1 padding.
    """
    pages_per_request = num_pages // batch
    perm = torch.randperm(num_pages)
    indices = torch.full((batch, q_len, topk), -1, dtype=torch.int32)
    for b in range(batch):
        pages = perm[b * pages_per_request : (b + 1) * pages_per_request]
        length = min(int(seq_lens[b]), pages_per_request * page_size)
        for t in range(q_len):
            n = min(topk, length, pad_to if pad_to is not None else topk)
            logical = torch.randperm(length)[:n]
            indices[b, t, :n] = (pages[logical // page_size] * page_size + logical % page_size).int()
    return indices


def on_oracle_device(fn, *args):
    """``() -> fn(*args)`` computed where float64 is fast: on the GPU where there is one (the
    real-size rows of the op tables, whose oracles would take minutes on a CPU), else on the
    CPU; the tensors it returns (in tuples too) come back to the CPU. The oracles below take
    their device from their operands."""

    def run():
        device = "cuda" if torch.cuda.is_available() else "cpu"
        moved = [arg.to(device) if isinstance(arg, torch.Tensor) else arg for arg in args]
        return _to_cpu(fn(*moved))

    return run


def _to_cpu(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_to_cpu(v) for v in value)
    return value.cpu() if isinstance(value, torch.Tensor) else value


# ============================================================================ GEMM oracles


def oracle_bmm(A, B, sa=None, sb=None):
    """float64 ``(A @ B) * sa * sb`` via an explicit einsum; also the absolute-value product."""
    a, b = A.double(), B.double()
    ref = torch.einsum("bmk,bkn->bmn", a, b)
    ref_abs = torch.einsum("bmk,bkn->bmn", a.abs(), b.abs())
    if sa is not None:
        scale = sa.double() * sb.double()
        ref, ref_abs = ref * scale, ref_abs * scale.abs()
    return ref, ref_abs


def expand_blocks(scale, rows, cols, block_rows, block_cols):
    """float64 per-element scales from block scales, cropped to ``rows x cols`` (any device)."""
    scale = scale.double().repeat_interleave(block_rows, dim=-2)[..., :rows, :]
    return scale.repeat_interleave(block_cols, dim=-1)[..., :cols]


def dequant(x, scale, block_rows, block_cols=128):
    """float64 ``x`` times its ``block_rows x block_cols`` block scales."""
    rows, cols = x.shape[-2:]
    return x.double() * expand_blocks(scale, rows, cols, block_rows, block_cols)


def _products(a, b):
    """float64 ``(a @ b^T, |a| @ |b|^T)`` of dequantized operands."""
    return a @ b.t(), a.abs() @ b.abs().t()


def oracle_groupwise(a, b, sa, sb, gm, gn, gk):
    """float64 ``(ref, ref_abs)`` of the block-scaled ``a @ b^T``, on the operands' device.

    The contract's ``sum_kb sa[i//gm, kb] * sb[j//gn, kb] * sum_{k in kb} a[i,k] b[j,k]``
    regrouped as one product of the dequantized operands: FP8 values times power-of-two scales,
    and their products, are exact in float64, so only the float64 sums round (at most
    ``k * 2**-53 * ref_abs``, far below every tolerance).

    Parameters
    ----------
    a, b : torch.Tensor
        ``(m, k)`` and ``(n, k)`` FP8 (or any float) operands.
    sa, sb : torch.Tensor
        ``(ceil(m/gm), ceil(k/gk))`` and ``(ceil(n/gn), ceil(k/gk))`` scales in logical K-major
        order (any strides).
    gm, gn, gk : int
        The scale blocks' rows of ``a``, rows of ``b`` and depth.

    Returns
    -------
    tuple of torch.Tensor
        ``ref (m, n)`` and ``ref_abs (m, n)``, the same product over absolute values (the
        accumulation term of :func:`assert_matches`).
    """
    return _products(dequant(a, sa, gm, gk), dequant(b, sb, gn, gk))


def oracle_contiguous(a, b, sa, sb, ids):
    """Row ``r`` against group ``ids[r]`` as :func:`oracle_groupwise` (1 x 128 A blocks, 128 x 128
    B blocks); rows of no group (an id outside ``[0, G)``): NaN."""
    m, n = a.shape[0], b.shape[1]
    a_deq = dequant(a, sa, 1)  # before selecting rows: float8 tensors take no boolean index on CUDA
    ref = torch.full((m, n), float("nan"), dtype=torch.float64, device=a.device)
    ref_abs = torch.zeros(m, n, dtype=torch.float64, device=a.device)
    for g in range(b.shape[0]):
        mine = ids == g
        ref[mine], ref_abs[mine] = _products(a_deq[mine], dequant(b[g], sb[g], 128))
    return ref, ref_abs


def oracle_masked(a, b, sa, sb, masked_m):
    """Group ``g``'s first ``clamp(masked_m[g], 0, m)`` rows as :func:`oracle_groupwise` (1 x 128 A
    blocks, 128 x 128 B blocks); the rows past them: NaN."""
    groups, m, _ = a.shape
    n = b.shape[1]
    ref = torch.full((groups, m, n), float("nan"), dtype=torch.float64, device=a.device)
    ref_abs = torch.zeros(groups, m, n, dtype=torch.float64, device=a.device)
    for g in range(groups):
        rows = min(max(int(masked_m[g]), 0), m)
        if rows:
            r, ra = oracle_groupwise(a[g, :rows], b[g], sa[g, :rows], sb[g], 1, 128, 128)
            ref[g, :rows], ref_abs[g, :rows] = r, ra
    return ref, ref_abs


def quantized_blocks(x: torch.Tensor, block_rows: int):
    """Upstream's SM90 block quantization before the e4m3 cast, on ``x``'s device:
    ``(scaled float32 values, scales float32, amax float64)``.

    Per ``block_rows x 128`` block: ``q = fl32(448 / amax)`` (1 if ``amax == 0``),
    ``values = clamp(fl32(x * q), +-448)``, ``scale = fl32(1 / q)``. float64 division and
    multiplication of float32 numbers rounded once to float32 equal float32 arithmetic (tensor /
    tensor divides once; a Python number / tensor would multiply by a reciprocal).
    """
    rows, cols = x.shape
    padded = torch.zeros(-(-rows // block_rows) * block_rows, cols, dtype=torch.float64, device=x.device)
    padded[:rows] = x.double()
    blocks = padded.view(-1, block_rows, cols // 128, 128)
    amax = blocks.abs().amax(dim=(1, 3))
    q = torch.where(
        amax == 0, torch.ones_like(amax), (torch.full_like(amax, E4M3_MAX) / amax).float().double()
    )
    values = (blocks * q[:, None, :, None]).float().clamp(-E4M3_MAX, E4M3_MAX).view(-1, cols)[:rows]
    return values, (torch.ones_like(q) / q).float(), amax


def quantize_oracle(x: torch.Tensor, block_rows: int):
    """:func:`quantized_blocks` with the values cast to e4m3 (round to nearest even)."""
    values, scales, amax = quantized_blocks(x, block_rows)
    return values.to(E4M3), scales, amax


def blockscale_oracle(input, weight, input_scale, weight_scale):
    """float64 ``(ref, ref_abs)`` of ``fp8_blockscale_gemm_sm90`` with upstream's quantization.

    ``input_scale`` is the logical ``(M, K/128)`` scale (FP8 input) and ``weight_scale`` the
    ``(N or N/128, K/128)`` one (FP8 weight); 16-bit operands are quantized by the oracle.
    """
    if input.dtype == torch.bfloat16:
        values, scales, _ = quantize_oracle(input, 1)
        a, sa = values, scales
    else:
        a, sa = input, input_scale
    if weight.dtype == torch.bfloat16:
        values, scales, _ = quantize_oracle(weight, 128)
        b, sb, block_n = values, scales, 128
    else:
        b, sb = weight, weight_scale
        block_n = 1 if weight_scale.shape[0] == weight.shape[0] else 128
    return oracle_groupwise(a, b, sa, sb, 1, block_n, 128)


def row_scales(a_scale_blocks, m_indptr, m, block_m):
    """Per-row A scales of the grouped GEMM: group ``g``'s blocks start at ``m_indptr[g] // block_m``."""
    rows = torch.zeros(m, a_scale_blocks.shape[1], dtype=a_scale_blocks.dtype, device=a_scale_blocks.device)
    bounds = m_indptr.tolist()
    for g in range(len(bounds) - 1):
        start, end = bounds[g], bounds[g + 1]
        if end > start:
            blocks = start // block_m + torch.arange(end - start, device=rows.device) // block_m
            rows[start:end] = a_scale_blocks[blocks]
    return rows


def oracle_segments(a, b, a_rows, b_blocks, m_indptr):
    """float64 ``(ref, ref_abs)`` per segment; rows outside every segment are NaN (untouched)."""
    m, n = a.shape[0], b.shape[1]
    ref = torch.full((m, n), float("nan"), dtype=torch.float64, device=a.device)
    ref_abs = torch.zeros(m, n, dtype=torch.float64, device=a.device)
    bounds = m_indptr.tolist()
    for g in range(len(bounds) - 1):
        rows = slice(bounds[g], bounds[g + 1])
        if bounds[g + 1] > bounds[g]:
            ref[rows], ref_abs[rows] = oracle_groupwise(a[rows], b[g], a_rows[rows], b_blocks[g], 1, 128, 128)
    return ref, ref_abs


# ============================================================================ GEMM tolerances


def _rms(ref, valid=None) -> float:
    values = ref if valid is None else ref[valid]
    values = values[values.isfinite()]
    return values.pow(2).mean().sqrt().item() if values.numel() else 0.0


def _bound(ref, ref_abs, dtype, valid, slack):
    """:func:`assert_matches`'s bound per element."""
    if dtype not in RTOL:
        raise AssertionError("use assert_fp8_output for FP8 outputs")
    bound = RTOL[dtype] * ref.abs() + ACC_TOL * ref_abs + (2.0**-24 if dtype == FP16 else 0.0)
    return bound + slack * _rms(ref, valid) if slack else bound


def _all_valid(ref, valid):
    return torch.ones(ref.shape, dtype=torch.bool, device=ref.device) if valid is None else valid


def _ratio(err, bound) -> float:
    """Largest ``err / bound`` (a zero error counts 0 whatever its bound; NaN where ``err`` is)."""
    return torch.where(err == 0, 0.0, err / bound).max().item() if err.numel() else 0.0


def assert_matches(out, ref, ref_abs, valid=None, slack=0.0):
    """The rule of bf16, fp16 and fp32 GEMM outputs: every element of ``out`` where ``valid``
    within ``RTOL[dtype] * |ref| + ACC_TOL * ref_abs + slack * rms(ref)``, the others untouched
    (NaN).

    ``RTOL`` is the output's rounding (half an ulp: bf16 2**-8, fp16 2**-11 plus 2**-24 for
    subnormals; fp32 2**-23), ``ACC_TOL = 2**-16`` bounds a float32 accumulation over
    ``ref_abs`` (``sum |a| |b|``), and ``slack`` is an accumulation with fewer bits than float32
    (tensor cores: ``optable.CUDA_SLACK``, tests/gpu's ``*_ACCUM_TOL``).

    Parameters
    ----------
    out : torch.Tensor
        The result, bf16, fp16 or fp32 (FP8: :func:`assert_fp8_output`).
    ref, ref_abs : torch.Tensor
        float64 oracle and its product over absolute values, on ``out``'s device.
    valid : torch.Tensor, optional
        Boolean mask of the elements to compare (default all); the others must be NaN.
    slack : float
        Extra bound in units of ``rms(ref)`` over the valid elements.
    """
    got = out.double()
    valid = _all_valid(ref, valid)
    bad = valid & ~((got - ref).abs() <= _bound(ref, ref_abs, out.dtype, valid, slack))
    assert not bad.any(), (
        f"{int(bad.sum())} of {int(valid.sum())} elements out of tolerance; first at "
        f"{bad.nonzero()[0].tolist()}: got {got[bad][0].item()}, expected {ref[bad][0].item()}"
    )
    assert got[~valid].isnan().all(), "rows that must be left untouched were written"


def bound_ratio(out, ref, ref_abs, valid=None, slack=0.0) -> float:
    """Largest ``|out - ref|`` over :func:`assert_matches`'s bound among the ``valid`` elements.

    Returns
    -------
    float
        At most 1 where :func:`assert_matches` passes on them; NaN where ``out`` has a NaN.
    """
    valid = _all_valid(ref, valid)
    return _ratio((out.double() - ref).abs()[valid], _bound(ref, ref_abs, out.dtype, valid, slack)[valid])


def assert_matches_or_no_worse(out, ref, ref_abs, slack, yardstick):
    """:func:`assert_matches`, or, past its bound, no worse than ``yardstick()``.

    Hopper's FP8 tensor cores keep fewer bits than float32 while they accumulate (a 128-deep
    block; the whole k in fast accumulation), which on some inputs takes an element past the
    bound, near a rounding midpoint by a whole output ulp; a kernel must then be no worse than
    the vendor library's (:func:`cublas_blockscaled`, :func:`cublas_fp8_bmm`).

    Parameters
    ----------
    out, ref, ref_abs, slack
        As :func:`assert_matches` (every element valid).
    yardstick : callable
        ``() -> torch.Tensor``: another kernel's output on the same inputs (e.g. cuBLASLt's
        block-scaled GEMM), held to the same oracle and bound.
    """
    ours = bound_ratio(out, ref, ref_abs, slack=slack)
    if ours <= 1.0:
        return
    theirs = bound_ratio(yardstick(), ref, ref_abs, slack=slack)
    assert ours <= theirs, f"max error / bound = {ours:.3g}; the yardstick's on the same inputs: {theirs:.3g}"


def cublas_fp8_bmm(A, B, A_scale, B_scale, out_dtype):
    """cuBLASLt's FP8 GEMM with fast accumulation (``torch._scaled_mm``, ``use_fast_accum=True``)
    per batch on the same operands, ``bmm_fp8``'s yardstick: per-tensor scales as given; a
    per-row or per-column scale makes both rowwise (a per-tensor one broadcast), the form
    cuBLASLt's rowwise mode takes (bf16 output). Zero-padded to multiples of 16 (cuBLASLt's FP8
    leading dimensions; zeros add nothing, the padding's scales are 1)."""
    batch, m, k = A.shape
    n = B.shape[-1]
    pm, pn, pk = -(-m // 16) * 16, -(-n // 16) * 16, -(-k // 16) * 16
    rowwise = A_scale.numel() > 1 or B_scale.numel() > 1
    out = torch.empty(batch, m, n, dtype=out_dtype, device=A.device)
    for i in range(batch):
        if rowwise:
            sa = torch.ones(pm, 1, device=A.device)
            sa[:m] = A_scale.float().expand(batch, m, 1)[i]
            sb = torch.ones(1, pn, device=A.device)
            sb[:, :n] = B_scale.float().expand(batch, 1, n)[i]
        else:
            sa, sb = A_scale.float().reshape(()), B_scale.float().reshape(())
        a = torch.zeros(pm, pk, device=A.device).to(A.dtype)
        a[:m, :k] = A[i]
        b = torch.zeros(pn, pk, device=A.device).to(B.dtype)  # column-major, as cuBLASLt takes it
        b[:n, :k] = B[i].t()
        full = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=out_dtype, use_fast_accum=True)
        out[i] = full[:m, :n]
    return out


def cublas_blockscaled(a, b, a_scale, b_scale, block_m, out_dtype):
    """cuBLASLt's 1x128 / 128x128 block-scaled GEMM (``torch._scaled_mm``) on the same operands, the
    kernel suites' yardstick for FP8 tensor-core accumulation: zero-padded to the sizes it takes
    (m to 16 rows, n to 128 columns, k to 512; zeros add nothing to any sum, the padding's scales
    are 1), ``block_m``-row A scale blocks expanded per row, scales in its layouts."""
    m, k = a.shape
    n = b.shape[0]
    pm, pn, pk = -(-m // 16) * 16, -(-n // 128) * 128, -(-k // 512) * 512
    ap = torch.zeros(pm, pk, device=a.device).to(E4M3)
    ap[:m, :k] = a
    bp = torch.zeros(pn, pk, device=a.device).to(E4M3)
    bp[:n, :k] = b
    rows = a_scale.repeat_interleave(block_m, 0)[:m]
    sa = torch.ones(pm, pk // 128, device=a.device)
    sa[:m, : rows.shape[1]] = rows
    sb = torch.ones(pn // 128, pk // 128, device=a.device)
    sb[: b_scale.shape[0], : b_scale.shape[1]] = b_scale
    out = torch._scaled_mm(ap, bp.t(), sa.t().contiguous().t(), sb.t(), out_dtype=out_dtype)
    return out[:m, :n]


def fp8_output_ratios(out, output_scale, ref, ref_abs, slack=0.0) -> tuple:
    """``(scale, values)``: the largest error over :func:`assert_fp8_output`'s bound of the
    output scales and of the dequantized values (each at most 1 where it passes)."""
    n = ref.shape[1]
    acc = slack * _rms(ref)
    nb = math.ceil(n / 128)
    padded = torch.nn.functional.pad(ref.abs(), (0, nb * 128 - n))
    expected_scale = padded.view(ref.shape[0], nb, 128).amax(-1).clamp_min(1e-12) / 448
    scale_err = (output_scale.double() - expected_scale).abs()
    # The scale is computed from the float32 accumulator: its error is the accumulation error.
    acc_bound = ACC_TOL * torch.nn.functional.pad(ref_abs, (0, nb * 128 - n)).view(-1, nb, 128).amax(-1) / 448
    scale_bound = acc_bound + acc / 448 + 2.0**-23 * expected_scale
    per_element = output_scale.double().repeat_interleave(128, 1)[:, :n]
    deq = out.double() * per_element
    bound = 2.0**-3 * ref.abs() + 2.0**-9 * per_element + 2 * ACC_TOL * ref_abs + 2 * acc
    return _ratio(scale_err, scale_bound), _ratio((deq - ref).abs(), bound)


def assert_fp8_output(out, output_scale, ref, ref_abs, slack=0.0):
    """An E4M3 output with one float32 scale per 128 columns: the scale is the block's amax / 448
    (within the accumulation error), each element within one E4M3 ulp (``slack``: as above)."""
    scale, values = fp8_output_ratios(out, output_scale, ref, ref_abs, slack)
    assert scale <= 1.0, "output_scale out of tolerance"
    assert values <= 1.0, "FP8 output out of tolerance"


def _quantization_error(x, block_rows):
    """Per-element bound on ``|dequant(quant(x)) - x|`` (float64), or zeros for FP8 operands."""
    if x.dtype != torch.bfloat16:
        return torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    _, _, amax = quantize_oracle(x, block_rows)
    step = (amax / E4M3_MAX).repeat_interleave(block_rows, 0)[: x.shape[0]].repeat_interleave(128, 1)
    return E4M3_REL * x.double().abs() + E4M3_SUBNORMAL_HALF_STEP * step * (1 + 2.0**-20)


def quantization_error_bound(input, weight, input_scale, weight_scale, out_dtype):
    """``(ref, bound)``: the float64 product of the operands as given, and the stated error bound.

    With ``da`` / ``db`` the quantization errors above (zero for an FP8 operand, which is used as
    given with its scales):
    ``|out - ref| <= |da| |b|^T + |a| |db|^T + |da| |db|^T + 2**-16 (|a| + |da|)(|b| + |db|)^T``
    plus one output rounding. So W8A8 is exact up to accumulation and rounding, BF16 + FP8 adds
    about ``2**-4 sum |a||b|`` (the activation's 3-bit mantissa), BF16 + BF16 twice that.
    """
    a = input.double() if input.dtype == torch.bfloat16 else dequant(input, input_scale, 1)
    if weight.dtype == torch.bfloat16:
        b = weight.double()
    else:
        b = dequant(weight, weight_scale, 1 if weight_scale.shape[0] == weight.shape[0] else 128)
    da, db = _quantization_error(input, 1), _quantization_error(weight, 128)
    ref = a @ b.t()
    bound = da @ b.abs().t() + a.abs() @ db.t() + da @ db.t()
    bound += ACC_TOL * (a.abs() + da) @ (b.abs() + db).t()
    return ref, bound + RTOL[out_dtype] * (ref.abs() + bound)


# ============================================================================ RoPE


def saturate(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round-to-nearest FP8 with saturation to the finite maximum."""
    fmax = torch.finfo(dtype).max
    return x.clamp(-fmax, fmax).to(dtype)


def rotate(x, cache, pos_ids, is_neox):
    """``x [nnz, ..., rope_dim]`` rotated by the cache rows at ``pos_ids``, in float64; NaN for
    the tokens whose position is outside the cache (the contract: their rope outputs are NaN)."""
    valid = (pos_ids >= 0) & (pos_ids < cache.shape[0])
    rows = cache.double()[pos_ids.long().clamp(0, cache.shape[0] - 1)]
    rows[~valid] = float("nan")
    half = cache.shape[1] // 2
    cos, sin = rows[:, :half], rows[:, half:]
    x = x.double()
    c = cos.view(-1, *([1] * (x.dim() - 2)), half)
    s = sin.view(-1, *([1] * (x.dim() - 2)), half)
    y = torch.empty_like(x)
    if is_neox:
        y[..., :half] = x[..., :half] * c - x[..., half:] * s
        y[..., half:] = x[..., half:] * c + x[..., :half] * s
    else:
        y[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
        y[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
    return y


def rope_oracle(q_rope, k_rope, q_nope, k_nope, cache, pos_ids, is_neox, scale_q, scale_kv, dtype):
    """The four FP8 outputs of ``rope_quantize_fp8`` computed in float64 (nope may be None;
    rope outputs NaN for positions outside the cache)."""

    def nope(x, scale, like):
        if x is None:
            return torch.empty(*like.shape[:-1], 0, dtype=dtype)
        return saturate(x.double() * scale, dtype)

    return (
        saturate(rotate(q_rope, cache, pos_ids, is_neox) * scale_q, dtype),
        saturate(rotate(k_rope, cache, pos_ids, is_neox) * scale_kv, dtype),
        nope(q_nope, scale_q, q_rope),
        nope(k_nope, scale_kv, k_rope),
    )


def assert_fp8_close(
    actual: torch.Tensor, expected: torch.Tensor, name: str = "output", tensor_cores=False
) -> None:
    """Every element within one FP8 rounding step (the float32 vs float64 rounding boundary), and
    nearly all bit-exact. ``tensor_cores`` (a GPU kernel, whose products and cos/sin tables round
    differently): within one step of the saturated value, no bit-exactness count."""
    assert actual.dtype == expected.dtype, (name, actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    if actual.numel() == 0:
        return
    a, e = actual.float(), expected.float()
    assert torch.equal(a.isnan(), e.isnan()), f"{name}: NaN positions differ"
    a, e = a.nan_to_num(), e.nan_to_num()
    mantissa_bits = 3 if actual.dtype == E4M3 else 2
    tiny = torch.finfo(actual.dtype).smallest_normal * 2.0**-mantissa_bits
    step = e.abs() * 2.0**-mantissa_bits + tiny
    bad = (a - e).abs() > step
    assert not bad.any(), f"{name}: {int(bad.sum())} of {a.numel()} elements off by more than one FP8 step"
    if tensor_cores:
        return
    # Nearly all elements must be bit-exact; a one-step difference needs a rounding tie.
    assert (a != e).float().mean() <= 0.01, f"{name}: too many one-step differences"


# ============================================================================ MLA decode


def decode_oracle(query, kv_rows, candidates, bmm1, bmm2, sinks, kv_lora_rank):
    """Attention of each query token over its own candidate rows, in float64.

    ``candidates[b][t]`` is the list of key rows (ints) token t of request b attends. Returns
    ``out [B, q_len, H, kv_lora_rank]`` and the base-2 ``lse [B, q_len, H]`` (+inf when empty).
    """
    batch, q_len, heads, _ = query.shape
    out = torch.zeros(batch, q_len, heads, kv_lora_rank, dtype=torch.float64)
    lse = torch.full((batch, q_len, heads), math.inf, dtype=torch.float64)
    q = query.double()
    kv = kv_rows.double()
    for b in range(batch):
        for t in range(q_len):
            rows = candidates[b][t]
            if not rows:
                continue
            keys = kv[torch.tensor(rows)]
            scores = (q[b, t] @ keys.T) * bmm1  # [H, n]
            lse_nat = torch.logsumexp(scores, dim=-1)
            probs = torch.softmax(scores, dim=-1)
            value = probs @ keys[:, :kv_lora_rank]
            if sinks is not None:
                value = value * torch.sigmoid(lse_nat - sinks.double())[:, None]
            out[b, t] = value * bmm2
            lse[b, t] = lse_nat * LOG2E
    return out, lse


def sparse_candidates(indices, seq_lens, num_slots):
    """FlashInfer's sparse rule: the first ``min(topk, seq_len - (q_len-1-t))`` positions, valid ones."""
    batch, q_len, topk = indices.shape
    result = []
    for b in range(batch):
        per_token = []
        for t in range(q_len):
            n = min(topk, int(seq_lens[b]) - (q_len - 1 - t))
            row = [int(i) for i in indices[b, t, : max(n, 0)]]
            per_token.append([i for i in row if 0 <= i < num_slots])
        result.append(per_token)
    return result


def dense_candidates(block_tables, seq_lens, q_len, page_size, num_pages):
    """Dense rule: positions ``0 .. L-1``, ``L = seq_len - (q_len-1-t)``, through the page table."""
    result = []
    for b in range(block_tables.shape[0]):
        per_token = []
        for t in range(q_len):
            length = int(seq_lens[b]) - (q_len - 1 - t)
            rows = []
            for pos in range(max(length, 0)):
                page = int(block_tables[b, pos // page_size])
                if 0 <= page < num_pages:
                    rows.append(page * page_size + pos % page_size)
            per_token.append(rows)
        result.append(per_token)
    return result


def decode_oracle_rows(query, rows_of, seq_lens, width, d_v, bmm1, bmm2, sinks):
    """The kernel suites' form of :func:`decode_oracle`, on ``query``'s device: ``rows_of(b, t, n)``
    gives the key rows token ``t`` of request ``b`` attends among its first ``n`` candidates,
    ``n = min(width, seq_len - (q_len - 1 - t))``; float64 ``(out, lse2)``, lse +inf if empty."""
    batch, q_len, heads, _ = query.shape
    out = torch.zeros(batch, q_len, heads, d_v, dtype=torch.float64, device=query.device)
    lse = torch.full((batch, q_len, heads), math.inf, dtype=torch.float64, device=query.device)
    for b in range(batch):
        for t in range(q_len):
            n = max(0, min(width, int(seq_lens[b]) - (q_len - 1 - t)))
            keys = rows_of(b, t, n).double()
            if keys.shape[0] == 0:
                continue
            s = bmm1 * query[b, t].double() @ keys.T  # [H, n]
            total = torch.logsumexp(s, -1)
            denom = total.exp() if sinks is None else total.exp() + sinks.double().exp()
            out[b, t] = bmm2 * (s.exp() @ keys[:, :d_v]) / denom[:, None]
            lse[b, t] = total / math.log(2.0)
    return out, lse


def sparse_decode_oracle(query, kv_rows, indices, seq_lens, bmm1, bmm2, sinks=None, kv_lora_rank=512):
    """:func:`decode_oracle` over FlashInfer's sparse candidates (:func:`sparse_candidates`)."""
    candidates = sparse_candidates(indices, seq_lens, kv_rows.shape[0])
    return decode_oracle(query, kv_rows, candidates, bmm1, bmm2, sinks, kv_lora_rank)


def assert_decode_close(out, lse, expected_out, expected_lse, dtype_note="", tensor_cores=False):
    """BF16 output: rtol 1e-2 / atol 2e-3 (one bf16 rounding + float32 sums); LSE: 1e-4.

    ``tensor_cores`` (a GPU kernel: bf16 probabilities into the PV product, FP8 Q K^T chains
    accumulated at the tensor core's precision): every element written, within 2e-2 of the
    largest output; the LSE within 3e-4 relative, +inf exactly where nothing was attended."""
    if tensor_cores:
        assert not out.isnan().any(), f"out {dtype_note}: an element was not written"
        scale = max(expected_out.abs().max().item(), 1e-3) if expected_out.numel() else 1.0
        assert (out.double() - expected_out).abs().max().item() <= 2e-2 * scale if out.numel() else True
        if lse is not None and lse.numel():
            finite = ~expected_lse.isinf()
            assert torch.equal(lse.isinf(), ~finite), f"lse {dtype_note}: +inf rows differ"
            if finite.any():
                err = (lse.double()[finite] - expected_lse[finite]).abs().max().item()
                assert err <= 3e-4 * max(1.0, expected_lse[finite].abs().max().item()), (
                    f"lse {dtype_note}: {err}"
                )
        return
    torch.testing.assert_close(
        out.double(), expected_out, rtol=1e-2, atol=2e-3, msg=lambda m: f"out {dtype_note}: {m}"
    )
    if lse is not None:
        torch.testing.assert_close(
            lse.double(), expected_lse, rtol=1e-5, atol=1e-4, msg=lambda m: f"lse {dtype_note}: {m}"
        )


# ============================================================================ the packed 656-byte cache

PACKED_ROW_BYTES = 656


def packed_pool(slots: int, pow2: bool = True):
    """``(rows [slots, 656] uint8, keys [slots, 576] float64)`` of random codes, scales and RoPE."""
    codes = torch.randn(slots, 512).mul(60).clamp(-448, 448).to(E4M3)
    if pow2:  # DeepSeek-V3.2's power-of-two scales (kv_scale_format "pow2_fp32")
        scales = torch.pow(2.0, torch.randint(-10, -5, (slots, 4)).float())
    else:  # GLM's arbitrary scales ("arbitrary_fp32")
        scales = torch.rand(slots, 4) * 0.01 + 1e-3
    rope = (torch.randn(slots, 64) * 0.5).bfloat16()
    return pack(codes, scales, rope), keys_of(codes, scales, rope)


def pack(codes, scales, rope) -> torch.Tensor:
    """The 656-byte rows: 512 e4m3 codes, 4 float32 scales, 64 bf16 values."""
    parts = (
        codes.view(torch.uint8),
        scales.float().contiguous().view(torch.uint8),
        rope.contiguous().view(torch.uint8),
    )
    return torch.cat(parts, dim=-1)


def keys_of(codes, scales, rope) -> torch.Tensor:
    """The float64 K rows the packed rows stand for."""
    return torch.cat((codes.double() * scales.double().repeat_interleave(128, -1), rope.double()), -1)


def packed_oracle(query, keys, indices, lengths, bmm1, sinks):
    """float64 ``out [B, q_len, H, 512]`` and base-2 ``lse [B, q_len, H]`` (sinks included)."""
    batch, q_len, heads, _ = query.shape
    topk = indices.shape[-1]
    out = torch.zeros(batch, q_len, heads, 512, dtype=torch.float64)
    lse = torch.empty(batch, q_len, heads, dtype=torch.float64)
    sink_mass = torch.zeros(heads, dtype=torch.float64) if sinks is None else sinks.double().exp()
    for b in range(batch):
        for t in range(q_len):
            n = topk if lengths is None else max(0, min(topk, int(lengths.reshape(-1)[b * q_len + t])))
            ids = [i for i in indices[b, t, :n].tolist() if 0 <= i < keys.shape[0]]
            total = sink_mass.clone()
            if ids:
                k = keys[ids]
                weights = (bmm1 * query[b, t].double() @ k.T).exp()  # [H, n]
                total += weights.sum(-1)
                out[b, t] = weights @ k[:, :512] / total[:, None]
            lse[b, t] = total.log() * LOG2E
    return out, lse
