"""The GEMMs of one DeepSeek-V3 decode layer on an NVIDIA GPU: ours, DeepGEMM's and cuBLASLt's.

Sections (``--section``, both by default):

``layer``
    At each ``B`` tokens (``--batches``, default 1 8 32 64 128) the layer's GEMMs: the
    fused q_a/kv_a projection (m=B, n=2112, k=7168), q_b (n=24576, k=1536), the two MLA absorptions
    (``bmm_fp8`` over 128 heads, B x 128 @ 128 x 512 and B x 512 @ 512 x 128, per-tensor scales,
    weights column-major: SGLang's call, callers.md G1), o_proj (n=7168, k=16384), the shared
    expert (n=4096, k=7168, then n=7168, k=2048) and the routed experts' masked gate/up and down
    over 32 local experts (``batch_deepgemm_fp8_nt_groupwise``; tokens per expert drawn from a
    Poisson law of mean B/4, ``expected_m = max(1, B // 4)``). Three layers in one process: ours
    (the public API), DeepGEMM's (its dense and masked kernels; ``torch.bmm`` BF16 for the
    absorptions, as DeepGEMM has no bmm) and cuBLASLt's (``torch._scaled_mm`` 1x128 / 128x128
    blockwise, m padded to a multiple of 4 where B is not one; ``torch.bmm`` BF16; no masked MoE).
    Each GEMM alone in a CUDA graph (``rotating`` input sets), then each layer in one graph, whole
    and without the MoE (the part all three have).
``moe``
    The masked MoE down projection alone (n=7168, k=2048, 32 experts) at expected_m 1 ... 64, ours
    and DeepGEMM's, each in a CUDA graph: the bytes of the experts that have a token (weights and
    their scales) over the time, beside the device-to-device copy bandwidth of the same run.

Each output is checked against ours first (relative Frobenius error on the rows both define;
above 1e-2 the run stops); DeepGEMM's kernels are compiled ahead, in parallel. Timing:
``_harness.cudagraph_ms`` (medians of CUDA-graph replays). Writes ``deepseek_layer.json`` to
``--out``; RESULTS.md reads the newest ``results/deepseek_layer_*.json``. On the GPU machine, after
``bash benchmarks/deepgemm_anchor.sh setup``::

    PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src:benchmarks/.anchor/deepgemm \\
        python3 benchmarks/deepseek_layer.py --out $OUT
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import namedtuple
from pathlib import Path

import _deepgemm
import torch
from _harness import (
    BF16,
    OUT,
    ceil_div,
    copy_bandwidth,
    cublas_block_scales,
    fp8,
    require_cuda_gpu,
    rotating,
    run_meta,
    write_json,
)
from _harness import cudagraph_ms as bench

BATCHES = (1, 8, 32, 64, 128)
MOE_EXPECTED_M = (1, 2, 4, 8, 16, 32, 64)
EXPERTS, HEADS, TOL = 32, 128, 1e-2
MOE_UP, MOE_DOWN = (4096, 7168), (7168, 2048)  # (n, k) of the routed experts' two GEMMs
IMPLS = ("ours", "deepgemm", "cublaslt")

# one GEMM: ``make()`` builds an input set, returning its zero-argument calls by impl (None: not
# run), ``out`` and ``valid`` (the rows all define); ``calls`` names what each impl calls, ``dg`` is
# its ``_deepgemm.precompile`` shape, ``nbytes`` what a call reads and writes, ``info`` JSON extras
Gemm = namedtuple("Gemm", "name shape make calls dg nbytes flops info")


def scales(*shape):
    """Random positive float32 scales on the GPU."""
    return torch.rand(*shape, device="cuda") + 0.5


def dense(name, B, n, k) -> Gemm:
    """``gemm_fp8_nt_groupwise`` at m=B: 1x128 activation, 128x128 weight scales (K-major), BF16 out."""
    m4 = ceil_div(B, 4) * 4  # cuBLASLt's block scaling needs m % 4 == 0: its call computes m4 rows

    def make():
        from flashinfer.gemm import gemm_fp8_nt_groupwise

        a, b = fp8(m4, k), fp8(n, k)
        a_scale, b_scale = scales(m4, k // 128), scales(ceil_div(n, 128), k // 128)
        sa, sb = cublas_block_scales(a_scale, b_scale)
        out = torch.empty(m4, n, device="cuda", dtype=BF16)
        x, xs, y = a[:B], a_scale[:B], out[:B]
        return {"ours": lambda: gemm_fp8_nt_groupwise(x, b, xs, b_scale, "K", out=y),
                "deepgemm": _deepgemm.dense(x, b, xs, b_scale, y),
                "cublaslt": lambda: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=BF16, out=out), "out": y}  # fmt: skip

    pad = "" if m4 == B else f", m padded to {m4}"
    calls = {"ours": "gemm_fp8_nt_groupwise", "deepgemm": "gemm_fp8_fp8_bf16_nt",
             "cublaslt": f"_scaled_mm blockwise{pad}"}  # fmt: skip
    return Gemm(name, f"m={B} n={n} k={k}", make, calls, ("dense", B, n, k), n * k + B * k + 2 * B * n, 2 * B * n * k, {})  # fmt: skip


def absorb(name, B, k, n) -> Gemm:
    """``bmm_fp8`` over 128 heads as SGLang calls it: A (H, B, k) e4m3, the weight (H, k, n) column-major
    (``transpose(1, 2)`` of a contiguous (H, n, k)), float32 [1] scales, dtype and ``out`` positional."""

    def make():
        from flashinfer.gemm import bmm_fp8

        A, W, sa, sw = fp8(HEADS, B, k), fp8(HEADS, n, k).transpose(1, 2), scales(1), scales(1)
        out = torch.empty(HEADS, B, n, device="cuda", dtype=BF16)
        A16, W16 = A.to(BF16), (W.float() * (sa * sw)).to(BF16)  # as a BF16 engine holds them

        def bmm():
            torch.bmm(A16, W16, out=out)

        def ours():
            bmm_fp8(A, W, sa, sw, BF16, out)

        return {"ours": ours, "deepgemm": bmm, "cublaslt": bmm, "out": out}

    calls = {"ours": "bmm_fp8", "deepgemm": "torch.bmm BF16 (DeepGEMM has no bmm)", "cublaslt": "torch.bmm BF16"}  # fmt: skip
    shape, nbytes = f"{HEADS} x ({B} x {k}) @ ({k} x {n})", HEADS * (B * k + k * n + 2 * B * n)
    return Gemm(name, shape, make, calls, None, nbytes, 2 * HEADS * B * k * n, {})


def masked(name, n, k, expected_m, tokens, max_m) -> Gemm:
    """``batch_deepgemm_fp8_nt_groupwise``: 32 experts of ``max_m`` rows, ``tokens[e]`` valid; no cuBLASLt."""

    def make():
        from flashinfer.gemm import batch_deepgemm_fp8_nt_groupwise
        from flashinfer.gemm._args import GroupedMasked
        from flashinfer.gemm.kernels.blockwise import gluon_fp8_masked_decode_gemm

        a, b = fp8(EXPERTS, max_m, k), fp8(EXPERTS, n, k)
        a_scale, b_scale = scales(EXPERTS, max_m, k // 128), scales(EXPERTS, n // 128, k // 128)
        out = torch.empty(EXPERTS, max_m, n, device="cuda", dtype=BF16)
        args = (a, b, a_scale, b_scale, tokens.cuda(), expected_m)

        def tile(config):  # the decode-MoE kernel itself, on a given tile
            gluon_fp8_masked_decode_gemm.group_gemm_masked(GroupedMasked(*args, out), config)

        return {"ours": lambda: batch_deepgemm_fp8_nt_groupwise(*args, out=out), "tile": tile,
                "deepgemm": _deepgemm.masked(*args, out), "cublaslt": None, "out": out,
                "valid": torch.arange(max_m, device="cuda") < args[4][:, None]}  # fmt: skip

    rows = tokens.tolist()
    active = sum(t > 0 for t in rows)
    weights = active * (n * k + 4 * (n // 128) * (k // 128))  # the experts with a token: weights, scales
    calls = {"ours": "batch_deepgemm_fp8_nt_groupwise", "deepgemm": "m_grouped_gemm_fp8_fp8_bf16_nt_masked", "cublaslt": None}  # fmt: skip
    info = dict(expected_m=expected_m, max_m=max_m, tokens=rows, active_experts=active, weight_bytes=weights)
    return Gemm(name, f"{EXPERTS} x {max_m} rows n={n} k={k}", make, calls, ("masked", max_m, n, k, EXPERTS, expected_m),
                weights + sum(rows) * (k + 2 * n), 2 * sum(rows) * n * k, info)  # fmt: skip


def routed(mean, max_m, seed):
    """Tokens per local expert: Poisson draws of ``mean`` (a CPU generator, fixed seed), at most ``max_m``."""
    draws = torch.poisson(torch.full((EXPERTS,), float(mean)), generator=torch.Generator().manual_seed(seed))
    return draws.clamp(max=max_m).to(torch.int32)


def capacity(expected_m, align, shapes=(MOE_UP, MOE_DOWN)) -> int:
    """``max_m``: 4 x ``expected_m`` rows (8 at least) in whole 64-row blocks, and in whole blocks of
    ``align(expected_m, n, k)``, DeepGEMM's BLOCK_M (64, 128, 256), where larger: its masked kernel
    asserts ``max_m % BLOCK_M == 0`` when ``max_m > BLOCK_M``."""
    max_m = ceil_div(max(8, 4 * expected_m), 64) * 64
    for n, k in shapes:
        block_m = align(expected_m, n, k)
        max_m = ceil_div(max_m, block_m) * block_m if max_m > block_m else max_m
    return max_m


def deepgemm_block_m(expected_m, n, k) -> int:
    """The BLOCK_M of DeepGEMM's masked kernel at this hint and shape (its ``get_best_configs``)."""
    from deep_gemm.jit_kernels.gemm import get_best_configs
    from deep_gemm.jit_kernels.utils import get_num_sms

    return get_best_configs(expected_m, n, k, EXPERTS, get_num_sms(), is_grouped_masked=True)[1]


