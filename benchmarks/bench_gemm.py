"""GEMM benchmarks on an NVIDIA GPU: the public API and each kernel tier next to their anchors.

Sections, on DeepSeek-V3 shapes: ``groupwise`` (``gemm_fp8_nt_groupwise``, K- and MN-major scales,
against ``torch._scaled_mm`` blockwise with scales already in cuBLASLt's layout and per-tensor),
``bmm_fp8`` (b = 1, against ``_scaled_mm`` per-tensor and ``torch.bmm`` BF16), ``mla`` (the MLA
absorb products, 128 heads: ``bmm_fp8`` and ``bmm_bf16`` against ``torch.bmm`` BF16), ``bf16``
(``bmm_bf16``, BF16 and FP32 output), ``grouped`` (contiguous, ``m_indptr`` and masked, against the
dense blockwise ``_scaled_mm`` of equal FLOPs), ``blockscale`` (``fp8_blockscale_gemm_sm90``, BF16
and FP8 input, against ``_scaled_mm`` blockwise on operands already quantized) and ``reference``
(the float32 reference). Each row names its tier: ``api`` (the public API picks), ``gluon`` and
``tl`` (our kernels called directly), ``cublas``, ``reference``, ``deepgemm``.

``--upstream`` times the importable ``flashinfer`` as upstream's (``upstream_anchor.sh``);
``--compare`` sets ours against such a run per shape. ``--deepgemm`` adds DeepGEMM to groupwise and
grouped (``deepgemm_anchor.sh``, ``_deepgemm.py``): same input sets, its scale layout prepared
ahead, its output checked once against ours; our rows then carry ``vs_deepgemm``, its time over
ours. ``--tiles`` also times every Gluon tile (the ``Gluon kernel`` row is the one ``pick_config``
picks, named in ``config``): with ``--deepgemm``, RESULTS.md's tables of the Gluon GEMMs.

Timing: ``_harness.cudagraph_ms`` (CUDA-graph replays, input sets past the L2, median); the floor
is ``max(bytes / HBM bandwidth, FLOPs / peak)``. Writes ``gemm.json`` (``gemm_upstream.json`` with
``--upstream``) to ``--out``; the commands of each table are in RESULTS.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import traceback
from pathlib import Path

import _deepgemm
import torch
from _harness import (
    BF16,
    HBM_BYTES_PER_S,
    OUT,
    PEAK_FLOPS,
    ceil_div,
    cublas_block_scales,
    fp8,
    grouped_inputs,
    require_cuda_gpu,
    rotating,
    run_meta,
    write_json,
)
from _harness import cudagraph_ms as bench

DEEPSEEK_NK = [(7168, 2048), (2112, 7168), (24576, 1536), (4096, 7168), (7168, 16384)]
DEEPSEEK_M = [1, 16, 64, 128, 512, 4096]
BLOCKSCALE_NK = [(7168, 2048), (2112, 7168), (24576, 1536), (4096, 7168)]
BLOCKSCALE_M = [1, 8, 16, 32, 64, 128, 512, 4096]
GROUPED_NK = [(4096, 7168), (7168, 2048)]
GROUPED_SIZES = [(4, 1024), (8, 512), (8, 1024), (16, 256), (32, 256), (4, 8192), (32, 512)]
UPSTREAM_SECTIONS = ("mla", "bmm_fp8", "blockscale")  # what upstream's package has to time


class Table:
    """One run: its settings, and its rows (timings, throughput, anchors, the floor) printed as they come.

    Parameters
    ----------
    impls : str
        What our rows call (``public API -> _cuda``, or upstream's version).
    who : str
        ``ours`` or ``upstream``: the first word of the rows of the importable package.
    deepgemm : DeepGEMMRows, optional
        DeepGEMM's rows (``--deepgemm``).
    tiles : bool
        Whether every Gluon tile is timed (``--tiles``).
    """

    def __init__(self, impls, who="ours", deepgemm=None, tiles=False):
        self.impls, self.who, self.deepgemm_rows, self.tiles = impls, who, deepgemm, tiles
        self.rows = []
        self.deepgemm = {}  # (section, shape, layout) -> DeepGEMM's ms, for our rows timed after it

    def add(self, section, shape, name, ms, anchor_ms=None, *, flops, bytes_moved, peak, tier="api", **extra):
        floor_ms = max(bytes_moved / HBM_BYTES_PER_S, flops / PEAK_FLOPS[peak]) * 1e3
        row = {"section": section, "shape": shape, "impl": name, "tier": tier, "ms": ms, "tflops": flops / ms / 1e9,
               "gbps": bytes_moved / ms / 1e6, "floor_ms": floor_ms,
               "vs_anchor": (anchor_ms / ms) if anchor_ms else None, **extra}  # fmt: skip
        # DeepGEMM's masked call is set against our masked rows, its dense or contiguous one against the others
        key = (section, shape, "masked" in name)
        if tier == "deepgemm":
            self.deepgemm[key] = ms
        elif key in self.deepgemm and name.startswith("ours"):
            row["vs_deepgemm"] = self.deepgemm[key] / ms
        self.rows.append(row)
        ratio = f"{row['vs_anchor']:6.2f}x" if anchor_ms else "       "
        if "vs_deepgemm" in row:
            ratio += f" {row['vs_deepgemm']:6.2f}x DeepGEMM"
        notes = "".join(f"  {k} {v:.1e}" for k, v in extra.items() if isinstance(v, float))
        print(
            f"{section:10s} {shape:34s} {name:26s} {tier:9s} {ms * 1e3:9.1f} us {row['tflops']:8.1f} TFLOP/s "
            f"{row['gbps']:8.1f} GB/s  floor {floor_ms * 1e3:8.1f} us  {ratio}{notes}",
            flush=True,
        )
        return ms

    def shape_rows(self, section, shape, flops, moved, peak="fp8"):
        """``add`` for the rows of one shape."""
        return functools.partial(self.add, section, shape, flops=flops, bytes_moved=moved, peak=peak)

    def tile_rows(self, row, name, call, sets, tiles, anchor):
        """``--tiles``: a row ``name TILE`` for each Gluon tile of ``tiles``, ``call(d, config)``
        timed over ``sets``."""
        for config in tiles if self.tiles else ():
            ms = bench(functools.partial(call, config=config), sets)
            row(f"{name} {tile_name(config)}", ms, anchor, tier="gluon", config=tile_name(config))


def tile_name(config) -> str:
    return f"{config.block_m}x{config.block_n}/{config.stages}"


class DeepGEMMRows:
    """``--deepgemm``: DeepGEMM's rows (tier ``deepgemm``), each on the input sets of one shape."""

    MAX_FAILURES = 3  # then the rest of the run goes without DeepGEMM (its JIT fails the same way)

    def __init__(self):
        self.failures = 0

    def precompile(self, shapes):
        if self.failures < self.MAX_FAILURES:
            try:
                _deepgemm.precompile(shapes)
            except Exception:  # the rows' own calls then report it
                traceback.print_exc()

    def add(self, row, name, make, sets, ours, valid=None):
        """Time ``make(d)()`` (DeepGEMM's call, its layout prepared by ``make``, once per input set)
        over ``sets`` as ``row`` (``Table.shape_rows``) ``name``, after checking it once against
        ``ours(d)`` on the first set's ``out`` (``valid(d)``: the rows both define); returns its ms,
        None when it failed."""
        if self.failures >= self.MAX_FAILURES:
            return None
        try:
            err = _deepgemm.attach(sets, make, ours, valid)
            ms = bench(lambda d: d["deepgemm"](), sets)
        except Exception:  # reported; our rows of this shape are still timed
            self.failures += 1
            print(f"{' '.join(row.args)} {name}: FAILED", flush=True)
            traceback.print_exc()
            return None
        finally:
            for d in sets:
                d.pop("deepgemm", None)
        return row(name, ms, tier="deepgemm", rel_err_vs_ours=err)


def gluon_tier():
    """The Gluon kernel modules (blockwise, bmm) where that tier runs on this GPU and Triton, else None."""
    from flashinfer._core.kernel_tier import gluon_supported

    if not gluon_supported(torch.cuda.current_device()):
        return None
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise
    from flashinfer.gemm.kernels.bmm import gluon_fp8_bmm

    return gluon_fp8_blockwise, gluon_fp8_bmm


def tier_kernels(op: str) -> list:
    """(name, tier, launcher, tiles) of each of our kernel tiers for ``op``: the Gluon kernel where
    it runs, and the portable tl kernel. Each launcher takes the tensors in the order of the op's
    record (``flashinfer.gemm._args``) and builds the record; the Gluon one also takes a fixed
    tile (``config=``) of ``tiles`` (grouped: the 128-row ones, DeepGEMM's group alignment)."""
    from flashinfer.gemm._args import Bmm, GroupedContiguous, GroupedMasked
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    def launchers(bmm, blockwise):
        return {
            "bmm": lambda A, B, A_scale, B_scale, out, **tile: bmm.fp8_bmm(
                Bmm(A, B, out, A_scale, B_scale), **tile
            ),
            "contiguous": lambda *tensors, **tile: blockwise.group_gemm_contiguous(
                GroupedContiguous(*tensors), **tile
            ),
            "masked": lambda *tensors, **tile: blockwise.group_gemm_masked(GroupedMasked(*tensors), **tile),
        }

    kernels = [("tl kernel", "tl", launchers(fp8_bmm, fp8_blockwise)[op], ())]
    gluon = gluon_tier()
    if gluon is not None:
        blockwise, bmm = gluon
        tiles = bmm.CONFIGS if op == "bmm" else [c for c in blockwise.CONFIGS if c.block_m == 128]
        kernels.insert(0, ("Gluon kernel", "gluon", launchers(bmm, blockwise)[op], tiles))
    return kernels


def groupwise_section(table, fg):
    from flashinfer.gemm._args import Groupwise
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    gluon = gluon_tier()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if table.deepgemm_rows is not None:
        table.deepgemm_rows.precompile([("dense", m, n, k) for n, k in DEEPSEEK_NK for m in DEEPSEEK_M])
    one = torch.ones((), device="cuda")
    for n, k in DEEPSEEK_NK:
        for m in DEEPSEEK_M:

            def make(m=m, n=n, k=k):
                a, b = fp8(m, k), fp8(n, k)
                a_scale = torch.rand(m, ceil_div(k, 128), device="cuda") + 0.5
                b_scale = torch.rand(ceil_div(n, 128), ceil_div(k, 128), device="cuda") + 0.5
                sa, sb = cublas_block_scales(a_scale, b_scale)
                out = torch.empty(m, n, device="cuda", dtype=BF16)
                # sglang's call (callers.md G5): MN-major (k/128, m) and (k/128, n/128) storage
                mn = dict(a_scale_mn=a_scale.t().contiguous(), b_scale_mn=b_scale.t().contiguous())
                return dict(a=a, b=b, a_scale=a_scale, b_scale=b_scale, sa=sa, sb=sb, out=out, **mn)

            sets = rotating(make, m * k + n * k)
            row = table.shape_rows(
                "groupwise", f"m={m} n={n} k={k}", 2 * m * n * k, m * k + n * k + 2 * m * n
            )

            def blockwise_fn(d):
                torch._scaled_mm(d["a"], d["b"].t(), d["sa"], d["sb"], out_dtype=BF16, out=d["out"])

            def tensorwise_fn(d):
                torch._scaled_mm(d["a"], d["b"].t(), one, one, out_dtype=BF16, use_fast_accum=True)

            def ours_fn(d):
                fg.gemm_fp8_nt_groupwise(d["a"], d["b"], d["a_scale"], d["b_scale"], "K", out=d["out"])

            def ours_mn_fn(d):
                fg.gemm_fp8_nt_groupwise(d["a"], d["b"], d["a_scale_mn"], d["b_scale_mn"], "MN", out=d["out"])

            def tier_fn(kernels, d, **tile):
                call = Groupwise(
                    d["a"], d["b"], d["a_scale"], d["b_scale"], False, False, 1, 128, 128, d["out"]
                )
                kernels.gemm_groupwise(call, **tile)

            def deepgemm_fn(d):
                return _deepgemm.dense(d["a"], d["b"], d["a_scale"], d["b_scale"], d["out"])

            anchor = None
            if m % 4 == 0:  # cuBLASLt's block scaling needs m % 4 == 0 (see _cuda)
                anchor = row("torch._scaled_mm blockwise", bench(blockwise_fn, sets), tier="cublas")
            row("torch._scaled_mm tensorwise", bench(tensorwise_fn, sets), tier="cublas")
            if table.deepgemm_rows is not None:  # before our rows, which carry their speedup over it
                table.deepgemm_rows.add(row, "DeepGEMM", deepgemm_fn, sets, ours_fn)
            if gluon is not None:
                glu, gluon_fn = gluon[0], functools.partial(tier_fn, gluon[0])
                picked = glu.pick_config(glu.DENSE.value, m, n, ceil_div(m, 128), num_sms, False)
                ms = bench(gluon_fn, sets)
                row("ours: Gluon kernel", ms, anchor, tier="gluon", config=tile_name(picked))
                tiles = [c for c in glu.CONFIGS if (m <= 64) == (c.block_m == 64)]  # 64-row tiles for m <= 64
                table.tile_rows(row, "ours: Gluon kernel", gluon_fn, sets, tiles, anchor)
            row(f"ours ({table.impls})", bench(ours_fn, sets), anchor)
            row(f"ours MN scales ({table.impls})", bench(ours_mn_fn, sets), anchor)
            row("ours: tl kernel", bench(functools.partial(tier_fn, fp8_blockwise), sets), anchor, tier="tl")


def bmm_fp8_section(table, fg):
    one = torch.ones((), device="cuda")
    for n, k in DEEPSEEK_NK:
        for m in DEEPSEEK_M:

            def make(m=m, n=n, k=k):
                x, w = fp8(1, m, k), fp8(1, n, k)
                out = torch.empty(1, m, n, device="cuda", dtype=BF16)
                return dict(x=x, w=w, x16=x.to(BF16), w16=w.to(BF16), out=out)

            def anchor_fn(d):
                torch._scaled_mm(d["x"][0], d["w"][0].t(), one, one, out_dtype=BF16, use_fast_accum=True)

            def bf16_fn(d):
                torch.bmm(d["x16"], d["w16"].transpose(1, 2))

            def ours_fn(d):
                fg.bmm_fp8(d["x"], d["w"].transpose(1, 2), one, one, BF16, d["out"])

            moved = m * k + n * k + 2 * m * n
            sets = rotating(make, m * k + n * k)
            row = table.shape_rows("bmm_fp8", f"b=1 m={m} n={n} k={k}", 2 * m * n * k, moved)
            anchor = row("torch._scaled_mm tensorwise", bench(anchor_fn, sets))
            row("torch.bmm bf16", bench(bf16_fn, sets), bytes_moved=2 * moved, peak="bf16")
            row(f"{table.who} ({table.impls})", bench(ours_fn, sets), anchor)


def mla_section(table, fg):
    one = torch.ones((), device="cuda")
    heads = 128
    for k, n in [(128, 512), (512, 128)]:
        for tokens in [64, 128, 256, 512]:

            def make(tokens=tokens, k=k, n=n):
                x, w = fp8(heads, tokens, k), fp8(heads, n, k)
                out = torch.empty(heads, tokens, n, device="cuda", dtype=BF16)
                return dict(x=x, w=w, x16=x.to(BF16), w16=w.to(BF16), out=out)

            def anchor_fn(d):
                torch.bmm(d["x16"], d["w16"].transpose(1, 2), out=d["out"])

            def ours_fn(d):
                fg.bmm_fp8(d["x"], d["w"].transpose(1, 2), one, one, BF16, d["out"])

            def ours16_fn(d):
                fg.bmm_bf16(d["x16"], d["w16"].transpose(1, 2), out=d["out"])

            def tier_fn(kernel, d, **tile):
                kernel(d["x"], d["w"].transpose(1, 2), one, one, d["out"], **tile)

            moved = heads * (tokens * k + n * k + 2 * tokens * n)
            moved16 = moved + heads * (tokens * k + n * k)
            sets = rotating(make, heads * (tokens * k + n * k))  # the FP8 operands: the smallest reads
            row = table.shape_rows("mla", f"h={heads} t={tokens} {k}->{n}", 2 * heads * tokens * n * k, moved)
            bf16 = dict(bytes_moved=moved16, peak="bf16")
            anchor = row("torch.bmm bf16", bench(anchor_fn, sets), tier="cublas", **bf16)
            row(f"{table.who} bmm_fp8 ({table.impls})", bench(ours_fn, sets), anchor)
            if table.who != "ours":  # upstream's bmm_bf16 needs cuDNN
                continue
            for name, tier, kernel, tiles in tier_kernels("bmm"):  # each of our kernel tiers called directly
                call = functools.partial(tier_fn, kernel)
                row(f"ours bmm_fp8: {name}", bench(call, sets), anchor, tier=tier)
                table.tile_rows(row, f"ours bmm_fp8: {name}", call, sets, tiles, anchor)
            row(f"ours bmm_bf16 ({table.impls})", bench(ours16_fn, sets), anchor, **bf16)


def bf16_section(table, fg):
    for batch, size in [(1, 4096), (1, 8192), (8, 2048), (16, 1024)]:
        for out_dtype in (BF16, torch.float32):

            def make(batch=batch, size=size, out_dtype=out_dtype):
                A = torch.randn(batch, size, size, device="cuda", dtype=BF16)
                B = torch.randn(batch, size, size, device="cuda", dtype=BF16).transpose(1, 2)
                return dict(A=A, B=B, out=torch.empty(batch, size, size, device="cuda", dtype=out_dtype))

            def anchor_fn(d):
                if d["out"].dtype == BF16:
                    torch.bmm(d["A"], d["B"], out=d["out"])
                else:  # what a caller without an fp32-output bmm would do
                    d["out"].copy_(torch.bmm(d["A"], d["B"]))

            def ours_fn(d):
                fg.bmm_bf16(d["A"], d["B"], out=d["out"], out_dtype=d["out"].dtype)

            flops, moved = 2 * batch * size**3, batch * size * size * (4 + out_dtype.itemsize)
            sets = rotating(make, 4 * batch * size * size)
            row = table.shape_rows(
                "bf16", f"b={batch} {size}^3 -> {str(out_dtype)[6:]}", flops, moved, "bf16"
            )
            anchor = row(
                "torch.bmm" if out_dtype == BF16 else "torch.bmm + copy to fp32", bench(anchor_fn, sets)
            )
            row(f"ours ({table.impls})", bench(ours_fn, sets), anchor)


def grouped_section(table, fg):
    if table.deepgemm_rows is not None:
        table.deepgemm_rows.precompile(
            [("contiguous", g * r, n, k, g) for n, k in GROUPED_NK for g, r in GROUPED_SIZES]
            + [("masked", r, n, k, g, r) for n, k in GROUPED_NK for g, r in GROUPED_SIZES]
        )
    for n, k in GROUPED_NK:
        for groups, rows in GROUPED_SIZES:
            total = groups * rows

            def make(groups=groups, rows=rows, n=n, k=k):
                return grouped_inputs(groups, rows, n, k)

            def anchor_fn(d):  # the dense GEMM with the same rows: equal FLOPs
                torch._scaled_mm(d["a"], d["b"][0].t(), d["sa"], d["sb"], out_dtype=BF16, out=d["out"])

            def contiguous_args(d):  # the contiguous calls' tensors, in order
                return d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indices"], d["out"]

            def masked_args(d, groups=groups, rows=rows, n=n):  # the masked calls' tensors, in order
                return (d["a"].view(groups, rows, -1), d["b"], d["a_scale"].view(groups, rows, -1), d["b_scale"],
                        d["masked_m"], rows, d["out"].view(groups, rows, n))  # fmt: skip

            def contiguous_fn(d):
                fg.group_deepgemm_fp8_nt_groupwise(
                    d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indices"], out=d["out"]
                )

            def segments_fn(d):
                fg.group_gemm_fp8_nt_groupwise(d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indptr"],
                                               scale_major_mode="K", out=d["out"])  # fmt: skip

            def masked_fn(d):
                *args, out = masked_args(d)
                fg.batch_deepgemm_fp8_nt_groupwise(*args, out=out)

            def tier_fn(kernel, args, d, **tile):
                kernel(*args(d), **tile)

            def deepgemm_contiguous(d):
                return _deepgemm.contiguous(*contiguous_args(d))

            def deepgemm_masked(d):
                return _deepgemm.masked(*masked_args(d))

            def masked_rows(d, rows=rows):  # the rows of out (groups x rows) below each masked_m
                return (torch.arange(rows, device="cuda") < d["masked_m"][:, None]).flatten()

            sets = rotating(make, total * k + groups * n * k)
            moved = total * k + groups * n * k + 2 * total * n
            row = table.shape_rows("grouped", f"G={groups} rows={rows} n={n} k={k}", 2 * total * n * k, moved)
            anchor = row("dense blockwise _scaled_mm", bench(anchor_fn, sets), tier="cublas",
                         bytes_moved=total * k + n * k + 2 * total * n)  # fmt: skip
            if table.deepgemm_rows is not None:  # before our rows, which carry their speedup over it
                table.deepgemm_rows.add(row, "DeepGEMM contiguous", deepgemm_contiguous, sets, contiguous_fn,
                                        lambda d: d["m_indices"] >= 0)  # fmt: skip
                table.deepgemm_rows.add(row, "DeepGEMM masked", deepgemm_masked, sets, masked_fn, masked_rows)
            row(f"ours contiguous ({table.impls})", bench(contiguous_fn, sets), anchor)
            row(f"ours group_gemm m_indptr ({table.impls})", bench(segments_fn, sets), anchor)
            row(f"ours masked ({table.impls})", bench(masked_fn, sets), anchor)
            for layout, args in (("contiguous", contiguous_args), ("masked", masked_args)):
                for name, tier, kernel, tiles in tier_kernels(layout):
                    call = functools.partial(tier_fn, kernel, args)
                    row(f"ours {layout}: {name}", bench(call, sets), anchor, tier=tier)
                    table.tile_rows(row, f"ours {layout}: {name}", call, sets, tiles, anchor)


def blockscale_section(table, fg):
    """``fp8_blockscale_gemm_sm90`` as vLLM calls it (BF16 input) and W8A8 (FP8 input)."""
    for n, k in BLOCKSCALE_NK:
        for m in BLOCKSCALE_M:

            def make(m=m, n=n, k=k):
                kb = k // 128
                x16 = torch.randn(m, k, device="cuda", dtype=BF16)
                x, w = fp8(m, k), fp8(n, k)
                x_scale = torch.rand(m, kb, device="cuda") + 0.5
                w_scale = torch.rand(ceil_div(n, 128), kb, device="cuda") + 0.5
                # upstream's W8A8 input scale: MN-major (k/128, m) with rows padded to 4 (its test)
                padded = torch.empty(kb, ceil_div(m, 4) * 4, device="cuda")
                padded[:, :m] = x_scale.t()
                sa, sb = cublas_block_scales(x_scale, w_scale)
                out = torch.empty(m, n, device="cuda", dtype=BF16)
                return dict(x16=x16, x=x, w=w, x_scale=padded[:, :m], w_scale=w_scale, sa=sa, sb=sb, out=out)

            def anchor_fn(d):
                torch._scaled_mm(d["x"], d["w"].t(), d["sa"], d["sb"], out_dtype=BF16, out=d["out"])

            def bf16_input_fn(d):
                fg.fp8_blockscale_gemm_sm90(d["x16"], d["w"], None, d["w_scale"], out=d["out"])

            def fp8_input_fn(d):
                fg.fp8_blockscale_gemm_sm90(d["x"], d["w"], d["x_scale"], d["w_scale"], out=d["out"])

            moved, moved16 = m * k + n * k + 2 * m * n, 2 * m * k + n * k + 2 * m * n
            sets = rotating(make, m * k + n * k)
            row = table.shape_rows("blockscale", f"m={m} n={n} k={k}", 2 * m * n * k, moved)
            anchor, who = None, table.who
            if who == "ours" and m % 4 == 0:  # cuBLASLt's block scaling needs m % 4 == 0 (see _cuda)
                anchor = row("torch._scaled_mm blockwise", bench(anchor_fn, sets))
            row(f"{who} bf16 input ({table.impls})", bench(bf16_input_fn, sets), anchor, bytes_moved=moved16)
            row(f"{who} fp8 input ({table.impls})", bench(fp8_input_fn, sets), anchor)


def reference_section(table, fg):
    from flashinfer.gemm import _reference
    from flashinfer.gemm._args import Bmm, Groupwise

    one = torch.ones((), device="cuda")
    for m, n, k in [(16, 2112, 7168), (128, 7168, 2048)]:

        def make(m=m, n=n, k=k):
            x, w = fp8(1, m, k), fp8(1, n, k).transpose(1, 2)
            sa = torch.ones(m, k // 128, device="cuda")
            sb = torch.ones(ceil_div(n, 128), k // 128, device="cuda")
            return dict(x=x, w=w, sa=sa, sb=sb, out=torch.empty(1, m, n, device="cuda", dtype=BF16))

        def groupwise_fn(d):
            call = Groupwise(
                d["x"][0], d["w"][0].t(), d["sa"], d["sb"], False, False, 1, 128, 128, d["out"][0]
            )
            _reference.gemm_groupwise(call)

        def bmm_fn(d):
            _reference.bmm(Bmm(d["x"], d["w"], d["out"], one, one))

        sets = rotating(make, m * k + n * k)
        for op, fn in (("bmm_fp8", bmm_fn), ("groupwise", groupwise_fn)):
            row = table.shape_rows(
                "reference", f"{op} m={m} n={n} k={k}", 2 * m * n * k, m * k + n * k + 2 * m * n
            )
            row("reference (float32)", bench(fn, sets), tier="reference")


def compare(rows, upstream_rows) -> str:
    """Ours against upstream's rows of the same section, shape and call (``upstream_ms / ours_ms``)."""

    def key(row, who):
        return row["section"], row["shape"], row["impl"].split(" (")[0].replace(who, "", 1).strip()

    theirs = {key(r, "upstream"): r["ms"] for r in upstream_rows if r["impl"].startswith("upstream")}
    lines = [
        "| section | shape | call | ours us | upstream us | upstream / ours |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        k = key(row, "ours")
        if row["impl"].startswith("ours") and k in theirs:
            lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {row['ms'] * 1e3:.1f} | {theirs[k] * 1e3:.1f} | "
                         f"{theirs[k] / row['ms']:.2f}x |")  # fmt: skip
    return "\n".join(lines) + "\n"


def autotune_choices():
    """The tile each autotuned Triton kernel chose, per autotune key (shape bucket)."""
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    tuned = {"fp8_bmm": fp8_bmm.fp8_bmm_tuned, "fp8_blockwise": fp8_blockwise.fp8_blockwise_tuned}
    return {name: {str(key): str(config) for key, config in t.cache.items()} for name, t in tuned.items()}


SECTIONS = {"mla": mla_section, "grouped": grouped_section, "groupwise": groupwise_section,
            "bmm_fp8": bmm_fp8_section, "blockscale": blockscale_section, "bf16": bf16_section,
            "reference": reference_section}  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(OUT)))
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset")
    parser.add_argument("--upstream", action="store_true",
                        help="time the importable flashinfer as upstream (sections mla, bmm_fp8, blockscale)")  # fmt: skip
    parser.add_argument(
        "--compare", metavar="UPSTREAM_JSON", help="print ours against an --upstream run's JSON"
    )
    parser.add_argument("--deepgemm", action="store_true",
                        help="groupwise, grouped: DeepGEMM on the same inputs (benchmarks/deepgemm_anchor.sh)")  # fmt: skip
    parser.add_argument("--tiles", action="store_true", help="groupwise, grouped, mla: every Gluon tile")
    args = parser.parse_args()
    if args.deepgemm and args.upstream:
        parser.error("--deepgemm sets DeepGEMM against our rows: not with --upstream")
    require_cuda_gpu("bench_gemm.py")
    meta = {}
    if args.deepgemm:
        try:
            print(_deepgemm.describe(), flush=True)
        except Exception as error:  # not prepared, not importable or no compiler: say so before timing
            sys.exit(f"--deepgemm: {error}")
        meta["deepgemm"] = _deepgemm.version()
    import flashinfer
    import flashinfer.gemm as fg

    impls = f"FlashInfer {flashinfer.__version__}" if args.upstream else "public API -> _cuda"
    table = Table(impls, "upstream" if args.upstream else "ours", DeepGEMMRows() if args.deepgemm else None,
                  args.tiles)  # fmt: skip
    meta = run_meta(called_through=impls, **meta)
    print(meta, flush=True)
    torch.manual_seed(0)
    path = Path(args.out, "gemm_upstream.json" if args.upstream else "gemm.json")
    for section in args.sections.split(","):
        if args.upstream and section not in UPSTREAM_SECTIONS:
            print(f"{section}: not timed for upstream", flush=True)
            continue
        try:
            SECTIONS[section](table, fg)
        except Exception:  # report the failed section and still measure the others
            traceback.print_exc()
        if not args.upstream:
            meta["autotuned"] = autotune_choices()
        write_json(path, {"meta": meta, "rows": table.rows})  # after every section: a run cut short keeps it
    if args.compare:
        versus = compare(table.rows, json.loads(Path(args.compare).read_text())["rows"])
        print(versus)
        Path(args.out, "gemm_vs_upstream.md").write_text(versus)


if __name__ == "__main__":
    main()
