"""The op table for flashinfer.gemm (PyTorch's OpInfo idea), with float64 oracles.

Each :class:`OpCase` has: the public function, sample inputs (small, degenerate and
real-model-like; fresh random data, never zeros), error inputs with the expected exception and
a message pattern naming the argument, and the backend names to try. The oracles are written
here, independently of the package, in float64 and in a different formulation from the
reference implementation (explicit per-K-block sums, per-row group lookups).

Quantized inputs are exactly representable: FP8 operands are random values already cast to
FP8 and scales are powers of two, so the only differences from the oracle are the float32
accumulation and one rounding to the output dtype. Tolerance (checked on every element,
stated here once): ``|out - ref| <= rtol(out dtype) * |ref| + 2**-16 * ref_abs`` where
``rtol`` is half an ulp (bf16 2**-8, fp16 2**-11, fp32 2**-23) and ``ref_abs`` is the same
product over absolute values (a bound on float32 accumulation error); fp16 adds 2**-24 for
subnormals. FP8 E4M3 outputs allow one E4M3 ulp (2**-3 relative) plus the subnormal step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial

import torch

import flashinfer.gemm as G
from flashinfer.utils import BackendSupportedError

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
RTOL = {BF16: 2.0**-8, FP16: 2.0**-11, FP32: 2.0**-23}
ACC_TOL = 2.0**-16


# ----------------------------------------------------------------------------- data


def fp8(*shape, dtype=E4M3):
    """Random values that are exactly FP8 (never all zero)."""
    return (torch.randn(*shape) * 3).to(dtype)


def pow2(*shape):
    """Random power-of-two scales in [1/8, 8]."""
    return 2.0 ** torch.randint(-3, 4, shape).float()


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


def strided_out(*shape, dtype):
    """A NaN-poisoned output whose last dimension has stride 2 (a view into a larger buffer)."""
    base = torch.full((*shape[:-1], 2 * shape[-1]), float("nan"), dtype=dtype)
    return base[..., ::2]


def col_major(x):
    """``x (b, k, n)`` as the transpose view of a contiguous ``(b, n, k)`` tensor."""
    return x.transpose(-2, -1).contiguous().transpose(-2, -1)


# ----------------------------------------------------------------------------- oracles


def oracle_bmm(A, B, sa=None, sb=None):
    """float64 ``(A @ B) * sa * sb`` via an explicit einsum; also the absolute-value product."""
    a, b = A.double(), B.double()
    ref = torch.einsum("bmk,bkn->bmn", a, b)
    ref_abs = torch.einsum("bmk,bkn->bmn", a.abs(), b.abs())
    if sa is not None:
        scale = sa.double() * sb.double()
        ref, ref_abs = ref * scale, ref_abs * scale.abs()
    return ref, ref_abs


def oracle_groupwise(a, b, sa, sb, gm, gn, gk):
    """``sum_kb sa[i//gm, kb] * sb[j//gn, kb] * sum_{k in kb} a[i,k] b[j,k]`` in float64.

    ``sa`` is ``(ceil(m/gm), kb)`` and ``sb`` ``(ceil(n/gn), kb)`` in logical K-major order.
    """
    m, k = a.shape
    n = b.shape[0]
    rows = torch.arange(m) // gm
    cols = torch.arange(n) // gn
    ref = torch.zeros(m, n, dtype=torch.float64)
    ref_abs = torch.zeros(m, n, dtype=torch.float64)
    for kb in range(math.ceil(k / gk)):
        part = slice(kb * gk, min(k, (kb + 1) * gk))
        scale = sa.double()[rows, kb][:, None] * sb.double()[cols, kb][None, :]
        ref += scale * (a[:, part].double() @ b[:, part].double().t())
        ref_abs += scale.abs() * (a[:, part].double().abs() @ b[:, part].double().abs().t())
    return ref, ref_abs


def oracle_contiguous(a, b, sa, sb, ids):
    """Per row ``r``: the groupwise oracle of row r against group ``ids[r]``; rows with invalid ids: NaN."""
    m, n, groups = a.shape[0], b.shape[1], b.shape[0]
    ref = torch.full((m, n), float("nan"), dtype=torch.float64)
    ref_abs = torch.zeros(m, n, dtype=torch.float64)
    for g in range(groups):
        rows = (ids == g).nonzero().flatten()
        if len(rows):
            r, ra = oracle_groupwise(a[rows], b[g], sa[rows], sb[g], 1, 128, 128)
            ref[rows], ref_abs[rows] = r, ra
    return ref, ref_abs


def oracle_masked(a, b, sa, sb, masked_m):
    groups, m, _ = a.shape
    n = b.shape[1]
    ref = torch.full((groups, m, n), float("nan"), dtype=torch.float64)
    ref_abs = torch.zeros(groups, m, n, dtype=torch.float64)
    for g in range(groups):
        rows = min(max(int(masked_m[g]), 0), m)
        if rows:
            r, ra = oracle_groupwise(a[g, :rows], b[g], sa[g, :rows], sb[g], 1, 128, 128)
            ref[g, :rows], ref_abs[g, :rows] = r, ra
    return ref, ref_abs


def assert_matches(out, ref, ref_abs, valid=None):
    """Every element of ``out`` (where ``valid``) within the stated bound; the rest untouched (NaN)."""
    dtype = out.dtype
    got = out.double()
    if valid is None:
        valid = torch.ones(ref.shape, dtype=torch.bool)
    if dtype == E4M3:
        raise AssertionError("use assert_fp8_output for FP8 outputs")
    bound = RTOL[dtype] * ref.abs() + ACC_TOL * ref_abs + (2.0**-24 if dtype == FP16 else 0.0)
    err = (got - ref).abs()
    bad = valid & ~(err <= bound)
    assert not bad.any(), (
        f"{int(bad.sum())} of {int(valid.sum())} elements out of tolerance; first at "
        f"{bad.nonzero()[0].tolist()}: got {got[bad][0].item()}, expected {ref[bad][0].item()}"
    )
    untouched = ~valid
    assert got[untouched].isnan().all(), "rows that must be left untouched were written"


def assert_fp8_output(out, output_scale, ref, ref_abs):
    n = ref.shape[1]
    nb = math.ceil(n / 128)
    padded = torch.nn.functional.pad(ref.abs(), (0, nb * 128 - n))
    expected_scale = padded.view(ref.shape[0], nb, 128).amax(-1).clamp_min(1e-12) / 448
    scale_err = (output_scale.double() - expected_scale).abs()
    # The scale is computed from the float32 accumulator: its error is the accumulation error.
    acc_bound = ACC_TOL * torch.nn.functional.pad(ref_abs, (0, nb * 128 - n)).view(-1, nb, 128).amax(-1) / 448
    assert (scale_err <= acc_bound + 2.0**-23 * expected_scale).all(), "output_scale out of tolerance"
    per_element = output_scale.double().repeat_interleave(128, 1)[:, :n]
    deq = out.double() * per_element
    bound = 2.0**-3 * ref.abs() + 2.0**-9 * per_element + 2 * ACC_TOL * ref_abs
    assert ((deq - ref).abs() <= bound).all(), "FP8 output out of tolerance"


# ----------------------------------------------------------------------------- the table


@dataclass
class Sample:
    """One call: positional args and kwargs for the public function, and how to check the result."""

    name: str
    args: tuple
    kwargs: dict
    expected: Callable  # () -> (ref, ref_abs), the float64 oracle, computed on first use
    valid: torch.Tensor | None = None
    output_scale: torch.Tensor | None = None

    @cached_property
    def _oracle(self):
        return self.expected()

    @property
    def ref(self):
        return self._oracle[0]

    @property
    def ref_abs(self):
        return self._oracle[1]

    @property
    def out(self):
        return self.kwargs.get("out")


@dataclass
class ErrorInput:
    name: str
    args: tuple
    kwargs: dict
    exc: type
    match: str


@dataclass
class OpCase:
    name: str
    fn: Callable
    samples: Callable[[], list]
    errors: Callable[[], list]
    backends: tuple = ()
    base_kwargs: dict = field(default_factory=dict)


def bmm_bf16_samples():
    out = []
    for b, m, n, k, dtype, out_dtype, layout in [
        (1, 1, 16, 32, BF16, BF16, "col"),
        (2, 3, 5, 64, BF16, FP16, "row"),
        (3, 130, 40, 96, FP16, FP32, "col"),
        (1, 4, 8, 4096, BF16, FP32, "col"),
        (2, 48, 80, 256, FP16, FP16, "row"),
    ]:
        A = torch.randn(b, m, k).to(dtype)
        B = torch.randn(b, k, n).to(dtype)
        B = col_major(B) if layout == "col" else B.contiguous()
        expected = partial(oracle_bmm, A, B)
        o = poisoned(b, m, n, dtype=out_dtype)
        out.append(
            Sample(
                f"{dtype}-{out_dtype}-{layout}-{b}x{m}x{n}x{k}",
                (A, B),
                {"out": o, "out_dtype": out_dtype},
                expected,
            )
        )
    A = torch.randn(2, 5, 64).to(BF16)
    B = col_major(torch.randn(2, 64, 12).to(BF16))
    expected = partial(oracle_bmm, A, B)
    out.append(Sample("strided-out", (A, B), {"out": strided_out(2, 5, 12, dtype=BF16)}, expected))
    At = torch.randn(2, 64, 5).to(BF16).transpose(1, 2)  # A with a strided last dimension
    expected = partial(oracle_bmm, At, B)
    out.append(Sample("strided-A", (At, B), {"out": poisoned(2, 5, 12, dtype=BF16)}, expected))
    return out


def bmm_fp8_samples():
    out = []
    cases = [
        (1, 1, 16, 32, E4M3, E4M3, BF16, "col", "0d", "0d"),
        (2, 3, 5, 64, E4M3, E5M2, FP16, "row", "1", "1"),
        (3, 130, 40, 96, E5M2, E4M3, BF16, "col", "0d", "1"),
        (1, 4, 8, 4096, E4M3, E4M3, FP16, "col", "1", "0d"),
        (2, 7, 9, 64, E5M2, E5M2, BF16, "col", "0d", "0d"),
        (2, 6, 10, 64, E4M3, E4M3, BF16, "col", "chan_col", "chan_row"),
        (2, 6, 10, 64, E4M3, E4M3, FP16, "row", "chan_row", "chan_col"),
        (2, 6, 10, 64, E4M3, E4M3, BF16, "col", "0d", "chan_row"),
        (2, 6, 10, 64, E4M3, E4M3, BF16, "row", "chan_col", "1"),
    ]
    for b, m, n, k, da, db, out_dtype, layout, a_kind, b_kind in cases:
        A = fp8(b, m, k, dtype=da)
        B = fp8(b, k, n, dtype=db)
        B = col_major(B) if layout == "col" else B.contiguous()
        sa, sa_ref = _scale(a_kind, b, m, rows_last=False)
        sb, sb_ref = _scale(b_kind, b, n, rows_last=True)
        expected = partial(oracle_bmm, A, B, sa_ref, sb_ref)
        o = poisoned(b, m, n, dtype=out_dtype)
        name = f"{da}x{db}-{out_dtype}-{layout}-{a_kind}-{b_kind}-{b}x{m}x{n}x{k}"
        out.append(Sample(name, (A, B, sa, sb, out_dtype), {"out": o}, expected))
    A, B = fp8(2, 5, 64), col_major(fp8(2, 64, 12))
    s = pow2(1)
    expected = partial(oracle_bmm, A, B, s, s)
    out.append(
        Sample("strided-out", (A, B, s, s, BF16), {"out": strided_out(2, 5, 12, dtype=BF16)}, expected)
    )
    return out


def _scale(kind, batch, rows, rows_last):
    """A scale of the given kind and its broadcastable float64 counterpart for the oracle."""
    if kind == "0d":
        s = pow2(1).reshape(())
        return s, s
    if kind == "1":
        s = pow2(1)
        return s, s.reshape(())
    values = pow2(batch, rows)
    ref = values[:, None, :] if rows_last else values[:, :, None]
    stored = values[:, :, None] if kind == "chan_col" else values[:, None, :]  # (b, rows, 1) or (b, 1, rows)
    return stored, ref


GRANULARITY = {"row": (1, 128, 128), "block": (128, 128, 128)}


def groupwise_samples():
    out = []
    for m, n, k, mode, gran, backend, out_dtype, out_kind in [
        (1, 128, 256, "K", "row", "cutlass", BF16, "poison"),
        (4, 256, 256, "MN", "row", "cutlass", FP16, "poison"),
        (130, 200, 384, "K", "block", "cutlass", BF16, "strided"),
        (33, 128, 2048, "MN", "block", "auto", BF16, "poison"),
        (16, 256, 256, None, "row", "cutile", BF16, "poison"),
        (20, 130, 256, "K", "row", "mudnn", FP16, "poison"),
        (128, 128, 128, "K", "row", "cutlass", BF16, "poison"),
    ]:
        gm, gn, gk = GRANULARITY[gran]
        a, b = fp8(m, k), fp8(n, k)
        sa = pow2(math.ceil(m / gm), math.ceil(k / gk))
        sb = pow2(math.ceil(n / gn), math.ceil(k / gk))
        expected = partial(oracle_groupwise, a, b, sa, sb, gm, gn, gk)
        stored_a, stored_b = (sa, sb) if mode in ("K", None) else (sa.t().contiguous(), sb.t().contiguous())
        o = poisoned(m, n, dtype=out_dtype) if out_kind == "poison" else strided_out(m, n, dtype=out_dtype)
        kwargs = {"scale_granularity_mnk": (gm, gn, gk), "out": o, "backend": backend}
        name = f"{backend}-{mode}-{gran}-{out_dtype}-{out_kind}-{m}x{n}x{k}"
        out.append(Sample(name, (a, b, stored_a, stored_b, mode), kwargs, expected))
    for m, n, k, a_form in [
        (3, 256, 256, "contiguous"),
        (17, 128, 512, "column-major"),
        (4, 128, 512, "square"),
    ]:
        a, b = fp8(m, k), fp8(n, k)
        kb = k // 128
        sa, sb = pow2(m, kb), pow2(n // 128, kb)
        expected = partial(oracle_groupwise, a, b, sa, sb, 1, 128, 128)
        stored_a = sa.t().contiguous()  # MN-major memory: (kb, m) contiguous
        if a_form == "column-major":
            stored_a = stored_a.t()  # the (m, kb) view with strides (1, m), as sglang sends it
        kwargs = {"out": poisoned(m, n, dtype=BF16), "backend": "trtllm"}
        out.append(Sample(f"trtllm-{a_form}-{m}x{n}x{k}", (a, b, stored_a, sb, "MN"), kwargs, expected))
    for backend in ("mubin", "auto", "cutlass"):
        m, n, k = 5, 200, 256
        a, b = fp8(m, k), fp8(n, k)
        sa, sb = pow2(m, 2), pow2(2, 2)
        expected = partial(oracle_groupwise, a, b, sa, sb, 1, 128, 128)
        scale = torch.full((m, 2), float("nan"))
        kwargs = {"backend": backend, "output_scale": scale}
        out.append(Sample(f"fp8-output-{backend}", (a, b, sa, sb, "K"), kwargs, expected, output_scale=scale))
    return out


def contiguous_samples():
    out = []
    for groups, n, k, layout in [(3, 128, 256, "aligned"), (2, 200, 384, "padded"), (1, 128, 128, "single")]:
        if layout == "aligned":
            ids = torch.arange(groups, dtype=torch.int32).repeat_interleave(128)
        elif layout == "padded":
            ids = torch.tensor([0] * 100 + [-1] * 28 + [1] * 128 + [-1] * 100 + [9] * 28, dtype=torch.int32)
        else:
            ids = torch.zeros(130, dtype=torch.int32)
            ids[128:] = -1
        m = ids.numel()
        kb = math.ceil(k / 128)
        a, b = fp8(m, k), fp8(groups, n, k)
        sa, sb = pow2(m, kb), pow2(groups, math.ceil(n / 128), kb)
        expected = partial(oracle_contiguous, a, b, sa, sb, ids)
        valid = ((ids >= 0) & (ids < groups))[:, None].expand(m, n)
        stored_a = sa if layout != "padded" else sa.t().contiguous().t()  # MN-major storage
        kwargs = {"out": poisoned(m, n, dtype=BF16), "out_dtype": BF16}
        out.append(
            Sample(f"{layout}-G{groups}-{m}x{n}x{k}", (a, b, stored_a, sb, ids), kwargs, expected, valid)
        )
    return out


def masked_samples():
    out = []
    for groups, m, n, k, masked in [
        (2, 70, 128, 256, [0, 33]),
        (3, 130, 200, 384, [130, 1, 500]),
        (1, 8, 128, 128, [8]),
    ]:
        kb = math.ceil(k / 128)
        a, b = fp8(groups, m, k), fp8(groups, n, k)
        sa, sb = pow2(groups, m, kb), pow2(groups, math.ceil(n / 128), kb)
        masked_m = torch.tensor(masked, dtype=torch.int32)
        expected = partial(oracle_masked, a, b, sa, sb, masked_m)
        valid = (torch.arange(m)[None, :] < masked_m[:, None])[..., None].expand(groups, m, n)
        stored_a = sa if groups != 3 else sa.transpose(1, 2).contiguous().transpose(1, 2)
        expected_m = max(1, min(int(masked_m.float().mean()) + 1, m))
        kwargs = {"out": poisoned(groups, m, n, dtype=BF16)}
        name = f"G{groups}-{m}x{n}x{k}-{masked}"
        out.append(Sample(name, (a, b, stored_a, sb, masked_m, expected_m), kwargs, expected, valid))
    return out


def _replace(args, index, value):
    args = list(args)
    args[index] = value
    return tuple(args)


def bmm_bf16_errors():
    A, B = torch.randn(2, 3, 64).to(BF16), col_major(torch.randn(2, 64, 5).to(BF16))
    base = (A, B)
    return [
        ErrorInput("A fp32", (A.float(), B), {}, ValueError, "`A`.*first tensor"),
        ErrorInput("B other dtype", (A, B.half()), {}, ValueError, "`B`.*second tensor"),
        ErrorInput("A not a tensor", ([1.0], B), {}, TypeError, "`A`"),
        ErrorInput("A 2-D", (A[0], B), {}, ValueError, "`A`.*3-D"),
        ErrorInput("k mismatch", (A, B[:, :32]), {}, ValueError, "`B`.*k"),
        ErrorInput("batch mismatch", (A, B[:1]), {}, ValueError, "`B`.*batch"),
        ErrorInput("B on another device", (A, B.to("meta")), {}, ValueError, "`B`.*device"),
        ErrorInput(
            "out_dtype int8",
            base,
            {"out_dtype": torch.int8},
            ValueError,
            "`out_dtype`.*nsupported output dtype",
        ),
        ErrorInput("tgv fp16", base, {"out_dtype": FP16, "backend": "tgv"}, ValueError, "`out_dtype`.*TGV"),
        ErrorInput("out shape", base, {"out": torch.empty(2, 3, 6, dtype=BF16)}, ValueError, "`out`.*shape"),
        ErrorInput("out dtype", base, {"out": torch.empty(2, 3, 5, dtype=FP16)}, ValueError, "`out`.*dtype"),
        ErrorInput(
            "out device",
            base,
            {"out": torch.empty(2, 3, 5, dtype=BF16, device="meta")},
            ValueError,
            "`out`.*device",
        ),
        ErrorInput("unknown backend", base, {"backend": "cublas"}, ValueError, "`backend`.*cudnn"),
    ]


def bmm_fp8_errors():
    A, B = fp8(2, 3, 64), col_major(fp8(2, 64, 5))
    s = pow2(1)
    base = (A, B, s, s, BF16)
    return [
        ErrorInput("A bf16", _replace(base, 0, A.to(BF16)), {}, ValueError, "`A`.*FP8"),
        ErrorInput("B fp16", _replace(base, 1, B.to(FP16)), {}, ValueError, "`B`.*FP8"),
        ErrorInput("dtype fp32", _replace(base, 4, FP32), {}, ValueError, "`dtype`.*nsupported output dtype"),
        ErrorInput(
            "cutlass e5m2",
            _replace(base, 0, A.to(E5M2)),
            {"backend": "cutlass"},
            ValueError,
            "e5m2 is not supported for bmm_fp8 with cutlass",
        ),
        ErrorInput("A_scale fp16", _replace(base, 2, s.half()), {}, ValueError, "`A_scale`.*float32"),
        ErrorInput("A_scale shape", _replace(base, 2, pow2(2)), {}, ValueError, "`A_scale`.*shape"),
        ErrorInput("B_scale shape", _replace(base, 3, pow2(2, 5, 2)), {}, ValueError, "`B_scale`.*shape"),
        ErrorInput("A_scale not a tensor", _replace(base, 2, 1.0), {}, TypeError, "`A_scale`"),
        ErrorInput("scale device", _replace(base, 3, s.to("meta")), {}, ValueError, "`B_scale`.*device"),
        ErrorInput("k mismatch", _replace(base, 1, B[:, :32]), {}, ValueError, "`B`"),
        ErrorInput("out shape", base, {"out": torch.empty(2, 5, 3, dtype=BF16)}, ValueError, "`out`.*shape"),
        ErrorInput("out dtype", base, {"out": torch.empty(2, 3, 5, dtype=FP16)}, ValueError, "`out`.*dtype"),
        ErrorInput("unknown backend", base, {"backend": "tgv"}, ValueError, "`backend`.*cublas"),
    ]


def groupwise_errors():
    m, n, k = 4, 256, 256
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(m, 2), pow2(2, 2)
    base = (a, b, sa, sb, "K")
    return [
        ErrorInput("a 3-D", _replace(base, 0, a[None]), {}, ValueError, "`a`.*hape mismatch"),
        ErrorInput("k mismatch", _replace(base, 1, b[:, :128]), {}, ValueError, r"`b`.*a\.shape\[1\]"),
        ErrorInput("a bf16", _replace(base, 0, a.to(BF16)), {}, ValueError, "`a`.*float8_e4m3fn"),
        ErrorInput("b e5m2", _replace(base, 1, b.to(E5M2)), {}, ValueError, "`b`.*float8_e4m3fn"),
        ErrorInput("a not K-major", _replace(base, 0, fp8(k, m).t()), {}, ValueError, "`a`.*K-major"),
        ErrorInput(
            "out_dtype fp32", base, {"out_dtype": FP32}, ValueError, "`out_dtype`.*nsupported output dtype"
        ),
        ErrorInput(
            "out fp8 without output_scale",
            base,
            {"out": torch.empty(m, n, dtype=E4M3)},
            ValueError,
            "`out`.*nsupported output dtype",
        ),
        ErrorInput(
            "cutlass without mode",
            _replace(base, 4, None),
            {},
            ValueError,
            "scale_major_mode is required in CUTLASS",
        ),
        ErrorInput("bad mode", _replace(base, 4, "X"), {}, ValueError, "`scale_major_mode`"),
        ErrorInput(
            "trtllm granularity",
            base,
            {"backend": "trtllm", "scale_granularity_mnk": (128, 128, 128)},
            ValueError,
            r"\(1, 128, 128\) in TRTLLM",
        ),
        ErrorInput(
            "trtllm small k",
            (a[:, :128], b[:, :128], sa[:, :1], sb[:, :1], None),
            {"backend": "trtllm"},
            ValueError,
            r"a\.shape\[1\] must be >= 256 in TRTLLM",
        ),
        ErrorInput(
            "cutile MN",
            _replace(base, 4, "MN"),
            {"backend": "cutile"},
            ValueError,
            "scale_major_mode='K' only",
        ),
        ErrorInput(
            "cutile granularity",
            base,
            {"backend": "cutile", "scale_granularity_mnk": (128, 128, 128)},
            ValueError,
            r"\(1, 128, 128\) only",
        ),
        ErrorInput(
            "granularity",
            base,
            {"scale_granularity_mnk": (1, 64, 128)},
            ValueError,
            "`scale_granularity_mnk`",
        ),
        ErrorInput(
            "mubin without output_scale", base, {"backend": "mubin"}, BackendSupportedError, "output_scale"
        ),
        ErrorInput(
            "output_scale with bf16",
            base,
            {"output_scale": torch.empty(m, 2), "out_dtype": BF16},
            ValueError,
            "`out_dtype`.*float8_e4m3fn",
        ),
        ErrorInput(
            "output_scale shape", base, {"output_scale": torch.empty(m, 1)}, ValueError, "`output_scale`"
        ),
        ErrorInput(
            "output_scale dtype",
            base,
            {"output_scale": torch.empty(m, 2, dtype=BF16)},
            ValueError,
            "`output_scale`.*float32",
        ),
        ErrorInput("a_scale shape", _replace(base, 2, pow2(2, m)), {}, ValueError, "`a_scale`.*shape"),
        ErrorInput("b_scale MN shape", _replace(base, 3, pow2(2, 3)), {}, ValueError, "`b_scale`.*shape"),
        ErrorInput(
            "trtllm a_scale shape",
            _replace(base, 2, pow2(3, 3)),
            {"backend": "trtllm"},
            ValueError,
            "`a_scale`.*MN-major",
        ),
        ErrorInput("a_scale fp16", _replace(base, 2, sa.half()), {}, ValueError, "`a_scale`.*float32"),
        ErrorInput("out shape", base, {"out": torch.empty(m, n + 1, dtype=BF16)}, ValueError, "`out`.*shape"),
        ErrorInput("b device", _replace(base, 1, b.to("meta")), {}, ValueError, "`b`.*device"),
        ErrorInput("unknown backend", base, {"backend": "cublas"}, ValueError, "`backend`.*trtllm"),
        ErrorInput("out not a tensor", base, {"out": [0.0]}, TypeError, "`out`"),
    ]


def contiguous_errors():
    groups, m, n, k = 2, 256, 128, 256
    a, b = fp8(m, k), fp8(groups, n, k)
    sa, sb = pow2(m, 2), pow2(groups, 1, 2)
    ids = torch.arange(groups, dtype=torch.int32).repeat_interleave(128)
    base = (a, b, sa, sb, ids)
    return [
        ErrorInput("a e5m2", _replace(base, 0, a.to(E5M2)), {}, ValueError, "`a`.*a must be float8_e4m3fn"),
        ErrorInput("b bf16", _replace(base, 1, b.to(BF16)), {}, ValueError, "`b`.*b must be float8_e4m3fn"),
        ErrorInput("m_indices int64", _replace(base, 4, ids.long()), {}, ValueError, "`m_indices`.*int32"),
        ErrorInput(
            "m_indices strided",
            _replace(base, 4, torch.stack([ids, ids], 1)[:, 0]),
            {},
            ValueError,
            "`m_indices`.*contiguous",
        ),
        ErrorInput("m_indices length", _replace(base, 4, ids[:128]), {}, ValueError, "hape mismatch"),
        ErrorInput(
            "a not K-major", _replace(base, 0, fp8(k, m).t()), {}, ValueError, "`a`.*major_a must be KMajor"
        ),
        ErrorInput(
            "out_dtype fp16", base, {"out_dtype": FP16}, ValueError, "`out_dtype`.*d must be bfloat16"
        ),
        ErrorInput(
            "out not N-major", base, {"out": torch.empty(n, m, dtype=BF16).t()}, ValueError, "`out`.*N-major"
        ),
        ErrorInput(
            "out shape", base, {"out": torch.empty(m, n + 1, dtype=BF16)}, ValueError, "`out`.*hape mismatch"
        ),
        ErrorInput("a_scale shape", _replace(base, 2, pow2(2, m)), {}, AssertionError, "`a_scale`"),
        ErrorInput("b_scale shape", _replace(base, 3, pow2(groups, 2, 2)), {}, AssertionError, "`b_scale`"),
        ErrorInput(
            "granularity",
            base,
            {"scale_granularity_mnk": (128, 128, 128)},
            ValueError,
            "`scale_granularity_mnk`",
        ),
        ErrorInput("scale device", _replace(base, 3, sb.to("meta")), {}, ValueError, "`b_scale`.*device"),
        ErrorInput("out not a tensor", base, {"out": [0.0]}, TypeError, "`out`"),
    ]


def masked_errors():
    groups, m, n, k = 2, 64, 128, 256
    a, b = fp8(groups, m, k), fp8(groups, n, k)
    sa, sb = pow2(groups, m, 2), pow2(groups, 1, 2)
    masked = torch.tensor([3, 64], dtype=torch.int32)
    base = (a, b, sa, sb, masked, 16)
    return [
        ErrorInput("groups", _replace(base, 1, b[:1]), {}, ValueError, "num_groups mismatch"),
        ErrorInput("masked_m groups", _replace(base, 4, masked[:1]), {}, ValueError, "num_groups mismatch"),
        ErrorInput("k mismatch", _replace(base, 1, b[..., :128]), {}, ValueError, "m, n, k mismatch"),
        ErrorInput("expected_m 0", _replace(base, 5, 0), {}, ValueError, "`expected_m`.*greater than 0"),
        ErrorInput("masked_m int64", _replace(base, 4, masked.long()), {}, ValueError, "`masked_m`.*int32"),
        ErrorInput("a e5m2", _replace(base, 0, a.to(E5M2)), {}, ValueError, "a must be float8_e4m3fn"),
        ErrorInput(
            "b not K-major",
            _replace(base, 1, fp8(groups, k, n).transpose(1, 2)),
            {},
            ValueError,
            "major_b must be KMajor",
        ),
        ErrorInput(
            "out fp16",
            base,
            {"out": torch.empty(groups, m, n, dtype=FP16)},
            ValueError,
            "`out`.*d must be bfloat16",
        ),
        ErrorInput(
            "out shape",
            base,
            {"out": torch.empty(groups, m, n + 1, dtype=BF16)},
            ValueError,
            "`out`.*m, n, k mismatch",
        ),
        ErrorInput("a 2-D", _replace(base, 0, a[0]), {}, ValueError, "`a`.*3-D"),
        ErrorInput("a_scale shape", _replace(base, 2, pow2(groups, m, 1)), {}, AssertionError, "`a_scale`"),
        ErrorInput("b_scale shape", _replace(base, 3, pow2(groups, 2, 2)), {}, AssertionError, "`b_scale`"),
    ]


OPS = [
    OpCase(
        "bmm_bf16",
        G.bmm_bf16,
        bmm_bf16_samples,
        bmm_bf16_errors,
        ("cudnn", "cutlass", "cutile", "tgv", "auto", "mudnn"),
    ),
    OpCase(
        "bmm_fp8", G.bmm_fp8, bmm_fp8_samples, bmm_fp8_errors, ("cudnn", "cublas", "cutlass", "auto", "mudnn")
    ),
    OpCase(
        "gemm_fp8_nt_groupwise",
        G.gemm_fp8_nt_groupwise,
        groupwise_samples,
        groupwise_errors,
        ("cutlass", "trtllm", "cutile", "auto", "mudnn", "mubin"),
    ),
    OpCase(
        "group_deepgemm_fp8_nt_groupwise",
        G.group_deepgemm_fp8_nt_groupwise,
        contiguous_samples,
        contiguous_errors,
    ),
    OpCase(
        "batch_deepgemm_fp8_nt_groupwise", G.batch_deepgemm_fp8_nt_groupwise, masked_samples, masked_errors
    ),
]
OPS_BY_NAME = {op.name: op for op in OPS}


def check_sample(sample: Sample, result) -> None:
    if sample.output_scale is not None:
        assert result.dtype == E4M3
        assert_fp8_output(result, sample.output_scale, sample.ref, sample.ref_abs)
    else:
        assert_matches(result, sample.ref, sample.ref_abs, sample.valid)