def layer_cases(B, align=lambda expected_m, n, k: 64) -> list:
    """The layer's GEMMs at ``B`` tokens, in the order a decode step runs them (no GPU touched)."""
    expected_m = max(1, B // 4)
    max_m = capacity(expected_m, align)
    tokens = routed(B / 4, max_m, seed=B)  # one routing for both MoE GEMMs
    return [dense("q_a/kv_a", B, 2112, 7168), dense("q_b", B, 24576, 1536),
            absorb("q_nope absorb", B, 128, 512), absorb("out absorb", B, 512, 128),
            dense("o_proj", B, 7168, 16384), dense("shared gate/up", B, 4096, 7168),
            dense("shared down", B, 7168, 2048), masked("MoE gate/up", *MOE_UP, expected_m, tokens, max_m),
            masked("MoE down", *MOE_DOWN, expected_m, tokens, max_m)]  # fmt: skip


def moe_cases(align=lambda expected_m, n, k: 64) -> list:
    """The masked MoE down projection at each expected_m of ``MOE_EXPECTED_M``."""
    rooms = {e: capacity(e, align, (MOE_DOWN,)) for e in MOE_EXPECTED_M}
    return [masked("MoE down", *MOE_DOWN, e, routed(e, m, seed=1000 + e), m) for e, m in rooms.items()]


def prepare(gemm):
    """``gemm``'s input sets (``rotating``), ``{impl: error against ours}`` on the first; raises above TOL."""
    sets = rotating(gemm.make, max(gemm.nbytes, 1 << 20))
    first, errors = sets[0], {}
    for impl in IMPLS[1:]:
        valid = first.get("valid")
        if first[impl] is None or (valid is not None and not bool(valid.any())):
            continue  # not run, or no token routed to any expert: nothing to compare
        errors[impl] = _deepgemm.rel_error(first["ours"], first[impl], first["out"], valid)
        if not errors[impl] <= TOL:  # NaN fails too
            raise RuntimeError(f"{gemm.name} {gemm.shape}: {impl} is {errors[impl]:.2e} from ours (> {TOL})")
    print(f"check {gemm.name:14s} {gemm.shape:32s} " + (" ".join(f"{k} {v:.1e}" for k, v in errors.items()) or "no rows"), flush=True)  # fmt: skip
    return sets, errors


def timed(rows, row, call, sets):
    """Append ``row`` with ``us``, the median of ``call(d)`` over ``sets`` replayed in a CUDA graph."""
    row["us"] = bench(call, sets) * 1e3
    rows.append(row)
    err = row.get("rel_err_vs_ours")
    where = f"B={row['batch']}" if "batch" in row else f"expected_m={row['expected_m']}"
    print(f"{row['section']:5s} {where:13s} {row['gemm']:17s} {row['shape']:32s} {row['impl']:8s} {row['us']:8.1f} us"
          + (f"  err {err:.1e}" if err is not None else ""), flush=True)  # fmt: skip


def layer_section(cases, rows, save):
    for B, gemms in cases.items():
        layer_batch(B, gemms, rows)  # its input sets are freed on return
        torch.cuda.empty_cache()
        save()


def layer_batch(B, gemms, rows):
    """Each GEMM alone over its input sets, then each layer's GEMMs (on their first sets) in one graph."""
    prepared = [(g, *prepare(g)) for g in gemms]
    for g, sets, errors in prepared:
        for impl in (impl for impl in IMPLS if g.calls[impl] is not None):
            row = dict(section="layer", batch=B, gemm=g.name, shape=g.shape, impl=impl, call=g.calls[impl],
                       rel_err_vs_ours=errors.get(impl), bytes=g.nbytes, flops=g.flops, **g.info)  # fmt: skip
            timed(rows, row, lambda d, impl=impl: d[impl](), sets)
    dense_part = [p for p in prepared if p[0].calls["cublaslt"] is not None]
    for part, chosen in (("whole layer", prepared), ("layer without MoE", dense_part)):
        for impl in IMPLS:
            calls = [sets[0][impl] for _, sets, _ in chosen]
            if all(calls):
                row = dict(section="layer", batch=B, gemm=part, shape=f"{len(calls)} GEMMs", impl=impl,
                           call="one CUDA graph", bytes=sum(g.nbytes for g, _, _ in chosen))  # fmt: skip
                timed(rows, row, lambda _, calls=calls: [call() for call in calls], [None])


def tile_candidates(expected_m) -> list:
    """The decode-MoE kernel's tiles around its pick: the pick's and twice its tokens, 4 to 12 stages."""
    from flashinfer.gemm.kernels.blockwise.gluon_fp8_masked_decode_gemm import MaskedDecodeConfig, pick_config

    pick = pick_config(expected_m)
    tokens = {pick.block_t, min(128, 2 * pick.block_t)}
    return [MaskedDecodeConfig(128, t, s) for t in sorted(tokens) for s in (4, 6, 8, 10, 12)
            if s * (128 + t) * 132 <= 200 * 1024]  # fmt: skip


def moe_section(cases, rows, save, copy_bps, tiles):
    for g in cases:
        sets, errors = prepare(g)
        calls = {impl: lambda d, impl=impl: d[impl]() for impl in ("ours", "deepgemm")}
        if tiles:
            for c in tile_candidates(g.info["expected_m"]):
                calls[f"decode-MoE {c.block_w}x{c.block_t}, {c.stages} stages"] = lambda d, c=c: d["tile"](c)
        for impl, call in calls.items():
            row = dict(section="moe", gemm=g.name, shape=g.shape, impl=impl, call=g.calls.get(impl, "the kernel, this tile"),
                       rel_err_vs_ours=errors.get(impl), **g.info)  # fmt: skip
            timed(rows, row, call, sets)
            row["gbps"] = g.info["weight_bytes"] / row["us"] / 1e3
            row["of_copy"] = row["gbps"] * 1e9 / copy_bps
        del sets  # before the next case's
        save()


def table(rows) -> str:
    """The short table printed last: per batch and GEMM the three layers' us; per expected_m the MoE."""

    def cell(us, impl):
        return "n/a" if impl not in us else f"{us[impl]:.1f}" + ("" if impl == "ours" else f" ({us[impl] / us['ours']:.2f}x)")  # fmt: skip

    lines = [f"{'B':>4} {'GEMM':18s} {'ours us':>9s} {'DeepGEMM us (/ours)':>20s} {'cuBLASLt us (/ours)':>20s}"]  # fmt: skip
    layer = [r for r in rows if r["section"] == "layer"]
    for key in dict.fromkeys((r["batch"], r["gemm"]) for r in layer):
        us = {r["impl"]: r["us"] for r in layer if (r["batch"], r["gemm"]) == key}
        lines.append(f"{key[0]:4d} {key[1]:18s} " + " ".join(f"{cell(us, i):>{w}s}" for i, w in zip(IMPLS, (9, 20, 20))))  # fmt: skip
    moe = [r for r in rows if r["section"] == "moe"]
    if moe:
        lines.append(f"\n{'expected_m':>10s} {'experts':>7s} {'ours us (GB/s, of copy)':>26s} {'DeepGEMM us (GB/s)':>20s}")  # fmt: skip
    for e in dict.fromkeys(r["expected_m"] for r in moe):
        ours, theirs = (
            next(r for r in moe if (r["expected_m"], r["impl"]) == (e, i)) for i in ("ours", "deepgemm")
        )
        lines.append(f"{e:10d} {ours['active_experts']:7d} {ours['us']:9.1f} ({ours['gbps']:5.0f}, {ours['of_copy']:4.0%}) "
                     f"{theirs['us']:11.1f} ({theirs['gbps']:5.0f})")  # fmt: skip
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(OUT)))
    parser.add_argument("--section", nargs="+", choices=("layer", "moe"), default=["layer", "moe"])
    parser.add_argument("--batches", nargs="+", type=int, default=BATCHES, help="layer: the tokens B")
    parser.add_argument("--moe-expected-m", nargs="+", type=int, help="moe: only these expected_m")
    parser.add_argument(
        "--moe-tiles", action="store_true", help="moe: also the decode-MoE kernel on tiles around its pick"
    )
    args = parser.parse_args()
    require_cuda_gpu("deepseek_layer.py")
    try:
        print(_deepgemm.describe(), flush=True)
    except Exception as error:  # not prepared, not importable or no compiler: say so before timing
        sys.exit(f"deepseek_layer.py needs DeepGEMM: {error}")
    layer = {B: layer_cases(B, deepgemm_block_m) for B in args.batches} if "layer" in args.section else {}
    moe = moe_cases(deepgemm_block_m) if "moe" in args.section else []
    if args.moe_expected_m:
        moe = [g for g in moe if g.info["expected_m"] in args.moe_expected_m]
    _deepgemm.precompile(list(dict.fromkeys(g.dg for g in [*sum(layer.values(), []), *moe] if g.dg)))
    copy_bps = copy_bandwidth() if moe else None
    meta = run_meta(called_through="public API (flashinfer.gemm)", deepgemm=_deepgemm.version(),
                    copy_gbps=copy_bps and copy_bps / 1e9)  # fmt: skip
    print(meta, flush=True)
    torch.manual_seed(0)
    rows, path = [], Path(args.out, "deepseek_layer.json")

    def save():  # after every batch: a run cut short keeps what it measured
        write_json(path, {"meta": meta, "rows": rows})

    layer_section(layer, rows, save)
    moe_section(moe, rows, save, copy_bps, args.moe_tiles)
    print(f"wrote {path}\n\n{table(rows)}", flush=True)


if __name__ == "__main__":
    main()
