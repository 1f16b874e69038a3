"""The op table of flashinfer.gemm (schema: ``tests/optable.py``; oracles and tolerances:
``tests/oracles.py``).

Per public function: sample inputs (small, degenerate and real-model-like; fresh random data,
never zeros; FP8 operands and power-of-two scales, so the float64 oracle is exact), error
inputs with the expected exception and a message pattern naming the argument (the detailed
rules, then one spoiled argument of a valid call per row), and the backend names to try.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from optable import Entry, ErrorInput, OpInfo, Sample
from oracles import (
    BF16,
    E4M3,
    E5M2,
    FP16,
    FP32,
    assert_fp8_output,
    assert_matches,
    assert_matches_or_no_worse,
    blockscale_oracle,
    col_major,
    cublas_blockscaled,
    fp8,
    on_oracle_device,
    oracle_bmm,
    oracle_contiguous,
    oracle_groupwise,
    oracle_masked,
    oracle_segments,
    poisoned,
    pow2,
    quantization_error_bound,
    row_scales,
    strided_out,
)

import flashinfer.gemm as G
from flashinfer.utils import BackendSupportedError

# ----------------------------------------------------------------------------- the table


def _sample(name, args, kwargs, expected, valid=None, output_scale=None, yardstick=None) -> Sample:
    """A GEMM call: ``expected() -> (ref, ref_abs)``; ``valid`` marks the rows that are written
    (the others must keep their NaN); ``output_scale`` is the FP8 output's scale buffer;
    ``yardstick() -> out`` is cuBLASLt's result on the same inputs (:func:`compare`)."""
    outputs = ("out",) if isinstance(kwargs.get("out"), torch.Tensor) else ()  # output_scale: NaN-filled
    return Sample(name, args, kwargs, expected, outputs, {"valid": valid, "yardstick": yardstick})


def _cublas_yardstick(a, b, sa, sb, block_m, out_dtype):
    """cuBLASLt's block-scaled GEMM on a dense groupwise call's operands (scales K-major)."""
    return on_oracle_device(cublas_blockscaled, a, b, sa, sb, block_m, out_dtype)


def _error(name, args, kwargs, exc, fragments) -> ErrorInput:
    """``fragments`` ("`arg`.*gist"): each must occur in the message, in any order."""
    match = "(?s)" + "".join(f"(?=.*{fragment})" for fragment in fragments.split(".*"))
    return ErrorInput(name, lambda: (args, kwargs), exc, match)


def entries(make_all):
    """Lazy entries for the samples ``make_all()`` builds (names read once, under a fixed seed)."""

    def listed():
        with torch.random.fork_rng():
            torch.manual_seed(0)
            names = [s.name for s in make_all()]
        return [Entry(name, lambda i=i: make_all()[i]) for i, name in enumerate(names)]

    return listed


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
            _sample(
                f"{dtype}-{out_dtype}-{layout}-{b}x{m}x{n}x{k}",
                (A, B),
                {"out": o, "out_dtype": out_dtype},
                expected,
            )
        )
    A = torch.randn(2, 5, 64).to(BF16)
    B = col_major(torch.randn(2, 64, 12).to(BF16))
    expected = partial(oracle_bmm, A, B)
    out.append(_sample("strided-out", (A, B), {"out": strided_out(2, 5, 12, dtype=BF16)}, expected))
    At = torch.randn(2, 64, 5).to(BF16).transpose(1, 2)  # A with a strided last dimension
    expected = partial(oracle_bmm, At, B)
    out.append(_sample("strided-A", (At, B), {"out": poisoned(2, 5, 12, dtype=BF16)}, expected))
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
        out.append(_sample(name, (A, B, sa, sb, out_dtype), {"out": o}, expected))
    A, B = fp8(2, 5, 64), col_major(fp8(2, 64, 12))
    s = pow2(1)
    expected = partial(oracle_bmm, A, B, s, s)
    out.append(
        _sample("strided-out", (A, B, s, s, BF16), {"out": strided_out(2, 5, 12, dtype=BF16)}, expected)
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
        yardstick = _cublas_yardstick(a, b, sa, sb, gm, out_dtype)
        out.append(_sample(name, (a, b, stored_a, stored_b, mode), kwargs, expected, yardstick=yardstick))
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
        out.append(_sample(f"trtllm-{a_form}-{m}x{n}x{k}", (a, b, stored_a, sb, "MN"), kwargs, expected))
    for backend in ("mubin", "auto", "cutlass"):
        m, n, k = 5, 200, 256
        a, b = fp8(m, k), fp8(n, k)
        sa, sb = pow2(m, 2), pow2(2, 2)
        expected = partial(oracle_groupwise, a, b, sa, sb, 1, 128, 128)
        scale = torch.full((m, 2), float("nan"))
        kwargs = {"backend": backend, "output_scale": scale}
        out.append(
            _sample(f"fp8-output-{backend}", (a, b, sa, sb, "K"), kwargs, expected, output_scale=scale)
        )
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
            _sample(f"{layout}-G{groups}-{m}x{n}x{k}", (a, b, stored_a, sb, ids), kwargs, expected, valid)
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
        out.append(_sample(name, (a, b, stored_a, sb, masked_m, expected_m), kwargs, expected, valid))
    return out


def _replace(args, index, value):
    args = list(args)
    args[index] = value
    return tuple(args)


def bmm_bf16_errors():
    A, B = torch.randn(2, 3, 64).to(BF16), col_major(torch.randn(2, 64, 5).to(BF16))
    base = (A, B)
    return [
        _error("A fp32", (A.float(), B), {}, ValueError, "`A`.*first tensor"),
        _error("B other dtype", (A, B.half()), {}, ValueError, "`B`.*second tensor"),
        _error("A not a tensor", ([1.0], B), {}, TypeError, "`A`"),
        # upstream leaves ranks and batch/k to its C++ layer: RuntimeError (and ValueError, below)
        _error("A 2-D", (A[0], B), {}, RuntimeError, "`A`.*3-D"),
        _error("k mismatch", (A, B[:, :32]), {}, RuntimeError, "`B`.*k"),
        _error("batch mismatch", (A, B[:1]), {}, RuntimeError, "`B`.*batch"),
        _error("B on another device", (A, B.to("meta")), {}, ValueError, "`B`.*device"),
        _error(
            "out_dtype int8",
            base,
            {"out_dtype": torch.int8},
            ValueError,
            "`out_dtype`.*nsupported output dtype",
        ),
        _error("tgv fp16", base, {"out_dtype": FP16, "backend": "tgv"}, ValueError, "`out_dtype`.*TGV"),
        _error("out shape", base, {"out": torch.empty(2, 3, 6, dtype=BF16)}, ValueError, "`out`.*shape"),
        _error("out dtype", base, {"out": torch.empty(2, 3, 5, dtype=FP16)}, ValueError, "`out`.*dtype"),
        _error(
            "out device",
            base,
            {"out": torch.empty(2, 3, 5, dtype=BF16, device="meta")},
            ValueError,
            "`out`.*device",
        ),
        _error("unknown backend", base, {"backend": "cublas"}, ValueError, "`backend`.*cudnn"),
    ]


def bmm_fp8_errors():
    A, B = fp8(2, 3, 64), col_major(fp8(2, 64, 5))
    s = pow2(1)
    base = (A, B, s, s, BF16)
    return [
        _error("A bf16", _replace(base, 0, A.to(BF16)), {}, ValueError, "`A`.*FP8"),
        _error("B fp16", _replace(base, 1, B.to(FP16)), {}, ValueError, "`B`.*FP8"),
        _error("dtype fp32", _replace(base, 4, FP32), {}, ValueError, "`dtype`.*nsupported output dtype"),
        _error(
            "cutlass e5m2",
            _replace(base, 0, A.to(E5M2)),
            {"backend": "cutlass"},
            ValueError,
            "e5m2 is not supported for bmm_fp8 with cutlass",
        ),
        _error("A_scale fp16", _replace(base, 2, s.half()), {}, ValueError, "`A_scale`.*float32"),
        _error("A_scale shape", _replace(base, 2, pow2(2)), {}, ValueError, "`A_scale`.*shape"),
        _error("B_scale shape", _replace(base, 3, pow2(2, 5, 2)), {}, ValueError, "`B_scale`.*shape"),
        _error("A_scale not a tensor", _replace(base, 2, 1.0), {}, TypeError, "`A_scale`"),
        _error("scale device", _replace(base, 3, s.to("meta")), {}, ValueError, "`B_scale`.*device"),
        # cuBLAS's C++ checks upstream (flashinfer-api.md 5.2): RuntimeError (and ValueError, below)
        _error("A 2-D", _replace(base, 0, A[0]), {}, RuntimeError, "`A`.*3-D"),
        _error("k mismatch", _replace(base, 1, B[:, :32]), {}, RuntimeError, "`B`.*ncompatible matrix sizes"),
        _error("out shape", base, {"out": torch.empty(2, 5, 3, dtype=BF16)}, RuntimeError, "`out`.*shape"),
        _error("out dtype", base, {"out": torch.empty(2, 3, 5, dtype=FP16)}, ValueError, "`out`.*dtype"),
        _error("unknown backend", base, {"backend": "tgv"}, ValueError, "`backend`.*cublas"),
    ]


def groupwise_errors():
    m, n, k = 4, 256, 256
    a, b = fp8(m, k), fp8(n, k)
    sa, sb = pow2(m, 2), pow2(2, 2)
    base = (a, b, sa, sb, "K")
    return [
        _error("a 3-D", _replace(base, 0, a[None]), {}, ValueError, "`a`.*hape mismatch"),
        _error("k mismatch", _replace(base, 1, b[:, :128]), {}, ValueError, r"`b`.*a\.shape\[1\]"),
        _error("a bf16", _replace(base, 0, a.to(BF16)), {}, ValueError, "`a`.*float8_e4m3fn"),
        _error("b e5m2", _replace(base, 1, b.to(E5M2)), {}, ValueError, "`b`.*float8_e4m3fn"),
        _error("a not K-major", _replace(base, 0, fp8(k, m).t()), {}, ValueError, "`a`.*K-major"),
        _error(
            "out_dtype fp32", base, {"out_dtype": FP32}, ValueError, "`out_dtype`.*nsupported output dtype"
        ),
        _error(
            "out fp8 without output_scale",
            base,
            {"out": torch.empty(m, n, dtype=E4M3)},
            ValueError,
            "`out`.*nsupported output dtype",
        ),
        _error(
            "cutlass without mode",
            _replace(base, 4, None),
            {},
            ValueError,
            "scale_major_mode is required in CUTLASS",
        ),
        _error("bad mode", _replace(base, 4, "X"), {}, ValueError, "`scale_major_mode`"),
        _error(
            "trtllm granularity",
            base,
            {"backend": "trtllm", "scale_granularity_mnk": (128, 128, 128)},
            ValueError,
            r"\(1, 128, 128\) in TRTLLM",
        ),
        _error(
            "trtllm small k",
            (a[:, :128], b[:, :128], sa[:, :1], sb[:, :1], None),
            {"backend": "trtllm"},
            ValueError,
            r"a\.shape\[1\] must be >= 256 in TRTLLM",
        ),
        _error(
            "cutile MN",
            _replace(base, 4, "MN"),
            {"backend": "cutile"},
            ValueError,
            "scale_major_mode='K' only",
        ),
        _error(
            "cutile granularity",
            base,
            {"backend": "cutile", "scale_granularity_mnk": (128, 128, 128)},
            ValueError,
            r"\(1, 128, 128\) only",
        ),
        _error(
            "granularity",
            base,
            {"scale_granularity_mnk": (1, 64, 128)},
            RuntimeError,
            "`scale_granularity_mnk`.*nsupported scale granularity",
        ),
        _error(
            "granularity None", base, {"scale_granularity_mnk": None}, TypeError, "`scale_granularity_mnk`"
        ),
        _error("cutlass mma_sm 3", base, {"mma_sm": 3}, RuntimeError, "`mma_sm`.*Unsupported MMA SM"),
        _error(
            "mubin without output_scale", base, {"backend": "mubin"}, BackendSupportedError, "output_scale"
        ),
        _error(
            "mudnn with output_scale",
            base,
            {"backend": "mudnn", "output_scale": torch.empty(m, 2)},
            BackendSupportedError,
            "`output_scale`.*mudnn",
        ),
        _error(
            "output_scale with bf16",
            base,
            {"output_scale": torch.empty(m, 2), "out_dtype": BF16},
            ValueError,
            "`out_dtype`.*float8_e4m3fn",
        ),
        _error("output_scale shape", base, {"output_scale": torch.empty(m, 1)}, ValueError, "`output_scale`"),
        _error(
            "output_scale dtype",
            base,
            {"output_scale": torch.empty(m, 2, dtype=BF16)},
            ValueError,
            "`output_scale`.*float32",
        ),
        _error("a_scale shape", _replace(base, 2, pow2(2, m)), {}, ValueError, "`a_scale`.*shape"),
        _error("b_scale MN shape", _replace(base, 3, pow2(2, 3)), {}, ValueError, "`b_scale`.*shape"),
        _error(
            "trtllm a_scale shape",
            _replace(base, 2, pow2(3, 3)),
            {"backend": "trtllm"},
            ValueError,
            "`a_scale`.*MN-major",
        ),
        _error("a_scale fp16", _replace(base, 2, sa.half()), {}, ValueError, "`a_scale`.*float32"),
        _error("out shape", base, {"out": torch.empty(m, n + 1, dtype=BF16)}, ValueError, "`out`.*shape"),
        _error("b device", _replace(base, 1, b.to("meta")), {}, ValueError, "`b`.*device"),
        _error("unknown backend", base, {"backend": "cublas"}, ValueError, "`backend`.*trtllm"),
        _error("out not a tensor", base, {"out": [0.0]}, TypeError, "`out`"),
    ]


def contiguous_errors():
    groups, m, n, k = 2, 256, 128, 256
    a, b = fp8(m, k), fp8(groups, n, k)
    sa, sb = pow2(m, 2), pow2(groups, 1, 2)
    ids = torch.arange(groups, dtype=torch.int32).repeat_interleave(128)
    base = (a, b, sa, sb, ids)
    return [
        _error("a e5m2", _replace(base, 0, a.to(E5M2)), {}, ValueError, "`a`.*a must be float8_e4m3fn"),
        _error("b bf16", _replace(base, 1, b.to(BF16)), {}, ValueError, "`b`.*b must be float8_e4m3fn"),
        _error("m_indices int64", _replace(base, 4, ids.long()), {}, ValueError, "`m_indices`.*int32"),
        _error(
            "m_indices strided",
            _replace(base, 4, torch.stack([ids, ids], 1)[:, 0]),
            {},
            ValueError,
            "`m_indices`.*contiguous",
        ),
        _error("m_indices length", _replace(base, 4, ids[:128]), {}, ValueError, "hape mismatch"),
        _error(
            "a not K-major", _replace(base, 0, fp8(k, m).t()), {}, ValueError, "`a`.*major_a must be KMajor"
        ),
        _error("out_dtype fp16", base, {"out_dtype": FP16}, ValueError, "`out_dtype`.*d must be bfloat16"),
        _error(
            "out not N-major", base, {"out": torch.empty(n, m, dtype=BF16).t()}, ValueError, "`out`.*N-major"
        ),
        _error(
            "out shape", base, {"out": torch.empty(m, n + 1, dtype=BF16)}, ValueError, "`out`.*hape mismatch"
        ),
        _error("a_scale shape", _replace(base, 2, pow2(2, m)), {}, AssertionError, "`a_scale`"),
        _error("b_scale shape", _replace(base, 3, pow2(groups, 2, 2)), {}, AssertionError, "`b_scale`"),
        _error(
            "granularity",
            base,
            {"scale_granularity_mnk": (128, 128, 128)},
            ValueError,
            "`scale_granularity_mnk`",
        ),
        _error("scale device", _replace(base, 3, sb.to("meta")), {}, ValueError, "`b_scale`.*device"),
        _error("out not a tensor", base, {"out": [0.0]}, TypeError, "`out`"),
    ]


def masked_errors():
    groups, m, n, k = 2, 64, 128, 256
    a, b = fp8(groups, m, k), fp8(groups, n, k)
    sa, sb = pow2(groups, m, 2), pow2(groups, 1, 2)
    masked = torch.tensor([3, 64], dtype=torch.int32)
    base = (a, b, sa, sb, masked, 16)
    return [
        _error("groups", _replace(base, 1, b[:1]), {}, ValueError, "num_groups mismatch"),
        _error("masked_m groups", _replace(base, 4, masked[:1]), {}, ValueError, "num_groups mismatch"),
        _error("k mismatch", _replace(base, 1, b[..., :128]), {}, ValueError, "m, n, k mismatch"),
        _error("expected_m 0", _replace(base, 5, 0), {}, ValueError, "`expected_m`.*greater than 0"),
        _error("masked_m int64", _replace(base, 4, masked.long()), {}, ValueError, "`masked_m`.*int32"),
        _error("a e5m2", _replace(base, 0, a.to(E5M2)), {}, ValueError, "a must be float8_e4m3fn"),
        _error(
            "b not K-major",
            _replace(base, 1, fp8(groups, k, n).transpose(1, 2)),
            {},
            ValueError,
            "major_b must be KMajor",
        ),
        _error(
            "out fp16",
            base,
            {"out": torch.empty(groups, m, n, dtype=FP16)},
            ValueError,
            "`out`.*d must be bfloat16",
        ),
        _error(
            "out shape",
            base,
            {"out": torch.empty(groups, m, n + 1, dtype=BF16)},
            ValueError,
            "`out`.*m, n, k mismatch",
        ),
        _error("a 2-D", _replace(base, 0, a[0]), {}, ValueError, "`a`.*3-D"),
        _error("a_scale shape", _replace(base, 2, pow2(groups, m, 1)), {}, AssertionError, "`a_scale`"),
        _error("b_scale shape", _replace(base, 3, pow2(groups, 2, 2)), {}, AssertionError, "`b_scale`"),
    ]


# ----------------------------------------------------------------------------- bad input, per argument

# A valid call each (the outputs hold 7.0, never NaN, so a write shows), then one argument spoiled
# per row: the documented exception, a message naming the argument, nothing written before.
# Tensors on "another device" use PyTorch's ``meta`` device, which exists on every machine.
META = torch.device("meta")


def bmm_bf16_args():
    return dict(A=torch.randn(2, 4, 8).to(BF16), B=torch.randn(2, 3, 8).to(BF16).transpose(-2, -1),
                out=torch.full((2, 4, 3), 7.0, dtype=BF16))  # fmt: skip


def bmm_fp8_args():
    return dict(A=fp8(2, 4, 32, scale=1.0), B=fp8(2, 3, 32, scale=1.0).transpose(-2, -1), A_scale=torch.ones(()),
                B_scale=torch.ones(1), dtype=BF16, out=torch.full((2, 4, 3), 7.0, dtype=BF16))  # fmt: skip


def groupwise_args():
    return dict(a=fp8(4, 256, scale=1.0), b=fp8(3, 256, scale=1.0), a_scale=torch.ones(4, 2), b_scale=torch.ones(1, 2),
                scale_major_mode="K", out=torch.full((4, 3), 7.0, dtype=BF16))  # fmt: skip


def grouped_args():
    return dict(a=fp8(4, 128, scale=1.0), b=fp8(2, 3, 128, scale=1.0), a_scale=torch.ones(4, 1),
                b_scale=torch.ones(2, 1, 1), m_indices=torch.tensor([0, 0, 1, 1], dtype=torch.int32),
                out=torch.full((4, 3), 7.0, dtype=BF16))  # fmt: skip


def masked_args():
    return dict(a=fp8(2, 4, 128, scale=1.0), b=fp8(2, 3, 128, scale=1.0), a_scale=torch.ones(2, 4, 1),
                b_scale=torch.ones(2, 1, 1), masked_m=torch.tensor([2, 4], dtype=torch.int32), expected_m=3,
                out=torch.full((2, 4, 3), 7.0, dtype=BF16))  # fmt: skip


def spoiled(make, arg, value, exc, match, extra=None, index=0) -> ErrorInput:
    """``make()``'s valid call with ``arg`` set to ``value`` (after ``extra``'s changes)."""

    def call():
        kwargs = {**make(), **(extra or {}), arg: value() if callable(value) else value}
        return (), kwargs

    return ErrorInput(f"bad-{arg}-{index}", call, exc, match)


def _numbered(rows) -> list:
    return [spoiled(*row[:5], *row[5:6], index=i) for i, row in enumerate(rows)]


def bmm_bf16_bad_inputs():
    return _numbered([
        (bmm_bf16_args, "A", fp8(2, 4, 8, scale=1.0), ValueError, "A"),
        (bmm_bf16_args, "A", torch.randn(4, 8).to(BF16), ValueError, "A"),
        (bmm_bf16_args, "B", torch.randn(2, 9, 3).to(BF16), ValueError, "B"),
        (bmm_bf16_args, "B", torch.randn(3, 8, 3).to(BF16), ValueError, "B"),
        (bmm_bf16_args, "B", torch.randn(2, 8, 3).half(), ValueError, "B"),
        (bmm_bf16_args, "B", torch.empty(2, 8, 3, dtype=BF16, device=META), ValueError, "B"),
        (bmm_bf16_args, "out", torch.empty(2, 4, 4, dtype=BF16), ValueError, "out|Output"),
        (bmm_bf16_args, "out", torch.empty(2, 4, 3, dtype=torch.float32), ValueError, "out|Output"),
        (bmm_bf16_args, "out", torch.empty(2, 4, 3, dtype=BF16, device=META), ValueError, "out|Output"),
        (bmm_bf16_args, "out_dtype", E4M3, ValueError, "dtype", {"out": None}),
        (bmm_bf16_args, "backend", "cuda-magic", ValueError, "backend"),
        (bmm_bf16_args, "backend", "tgv", ValueError, "tgv|bfloat16",
         {"out_dtype": torch.float16, "out": torch.full((2, 4, 3), 7.0, dtype=torch.float16)}),
    ])  # fmt: skip


def bmm_fp8_bad_inputs():
    return _numbered([
        (bmm_fp8_args, "A", torch.randn(2, 4, 32).to(BF16), ValueError, "A"),
        (bmm_fp8_args, "B", fp8(2, 33, 3, scale=1.0), ValueError, "B"),
        (bmm_fp8_args, "dtype", torch.float32, ValueError, "dtype|output dtype"),
        (bmm_fp8_args, "A_scale", torch.ones(2), ValueError, "A_scale"),
        (bmm_fp8_args, "A_scale", torch.ones((), device=META), ValueError, "A_scale"),
        (bmm_fp8_args, "B_scale", torch.ones(1, dtype=torch.float16), ValueError, "B_scale"),
        (bmm_fp8_args, "A", fp8(2, 4, 32, dtype=E5M2, scale=1.0), ValueError, "e5m2", {"backend": "cutlass"}),
        (bmm_fp8_args, "out", torch.empty(2, 5, 3, dtype=BF16), (ValueError, RuntimeError), "out"),
        (bmm_fp8_args, "backend", "cudnn2", ValueError, "backend"),
    ])  # fmt: skip


def groupwise_bad_inputs():
    return _numbered([
        (groupwise_args, "a", fp8(1, 4, 256, scale=1.0), ValueError, "a|Shape mismatch"),
        (groupwise_args, "b", fp8(3, 128, scale=1.0), ValueError, "b|Shape mismatch"),
        (groupwise_args, "a", torch.randn(4, 256).to(BF16), ValueError, "a"),
        (groupwise_args, "scale_major_mode", None, ValueError, "scale_major_mode"),
        (groupwise_args, "a_scale", torch.ones(4, 3), ValueError, "a_scale"),
        (groupwise_args, "b_scale", torch.ones(2, 2), ValueError, "b_scale"),
        (groupwise_args, "out_dtype", torch.float32, ValueError, "dtype", {"out": None}),
        (groupwise_args, "backend", "trtllm", ValueError, "256",
         {"a": fp8(4, 128, scale=1.0), "b": fp8(3, 128, scale=1.0), "a_scale": torch.ones(1, 4), "b_scale": torch.ones(1, 1)}),
        (groupwise_args, "backend", "cutile", ValueError, "K", {"scale_major_mode": "MN",
         "a_scale": torch.ones(2, 4), "b_scale": torch.ones(2, 1)}),
        (groupwise_args, "backend", "mubin", BackendSupportedError, "output_scale"),
        (groupwise_args, "backend", "nvidia", ValueError, "backend"),
    ])  # fmt: skip


def grouped_bad_inputs():
    return _numbered([
        (grouped_args, "a", fp8(4, 128, dtype=E5M2, scale=1.0), ValueError, "a"),
        (grouped_args, "m_indices", torch.zeros(4, dtype=torch.int64), ValueError, "m_indices"),
        (grouped_args, "m_indices", torch.zeros(8, dtype=torch.int32)[::2], ValueError, "m_indices"),
        (grouped_args, "m_indices", torch.zeros(5, dtype=torch.int32), ValueError, "m_indices|Shape"),
        (grouped_args, "out", torch.empty(4, 3, dtype=torch.float16), ValueError, "out|d must"),
        (grouped_args, "b_scale", torch.ones(2, 2, 1), (ValueError, AssertionError), "b_scale"),
        (grouped_args, "a", fp8(128, 4, scale=1.0).t(), ValueError, "a|major"),
    ])  # fmt: skip


def masked_bad_inputs():
    return _numbered([
        (masked_args, "expected_m", 0, ValueError, "expected_m"),
        (masked_args, "masked_m", torch.tensor([1, 2, 3], dtype=torch.int32), ValueError, "masked_m|num_groups"),
        (masked_args, "masked_m", torch.tensor([1, 2], dtype=torch.int64), ValueError, "masked_m"),
        (masked_args, "b", fp8(2, 128, 3, scale=1.0).transpose(-2, -1), ValueError, "b|major"),
        (masked_args, "out", torch.empty(2, 4, 3, dtype=BF16, device=META), ValueError, "out"),
    ])  # fmt: skip


# ----------------------------------------------------------------------------- the sibling APIs


def blockscaled_samples():
    """``gemm_fp8_nt_blockscaled``: 128 x 128 blocks on both sides, both scale majors."""
    out = []
    for mode in ("MN", "K"):
        for m, n, k, out_dtype in [(256, 128, 256, BF16), (130, 200, 384, FP16), (1, 128, 128, BF16)]:
            a, b = fp8(m, k), fp8(n, k)
            sa, sb = (
                pow2(math.ceil(m / 128), math.ceil(k / 128)),
                pow2(math.ceil(n / 128), math.ceil(k / 128)),
            )
            stored = (sa, sb) if mode == "K" else (sa.t().contiguous(), sb.t().contiguous())
            expected = partial(oracle_groupwise, a, b, sa, sb, 128, 128, 128)
            kwargs = {"out": poisoned(m, n, dtype=out_dtype)}
            out.append(_sample(f"{mode}-{out_dtype}-{m}x{n}x{k}", (a, b, *stored, mode), kwargs, expected))
    return out


def blockscaled_errors():
    a, b = fp8(128, 256), fp8(128, 256)
    s = pow2(2, 1)
    out = poisoned(128, 128, dtype=BF16)
    return [
        _error("no mode", (a, b, s, s, None), {"out": out}, ValueError, "scale_major_mode is required in CUTLASS"),
        _error("per-row a_scale", (a, b, pow2(128, 2), s, "MN"), {"out": out}, ValueError, "`a_scale`.*shape"),
        _error("out fp32", (a, b, s, s), {"out": poisoned(128, 128, dtype=FP32)}, ValueError, "nsupported output dtype"),
    ]  # fmt: skip


def blockscaled_mate_call(call, calls) -> None:
    assert only_call(calls, "gemm.bmm")["recipe_a"] == (1, 128)  # A scales expanded per row


# (name, offsets, rows, n, k, scale major, block_m, dtypes, out dtype, strided out, kwargs)
GROUP_CASES = [
    ("mn-empty-groups", [0, 4, 4, 12, 12, 20], 20, 128, 256, "MN", 1, (E4M3, E4M3), BF16, False, {}),
    ("k-major", [0, 7, 20], 20, 200, 384, "K", 1, (E4M3, E4M3), BF16, False, {}),
    ("tail-rows-untouched", [0, 8, 16], 24, 128, 256, "MN", 1, (E4M3, E4M3), FP16, False, {}),
    ("leading-rows-untouched", [4, 9, 16], 16, 128, 256, "K", 1, (E4M3, E4M3), BF16, True, {}),
    ("e5m2-mix", [0, 5, 13], 13, 128, 256, "K", 1, (E5M2, E4M3), BF16, False, {"backend": "cutile"}),
    ("block-128-aligned", [0, 128, 256], 256, 128, 256, "K", 128, (E4M3, E4M3), BF16, False, {}),
    ("block-128-unaligned", [0, 100, 300], 300, 128, 256, "MN", 128, (E4M3, E4M3), BF16, False, {}),
    ("one-group", [0, 3], 3, 8, 16, "MN", 1, (E4M3, E4M3), BF16, False, {}),
    ("mubin-name", [0, 2, 6], 6, 128, 256, "MN", 1, (E4M3, E4M3), BF16, False, {"backend": "mubin", "mma_sm": 2}),
]  # fmt: skip


def group_gemm_samples():
    """``group_gemm_fp8_nt_groupwise``: segments by ``m_indptr``; rows outside them keep their NaN."""
    return [group_gemm_sample(*case) for case in GROUP_CASES]


def group_gemm_sample(name, bounds, m, n, k, mode, gm, dtypes, out_dtype, strided, extra, oracle=partial):
    groups = len(bounds) - 1
    m_indptr = torch.tensor(bounds, dtype=torch.int32)
    a, b = fp8(m, k, dtype=dtypes[0]), fp8(groups, n, k, dtype=dtypes[1])
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    sa_blocks, sb = pow2(math.ceil(m / gm), kb), pow2(groups, nb, kb)
    stored = (sa_blocks, sb) if mode == "K" else (sa_blocks.t().contiguous(), sb.transpose(1, 2).contiguous())
    o = strided_out(m, n, dtype=out_dtype) if strided else poisoned(m, n, dtype=out_dtype)
    expected = oracle(segments_expected, a, b, sa_blocks, sb, m_indptr, gm)
    rows = torch.zeros(m, dtype=torch.bool)
    for g in range(groups):
        rows[bounds[g] : bounds[g + 1]] = True
    kwargs = dict(extra, scale_granularity_mnk=(gm, 128, 128), scale_major_mode=mode, out=o)
    return _sample(name, (a, b, *stored, m_indptr), kwargs, expected, rows[:, None].expand(m, n))


def segments_expected(a, b, sa_blocks, sb, m_indptr, block_m):
    return oracle_segments(a, b, row_scales(sa_blocks, m_indptr, a.shape[0], block_m), sb, m_indptr)


def group_gemm_mate_call(call, calls) -> None:
    record = only_call(calls, "gemm.ragged_m_moe_gemm_8bit")
    assert record["gemm_mode"] == "per_expert" and record["backend"] == "auto"
    assert record["input_a"][0] is call.args[0] and record["input_b"][0] is call.args[1]


def group_gemm_errors():
    m, n, k, groups = 8, 128, 256, 2
    a, b = fp8(m, k), fp8(groups, n, k)
    sa, sb = pow2(2, m), pow2(groups, 2, 1)  # MN-major
    m_indptr = torch.tensor([0, 4, 8], dtype=torch.int32)
    base = dict(a=a, b=b, a_scale=sa, b_scale=sb, m_indptr=m_indptr)

    def case(name, exc, match, **changes):
        kwargs = dict(base, **changes)
        kwargs.setdefault("out", poisoned(8, 128, dtype=BF16))
        return ErrorInput(name, lambda: ((), kwargs), exc, match)

    return [
        case("a bf16", ValueError, r"^a must be a float8 tensor, but got torch.bfloat16$", a=a.to(BF16)),
        case("b fp16", ValueError, r"^b must be a float8 tensor, but got torch.float16$", b=b.to(FP16)),
        case("a_scale fp16", ValueError, r"^a_scale must be a float32 tensor, but got torch.float16$", a_scale=sa.half()),
        case("b_scale fp64", ValueError, r"^b_scale must be a float32 tensor", b_scale=sb.double()),
        case("m_indptr int64", ValueError, r"^m_indptr must be a int32 tensor, but got torch.int64$", m_indptr=m_indptr.long()),
        case("mode", ValueError, r"^scale_major_mode must be either 'MN' or 'K', but got None$", scale_major_mode=None),
        case("mma_sm", ValueError, r"^mma_sm must be either 1 or 2, but got 3$", mma_sm=3),
        case("out shape", ValueError, r"^Shape mismatch\. out\.shape = .*\(a\.shape\[0\], n\) = \(8, 128\)$",
             out=poisoned(8, 64, dtype=BF16)),
        case("out vs out_dtype", ValueError, r"^dtype mismatch\. out\.dtype = torch\.bfloat16, out_dtype = torch\.float16$",
             out_dtype=FP16),
        case("out_dtype fp32", ValueError, r"^Unsupported output dtype: torch.float32\. Only torch.bfloat16 and "
             r"torch.float16 are supported for FP8 GEMM operations\.$", out=None, out_dtype=FP32),
        case("k mismatch", ValueError, r"^Shape mismatch\. a\.shape\[1\] = 128, k = 256$", a=a[:, :128]),
        case("n % 8", ValueError, r"^n must be a multiple of 8, but got 4$", b=b[:, :4], out=poisoned(8, 4, dtype=BF16)),
        case("k % 16", ValueError, r"^k must be a multiple of 16, but got 136$", a=fp8(m, 136), b=fp8(groups, n, 136)),
        case("unknown backend", ValueError, r"'trtllm', 'cutile'.*`backend`", backend="cutlass"),
        case("granularity", ValueError, r"`scale_granularity_mnk`", scale_granularity_mnk=(1, 64, 128)),
        case("cutile MN", NotImplementedError, r"scale_major_mode='K'", backend="cutile"),
        case("cutile block 128", NotImplementedError, r"scale_granularity_mnk\[0\] == 1", backend="cutile",
             scale_major_mode="K", scale_granularity_mnk=(128, 128, 128), a_scale=pow2(1, 2)),
        case("a 3-D", ValueError, r"2-D.*for `a`", a=a[None]),
        case("b 2-D", ValueError, r"3-D.*for `b`", b=b[0]),
        case("m_indptr groups", ValueError, r"shape \(3,\).*for `m_indptr`", m_indptr=m_indptr[:2]),
        case("a_scale shape", ValueError, r"shape \(2, 8\).*for `a_scale`", a_scale=pow2(8, 2)),
        case("b_scale shape", ValueError, r"shape \(2, 2, 1\).*for `b_scale`", b_scale=pow2(groups, 1, 2)),
        case("a not K-major", ValueError, r"K-major.*for `a`", a=fp8(k, m).t()),
        case("b device", ValueError, r"device of `a`\) for `b`", b=b.to("meta")),
        case("m_indptr not a tensor", TypeError, r"`m_indptr`", m_indptr=[0, 4, 8]),
    ]  # fmt: skip


def _input_scale_form(scale, form):
    """``scale`` (M, K/128) stored as a caller may pass it."""
    m, kb = scale.shape
    if form == "row-major":
        return scale.contiguous()
    if form == "column-major":  # the memory upstream's kernel reads, as an (M, K/128) view
        return scale.t().contiguous().t()
    if form == "mn-storage":
        return scale.t().contiguous()
    padded = torch.full((kb, -(-m // 4) * 4), float("nan"))  # upstream's test: rows padded to 4
    padded[:, :m] = scale.t()
    return padded[:, :m]


BLOCKSCALE_CASES = [
    # (M, N, K, input dtype, weight dtype, weight scale, input_scale form, out dtype)
    (3, 128, 256, BF16, BF16, None, None, BF16),
    (37, 192, 384, BF16, BF16, None, None, FP16),
    (5, 256, 256, BF16, E4M3, "block", None, BF16),
    (16, 64, 128, BF16, E4M3, "token", None, BF16),
    (7, 128, 512, E4M3, E4M3, "token", "padded", BF16),
    (6, 256, 256, E4M3, E4M3, "block", "row-major", FP16),
    (2, 128, 256, E4M3, E4M3, "block", "column-major", BF16),
    (3, 64, 256, E4M3, E4M3, "token", "mn-storage", BF16),
]


def blockscale_inputs(M, N, K, in_dtype, w_dtype, w_scale, form, out_dtype):
    kb = K // 128
    if in_dtype == BF16:
        x, x_scale, x_ref_scale = (torch.randn(M, K) * 2).to(BF16), None, None
    else:
        x, x_ref_scale = fp8(M, K), pow2(M, kb)
        x_scale = _input_scale_form(x_ref_scale, form)
    if w_dtype == BF16:
        w, w_scale_t = torch.randn(N, K).to(BF16), None
    else:
        w = fp8(N, K)
        w_scale_t = pow2(N, kb) if w_scale == "token" else pow2(math.ceil(N / 128), kb)
    return x, w, x_scale, w_scale_t, x_ref_scale


def blockscale_samples():
    """``fp8_blockscale_gemm_sm90``: 16-bit operands are quantized inside (upstream's formula)."""
    return [blockscale_sample(case) for case in BLOCKSCALE_CASES]


def blockscale_sample(case, oracle=partial):
    M, N, K, *_, out_dtype = case
    x, w, x_scale, w_scale, x_ref_scale = blockscale_inputs(*case)
    expected = oracle(blockscale_expected, x, w, x_ref_scale, w_scale, out_dtype)
    kwargs = {"out": strided_out(M, N, dtype=out_dtype)}
    return _sample("-".join(str(v) for v in case), (x, w, x_scale, w_scale), kwargs, expected)


def blockscale_expected(x, w, x_ref_scale, w_scale, out_dtype):
    """Exact for upstream's quantization of the 16-bit operands, and within the stated
    quantization error of the operands as given."""
    return blockscale_oracle(x, w, x_ref_scale, w_scale), quantization_error_bound(
        x, w, x_ref_scale, w_scale, out_dtype
    )


def blockscale_compare(result, call, slack=0.0, tensor_cores=False) -> None:
    (ref, ref_abs), (given_ref, bound) = call.oracle()
    assert tuple(result.shape) == tuple(ref.shape), (tuple(result.shape), tuple(ref.shape))
    result = result.cpu()
    assert_matches(result, ref, ref_abs, slack=slack)
    slack_bound = slack * given_ref.pow(2).mean().sqrt().item() if slack else 0.0
    assert ((result.double() - given_ref).abs() <= bound + slack_bound).all(), "out of the quantization bound"


def blockscale_mate_call(call, calls) -> None:
    record = only_call(calls, "gemm.bmm")
    w, w_scale = call.args[1], call.args[3]
    per_token = w_scale is not None and w_scale.shape[0] == w.shape[0]
    assert record["recipe_a"] == (1, 128) and record["recipe_b"] == ((1, 128) if per_token else (128, 128))


def blockscale_errors():
    M, N, K = 4, 128, 256
    x, w = torch.randn(M, K).to(BF16), torch.randn(N, K).to(BF16)
    x8, w8 = fp8(M, K), fp8(N, K)
    sx, sw = pow2(M, 2), pow2(1, 2)

    def case(name, exc, match, *args, **kwargs):
        kwargs.setdefault("out", poisoned(4, 128, dtype=BF16))
        return ErrorInput(name, lambda: (args, kwargs), exc, match)

    return [
        case("input 3-D", ValueError, r"^Input must be 2D \(M, K\), got shape \(1, 4, 256\)$", x[None], w),
        case("weight 1-D", ValueError, r"^Weight must be 2D \(N, K\), got shape", x, w[0]),
        case("K mismatch", ValueError, r"^K dimension mismatch: input has K=256, weight has K=128$", x, w[:, :128]),
        case("K % 128", ValueError, r"^K dimension must be divisible by block size \(128\), got K=192$",
             x[:, :192], w[:, :192]),
        case("N % 64", ValueError, r"^N dimension must be divisible by 64, got N=96$", x, w[:96]),
        case("fp8 input bf16 weight", ValueError, r"^FP8 input \+ BF16 weight is not supported", x8, w, sx),
        case("input_scale missing", ValueError, r"^input_scale is required when input is FP8", x8, w8, None, sw),
        case("input_scale fp16", ValueError, r"^input_scale must be float32, got torch.float16$", x8, w8, sx.half(), sw),
        case("input_scale device", ValueError, r"^input_scale device mismatch\. Expected (cpu|cuda:\d+), got meta$",
             x8, w8, sx.to("meta"), sw),
        case("input_scale shape", ValueError, r"shape \(4, 2\).*for `input_scale`", x8, w8, pow2(4, 4), sw),
        case("input fp16", ValueError, r"^Input must be either FP8 \(torch.float8_e4m3fn\) or BF16 \(torch.bfloat16\), "
             r"got torch.float16$", x.half(), w),
        case("input e5m2", ValueError, r"^Input must be either FP8.*got torch.float8_e5m2$", x.to(E5M2), w8, sx, sw),
        case("input_scale with bf16", ValueError, r"^input_scale should not be provided for BF16 inputs\. "
             r"Use FP8 inputs if you want to provide external scales\.$", x, w, sx),
        case("weight_scale missing", ValueError, r"^weight_scale is required when weight is FP8", x, w8),
        case("weight_scale shape", ValueError, r"^weight_scale shape mismatch\. Expected either \(128, 2\) \(per-token, "
             r"1x128 blocks\) or \(1, 2\) \(per-block, 128x128 blocks\), got \(2, 2\)$", x, w8, None,
             pow2(2, 2)),
        case("weight_scale fp64", ValueError, r"^weight_scale must be float32, got torch.float64$", x, w8, None,
             sw.double()),
        case("weight fp16", ValueError, r"^Weight must be either FP8 .* got torch.float16$", x, w.half()),
        case("weight_scale with bf16", ValueError, r"^weight_scale should not be provided for BF16 weights\.", x, w,
             None, sw),
        case("out shape", ValueError, r"^Output shape mismatch\. Expected \(4, 128\), got \(4, 64\)$",
             x, w, out=poisoned(4, 64, dtype=BF16)),
        case("out device", ValueError, r"^Output device mismatch\. Expected (cpu|cuda:\d+), got meta$", x, w,
             out=torch.empty(4, 128, dtype=BF16, device="meta")),
        case("out fp32", ValueError, r"^Output dtype must be torch.bfloat16 or torch.float16, got torch.float32$", x, w,
             out=poisoned(4, 128, dtype=FP32)),
        case("out vs out_dtype", ValueError, r"^Output dtype mismatch\. Expected torch.float16, got torch.bfloat16$",
             x, w, out_dtype=FP16),
        case("out_dtype fp32", ValueError, r"^Output dtype must be torch.bfloat16 or torch.float16, got torch.float32$",
             x, w, out=None, out_dtype=FP32),
        case("weight device", ValueError, r"device of `input`\) for `weight`", x, w.to("meta")),
        case("input not K-major", ValueError, r"K-major.*for `input`", torch.randn(K, M).to(BF16).t(), w),
        case("weight_scale not a tensor", TypeError, r"`weight_scale`", x, w8, None, [1.0]),
    ]  # fmt: skip


def only_call(calls, name):
    """The one MATE call named ``name`` (``calls``: the stand-in's ``CALLS``)."""
    found = [args for called, args in calls if called == name]
    assert len(found) == 1, [c for c, _ in calls]
    return found[0]


# ----------------------------------------------------------------------------- real sizes, cuda only

# DeepSeek-V3's GEMMs at the sizes the callers run them (decode m = 1 to prefill m = 4096, k up to
# 7168, n up to 24576), and the layouts only a real size reaches (m past a tile, n and k off the
# tile grid). Only the CUDA implementation runs them (``OpInfo.cuda_samples``); their float64
# oracles run on the GPU (``oracles.on_oracle_device``). ``slow``: the long tail (``gpu-slow``).


def real(name, make, slow=False) -> Entry:
    """A lazy real-size row: ``make()`` builds the sample named ``name`` when a test asks."""
    return Entry(name, lambda: make(name), slow)


def bmm_bf16_real():
    def row(b, m, n, k, dtype, out_dtype):
        def make(name):
            A = torch.randn(b, m, k).to(dtype)
            B = col_major(torch.randn(b, k, n).to(dtype))
            kwargs = {"out": poisoned(b, m, n, dtype=out_dtype), "out_dtype": out_dtype}
            return _sample(name, (A, B), kwargs, on_oracle_device(oracle_bmm, A, B))

        return real(f"real-{dtype}-{out_dtype}-{b}x{m}x{n}x{k}", make)

    return [row(16, 128, 512, 2688, BF16, BF16), row(16, 128, 512, 2688, FP16, FP32)]


def bmm_fp8_real():
    def row(b, m, n, k, da, db, out_dtype, a_kind, b_kind, why):
        def make(name):
            A, B = fp8(b, m, k, dtype=da), col_major(fp8(b, k, n, dtype=db))
            sa, sa_ref = _scale(a_kind, b, m, rows_last=False)
            sb, sb_ref = _scale(b_kind, b, n, rows_last=True)
            if (
                why == "batch-strided-out"
            ):  # every other (m, n) block of a buffer: TMA stores stop at each batch
                out = poisoned(b, 2, m, n, dtype=out_dtype)[:, 0]
            else:
                out = poisoned(b, m, n, dtype=out_dtype)
            expected = on_oracle_device(oracle_bmm, A, B, sa_ref, sb_ref)
            return _sample(name, (A, B, sa, sb, out_dtype), {"out": out}, expected)

        return real(f"real-{why}-{da}x{db}-{out_dtype}-{a_kind}-{b_kind}-{b}x{m}x{n}x{k}", make)

    return [
        row(1, 48, 10304, 2688, E4M3, E4M3, BF16, "0d", "0d", "linear"),  # one batch: cuBLASLt
        row(1, 1, 2112, 7168, E5M2, E5M2, FP16, "0d", "0d", "linear-e5m2"),  # no cuBLASLt e5m2 pair
        row(128, 64, 512, 128, E4M3, E4M3, BF16, "0d", "0d", "absorb-q"),  # sglang's MLA absorb
        row(128, 1, 512, 128, E4M3, E4M3, BF16, "1", "1", "absorb-q-decode"),
        row(128, 300, 128, 512, E4M3, E4M3, BF16, "0d", "chan_row", "absorb-v"),
        row(8, 96, 256, 512, E4M3, E4M3, BF16, "chan_col", "chan_row", "channelwise"),
        row(16, 96, 384, 256, E4M3, E4M3, FP16, "0d", "0d", "batch-strided-out"),
    ]  # fmt: skip


def groupwise_real():
    def row(m, n, k, mode, gran, out_dtype, out_kind, slow=False):
        def make(name):
            gm, gn, gk = GRANULARITY[gran]
            a, b = fp8(m, k), fp8(n, k)
            sa, sb = pow2(math.ceil(m / gm), math.ceil(k / gk)), pow2(math.ceil(n / gn), math.ceil(k / gk))
            stored = (sa, sb) if mode == "K" else (sa.t().contiguous(), sb.t().contiguous())
            o = (
                poisoned(m, n, dtype=out_dtype)
                if out_kind == "poison"
                else strided_out(m, n, dtype=out_dtype)
            )
            kwargs = {"scale_granularity_mnk": (gm, gn, gk), "out": o}
            expected = on_oracle_device(oracle_groupwise, a, b, sa, sb, gm, gn, gk)
            yardstick = _cublas_yardstick(a, b, sa, sb, gm, out_dtype)
            return _sample(name, (a, b, *stored, mode), kwargs, expected, yardstick=yardstick)

        return real(f"real-{mode}-{gran}-{out_dtype}-{out_kind}-{m}x{n}x{k}", make, slow)

    def fp8_output(m, n, k):
        def make(name):
            a, b = fp8(m, k), fp8(n, k)
            sa, sb = pow2(m, math.ceil(k / 128)), pow2(math.ceil(n / 128), math.ceil(k / 128))
            scale = torch.full((m, math.ceil(n / 128)), float("nan"))
            expected = on_oracle_device(oracle_groupwise, a, b, sa, sb, 1, 128, 128)
            return _sample(name, (a, b, sa, sb, "K"), {"output_scale": scale}, expected, output_scale=scale)

        return real(f"real-fp8-output-{m}x{n}x{k}", make)

    return [
        row(1, 7168, 2048, "K", "row", BF16, "poison"),  # decode
        row(64, 2112, 7168, "MN", "row", BF16, "poison"),  # sglang's MN-major scales
        row(300, 24576, 1536, "K", "block", BF16, "poison"),
        row(100, 2112, 200, "K", "row", FP16, "poison"),  # k % 128: no cuBLASLt, a partial K block
        row(64, 1000, 7168, "K", "row", BF16, "poison"),  # n % 16
        row(257, 384, 208, "MN", "row", BF16, "strided"),  # m past a tile, k / 128 not whole
        row(4096 + 33, 2112, 1536, "K", "block", FP16, "strided"),  # 128-row A blocks past a tile
        row(4096, 4096, 7168, "MN", "block", BF16, "poison", slow=True),  # prefill
        fp8_output(256, 2112, 7168),
    ]


def deepgemm_ids(group_rows, pad_rows=128):
    """Each group's rows padded with -1 up to a multiple of 128 (DeepGEMM's layout)."""
    parts = []
    for g, rows in enumerate(group_rows):
        parts += [torch.full((rows,), g), torch.full((-rows % pad_rows,), -1)]
    return torch.cat(parts).int()


def contiguous_real():
    def row(groups, n, k, ids_of, why):
        def make(name):
            ids = ids_of()
            m, kb = ids.numel(), math.ceil(k / 128)
            a, b = fp8(m, k), fp8(groups, n, k)
            sa, sb = pow2(m, kb), pow2(groups, math.ceil(n / 128), kb)
            valid = ((ids >= 0) & (ids < groups))[:, None].expand(m, n)
            kwargs = {"out": poisoned(m, n, dtype=BF16)}
            expected = on_oracle_device(oracle_contiguous, a, b, sa, sb, ids)
            return _sample(name, (a, b, sa, sb, ids), kwargs, expected, valid)

        return real(f"real-{why}-G{groups}-{n}x{k}", make)

    return [
        row(5, 4096, 7168, lambda: deepgemm_ids([128, 200, 0, 384, 77]), "padded-empty-group"),
        # ids in any order, -1 and ids >= G: a row tile holding several groups
        row(4, 256, 512, lambda: torch.randint(-1, 6, (1000,), dtype=torch.int32), "ragged-ids"),
    ]


def masked_real():
    def row(groups, m, n, k, slow=False):
        def make(name):
            masked_m = torch.randint(1, m, (groups,), dtype=torch.int32)
            masked_m[0], masked_m[-1] = 0, m  # an empty group and a full one
            kb = math.ceil(k / 128)
            a, b = fp8(groups, m, k), fp8(groups, n, k)
            sa, sb = pow2(groups, m, kb), pow2(groups, math.ceil(n / 128), kb)
            valid = (torch.arange(m)[None, :] < masked_m[:, None])[..., None].expand(groups, m, n)
            expected_m = max(1, min(int(masked_m.float().mean()) + 1, m))
            kwargs = {"out": poisoned(groups, m, n, dtype=BF16)}
            expected = on_oracle_device(oracle_masked, a, b, sa, sb, masked_m)
            return _sample(name, (a, b, sa, sb, masked_m, expected_m), kwargs, expected, valid)

        return real(f"real-G{groups}-{m}x{n}x{k}", make, slow)

    return [row(8, 256, 4096, 7168), row(4, 1000, 7168, 2048, slow=True)]


def blockscaled_real():
    def row(m, n, k, mode, slow=False):
        def make(name):
            a, b = fp8(m, k), fp8(n, k)
            sa, sb = (
                pow2(math.ceil(m / 128), math.ceil(k / 128)),
                pow2(math.ceil(n / 128), math.ceil(k / 128)),
            )
            stored = (sa, sb) if mode == "K" else (sa.t().contiguous(), sb.t().contiguous())
            expected = on_oracle_device(oracle_groupwise, a, b, sa, sb, 128, 128, 128)
            return _sample(name, (a, b, *stored, mode), {"out": poisoned(m, n, dtype=BF16)}, expected)

        return real(f"real-{mode}-{m}x{n}x{k}", make, slow)

    return [row(300, 2112, 7168, "K"), row(128, 7168, 2048, "MN"), row(4096, 4096, 7168, "MN", slow=True)]


# (name, offsets, rows, n, k, scale major, block_m, dtypes, out dtype, strided out, kwargs, slow)
GROUP_REAL_CASES = [
    ("real-eight-groups-of-4-rows", list(range(0, 33, 4)), 32, 7168, 2048, "K", 1, (E4M3, E4M3), BF16, False, {}, False),
    ("real-block-128-untouched-rows", [8, 300, 301, 777], 800, 2112, 7168, "MN", 128, (E4M3, E4M3), BF16, False, {},
     False),
    ("real-e5m2-fp16", [0, 100, 612], 612, 2048, 1536, "K", 1, (E5M2, E4M3), FP16, False, {}, False),
    ("real-prefill-empty-groups", [0, 256, 256, 1000, 1004, 2048], 2048, 4096, 7168, "MN", 1, (E4M3, E4M3), BF16,
     False, {}, True),
]  # fmt: skip


def group_gemm_real():
    return [
        real(
            case[0], lambda name, case=case: group_gemm_sample(*case[:-1], oracle=on_oracle_device), case[-1]
        )
        for case in GROUP_REAL_CASES
    ]


BLOCKSCALE_REAL_CASES = [
    (1, 7168, 2048, BF16, E4M3, "block", None, BF16),  # decode, the activation quantized inside
    (16, 2112, 7168, E4M3, E4M3, "token", "padded", BF16),
    (64, 24576, 1536, BF16, BF16, None, None, BF16),
    (300, 4096, 7168, BF16, E4M3, "token", None, BF16),
    (48, 2112, 7168, BF16, E4M3, "block", None, FP16),
]


def blockscale_real():
    def make(case):
        return lambda name: blockscale_sample(case, oracle=on_oracle_device)

    return [real("real-" + "-".join(str(v) for v in case), make(case)) for case in BLOCKSCALE_REAL_CASES]


# ----------------------------------------------------------------------------- the table


def compare(result, call, slack=0.0, tensor_cores=False) -> None:
    """``result`` against the oracle by the rule of its dtype (``oracles``), plus ``slack`` x rms.

    On tensor cores a block-scaled FP8 call with a ``yardstick`` passes past the bound where
    cuBLASLt on the same inputs is no closer to the oracle: Hopper keeps fewer bits than float32
    inside each 128-deep K block, and on a real-size fp16 output (8.7M elements) one or two land
    a fraction of an ulp past it, in every library (``oracles.assert_matches_or_no_worse``)."""
    ref, ref_abs = call.oracle()
    assert tuple(result.shape) == tuple(ref.shape), (tuple(result.shape), tuple(ref.shape))
    output_scale = call.kwargs.get("output_scale")
    yardstick = call.extra.get("yardstick")
    if output_scale is not None:
        assert result.dtype == E4M3
        assert_fp8_output(result.cpu(), output_scale.cpu(), ref, ref_abs, slack)
    elif tensor_cores and yardstick is not None:
        assert_matches_or_no_worse(result.cpu(), ref, ref_abs, slack, yardstick)
    else:
        assert_matches(result.cpu(), ref, ref_abs, call.extra.get("valid"), slack)


def _all(*makers):
    return lambda: [row for make in makers for row in make()]


# The kernel tiers of the ops whose CUDA path reaches a Gluon kernel (``use_gluon`` in
# ``flashinfer/gemm/_cuda.py``: bmm_fp8, the dense, grouped and segment GEMMs, and the two siblings
# that call the dense one); bmm_bf16 is cuBLAS only.
TIERS = ("gluon", "tl")

# The tensors every scaled GEMM requires (a None there gets an error row naming it).
OPERANDS = ("a", "b", "a_scale", "b_scale")

OPS = [
    OpInfo(
        "bmm_bf16",
        G.bmm_bf16,
        entries(bmm_bf16_samples),
        _all(bmm_bf16_errors, bmm_bf16_bad_inputs),
        compare,
        ("cudnn", "cutlass", "cutile", "tgv", "auto", "mudnn"),
        interpreted=False,  # cuBLAS
        cuda_samples=bmm_bf16_real,
        required=("A", "B"),
    ),
    OpInfo(
        "bmm_fp8",
        G.bmm_fp8,
        entries(bmm_fp8_samples),
        _all(bmm_fp8_errors, bmm_fp8_bad_inputs),
        compare,
        ("cudnn", "cublas", "cutlass", "auto", "mudnn"),
        tiers=TIERS,
        cuda_samples=bmm_fp8_real,
        required=("A", "B", "A_scale", "B_scale"),
    ),
    OpInfo(
        "gemm_fp8_nt_groupwise",
        G.gemm_fp8_nt_groupwise,
        entries(groupwise_samples),
        _all(groupwise_errors, groupwise_bad_inputs),
        compare,
        ("cutlass", "trtllm", "cutile", "auto", "mudnn", "mubin"),
        tiers=TIERS,
        cuda_samples=groupwise_real,
        required=OPERANDS,
    ),
    OpInfo(
        "group_deepgemm_fp8_nt_groupwise",
        G.group_deepgemm_fp8_nt_groupwise,
        entries(contiguous_samples),
        _all(contiguous_errors, grouped_bad_inputs),
        compare,
        tiers=TIERS,
        cuda_samples=contiguous_real,
        required=(*OPERANDS, "m_indices"),
    ),
    OpInfo(
        "batch_deepgemm_fp8_nt_groupwise",
        G.batch_deepgemm_fp8_nt_groupwise,
        entries(masked_samples),
        _all(masked_errors, masked_bad_inputs),
        compare,
        tiers=TIERS,
        cuda_samples=masked_real,
        required=(*OPERANDS, "masked_m"),
    ),
    OpInfo(
        "gemm_fp8_nt_blockscaled",
        G.gemm_fp8_nt_blockscaled,
        entries(blockscaled_samples),
        blockscaled_errors,
        compare,
        mate_call=blockscaled_mate_call,
        tiers=TIERS,
        cuda_samples=blockscaled_real,
        required=OPERANDS,
    ),
    OpInfo(
        "group_gemm_fp8_nt_groupwise",
        G.group_gemm_fp8_nt_groupwise,
        entries(group_gemm_samples),
        group_gemm_errors,
        compare,
        ("trtllm", "cutile", "auto", "mubin"),
        mate_call=group_gemm_mate_call,
        tiers=TIERS,
        cuda_samples=group_gemm_real,
        required=(*OPERANDS, "m_indptr"),
    ),
    OpInfo(
        "fp8_blockscale_gemm_sm90",
        G.fp8_blockscale_gemm_sm90,
        entries(blockscale_samples),
        blockscale_errors,
        blockscale_compare,
        mate_call=blockscale_mate_call,
        tiers=TIERS,
        cuda_samples=blockscale_real,
        required=("input", "weight"),
        replayed=True,
    ),
]
OPS_BY_NAME = {op.name: op for op in OPS}
