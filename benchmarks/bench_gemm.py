"""GEMM benchmarks on an NVIDIA GPU: this package's public API next to its anchors, same process.

Sections (DeepSeek-V3 shapes):

- ``groupwise``: ``gemm_fp8_nt_groupwise`` (1x128 / 128x128 scales, K-major) for m in
  {1, 16, 64, 128, 512, 4096} x (n, k) in the five DeepSeek-V3 linear shapes; anchors
  ``torch._scaled_mm`` with block scales already in cuBLASLt's layout (so our scale relayout is
  counted against us), ``torch._scaled_mm`` per-tensor (the FP8 library ceiling), and our two
  kernel tiers called directly: the Gluon kernel (Hopper) and the portable tl kernel.
- ``bmm_fp8``: ``bmm_fp8`` with b = 1 on the same shapes; anchors ``torch._scaled_mm``
  per-tensor and ``torch.bmm`` in bf16.
- ``mla``: the MLA absorb products, 128 heads x {64, 128, 256, 512} tokens, 128 -> 512 and
  512 -> 128, column-major weights: ``bmm_fp8`` and ``bmm_bf16`` against ``torch.bmm`` in bf16.
- ``bf16``: ``bmm_bf16`` on square shapes (bf16 and fp32 output) against ``torch.bmm``.
- ``grouped``: ``group_deepgemm_fp8_nt_groupwise`` (4-32 groups, 256-8192 rows per group),
  ``group_gemm_fp8_nt_groupwise`` (the same rows as ``m_indptr`` segments) and
  ``batch_deepgemm_fp8_nt_groupwise`` against the dense blockwise ``torch._scaled_mm`` with the
  same total rows (equal FLOPs), and each kernel tier called directly.
- ``blockscale``: ``fp8_blockscale_gemm_sm90`` (vLLM's DeepSeek linear layers) for m in
  {1, 8, 16, 32, 64, 128, 512, 4096} x the four DeepSeek-V3 (n, k) of vLLM's linear layers, with BF16 input
  (quantized inside) and with FP8 input (W8A8), FP8 weights with 128x128 scales; anchor
  ``torch._scaled_mm`` blockwise on operands already quantized (the GEMM alone). With
  ``--upstream`` the same rows time upstream's own ``fp8_blockscale_gemm_sm90``;
  ``--compare gemm_upstream.json`` then prints ours against it per shape.
- ``reference``: the float32 reference implementation on a few small shapes.

``--deepgemm`` adds DeepGEMM (deepseek-ai/DeepGEMM, the Python JIT release pinned and prepared by
``benchmarks/deepgemm_anchor.sh``; ``benchmarks/_deepgemm.py`` calls it) to ``groupwise``
(``gemm_fp8_fp8_bf16_nt``) and ``grouped`` (``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`` next to
the contiguous and ``m_indptr`` rows, ``..._masked`` next to the masked rows): a row of tier
``deepgemm`` on the same input sets, timed the same way, its A scales re-laid out to its MN-major
TMA-aligned form once per input set ahead of timing (as an engine does at weight load), and its
output checked once per shape against ours (``rel_err_vs_ours``: relative Frobenius error over
the rows both define). Each of our rows of that shape then carries ``vs_deepgemm``, DeepGEMM's
time over ours (above 1: ours is faster), printed after ``vs_anchor`` and tabled as
``ours / DeepGEMM``. Its kernels are compiled ahead, in parallel, at the start of each section.

Every row names its kernel tier (``tier``: ``api`` for the public API, which picks its own,
``gluon``, ``tl``, ``cublas``, ``reference``, ``deepgemm``); the Gluon rows appear where that tier
runs (compute capability 9.0 and the Triton of ``flashinfer._core.kernel_tier``).

Timing: ``triton.testing.do_bench_cudagraph`` (CUDA events around graph replays, median): GPU
time per call, without host overhead (``benchmarks/host_time.py`` measures that), as
serving engines replay these calls from CUDA graphs. Successive calls rotate through fresh
random input sets totalling at least twice the 60 MB L2, so operands come from HBM. The physical floor
per row is ``max(bytes / 4.3 TB/s, flops / peak)`` with the H200 peaks measured through PyTorch
(790 TFLOP/s BF16, 1270 TFLOP/s FP8 dense). Writes ``gemm.json`` to ``--out``.

Run: ``PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src python benchmarks/bench_gemm.py --out DIR``
(upstream: ``PYTHONPATH=UPSTREAM_DIR python benchmarks/bench_gemm.py --upstream --sections blockscale
--out DIR``, then ours with ``--sections blockscale --compare DIR/gemm_upstream.json``; DeepGEMM:
``bash benchmarks/deepgemm_anchor.sh setup && PYTHONPATH=...:benchmarks/.anchor/deepgemm python
benchmarks/bench_gemm.py --deepgemm --sections groupwise,grouped --out DIR``).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import traceback
from pathlib import Path

import _deepgemm
import torch
from _harness import (
    HBM_BYTES_PER_S,
    OUT,
    PEAK_FLOPS,
    ceil_div,
    cublas_block_scales,
    fp8,
    grouped_inputs,
    require_cuda_gpu,
    rotating,
)
from _harness import cudagraph_ms as bench

DEEPSEEK_NK = [(7168, 2048), (2112, 7168), (24576, 1536), (4096, 7168), (7168, 16384)]
DEEPSEEK_M = [1, 16, 64, 128, 512, 4096]
BLOCKSCALE_NK = [(7168, 2048), (2112, 7168), (24576, 1536), (4096, 7168)]
BLOCKSCALE_M = [1, 8, 16, 32, 64, 128, 512, 4096]


def deepgemm_layout(name: str) -> str:
    """Which DeepGEMM row a row of a shape is set against: its masked call for masked rows, else
    its dense or contiguous call."""
    return "masked" if "masked" in name else ""


class Table:
    """Rows of one run: timings, throughput, anchors and the floor, printed as they come."""

    def __init__(self):
        self.rows = []
        self.deepgemm = {}  # (section, shape, layout) -> DeepGEMM's ms, for our rows timed after it

    def add(self, section, shape, name, ms, flops, bytes_moved, peak, anchor_ms=None, tier="api", **extra):
        floor_ms = max(bytes_moved / HBM_BYTES_PER_S, flops / PEAK_FLOPS[peak]) * 1e3
        row = {
            "section": section,
            "shape": shape,
            "impl": name,
            "tier": tier,
            "ms": ms,
            "tflops": flops / ms / 1e9,
            "gbps": bytes_moved / ms / 1e6,
            "floor_ms": floor_ms,
            "vs_anchor": (anchor_ms / ms) if anchor_ms else None,
            **extra,
        }
        key = (section, shape, deepgemm_layout(name))
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

    def add(self, table, section, shape, name, make, sets, flops, moved, ours, valid=None):
        """Time ``make(d)()`` (DeepGEMM's call, its layout prepared by ``make``, once per input set)
        over ``sets``, after checking it once against ``ours(d)`` on the first set's ``out``
        (``valid(d)``: the rows both define); returns its ms, None when it failed."""
        if self.failures >= self.MAX_FAILURES:
            return None
        try:
            err = _deepgemm.attach(sets, make, ours, valid)
            ms = bench(lambda d: d["deepgemm"](), sets)
        except Exception:  # reported; our rows of this shape are still timed
            self.failures += 1
            print(f"{section:10s} {shape:34s} {name}: FAILED", flush=True)
            traceback.print_exc()
            return None
        finally:
            for d in sets:
                d.pop("deepgemm", None)
        return table.add(section, shape, name, ms, flops, moved, "fp8", tier="deepgemm", rel_err_vs_ours=err)


def gluon_tier():
    """The Gluon kernel modules where that tier runs on this GPU and Triton, else None."""
    from flashinfer._core.kernel_tier import gluon_supported

    if not gluon_supported(torch.cuda.current_device()):
        return None
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise
    from flashinfer.gemm.kernels.bmm import gluon_fp8_bmm

    return gluon_fp8_blockwise, gluon_fp8_bmm


def tier_kernels(op: str) -> list:
    """(name, tier, launcher) of each of our kernel tiers for ``op``: the Gluon kernel where it
    runs, and the portable tl kernel. Each launcher takes the tensors in the order of the op's
    record (``flashinfer.gemm._args``) and builds the record."""
    from flashinfer.gemm._args import Bmm, GroupedContiguous, GroupedMasked
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    def launchers(bmm, contiguous, masked):
        return {
            "bmm": lambda A, B, A_scale, B_scale, out: bmm(Bmm(A, B, out, A_scale, B_scale)),
            "contiguous": lambda *tensors: contiguous(GroupedContiguous(*tensors)),
            "masked": lambda *tensors: masked(GroupedMasked(*tensors)),
        }

    portable = launchers(
        fp8_bmm.fp8_bmm, fp8_blockwise.group_gemm_contiguous, fp8_blockwise.group_gemm_masked
    )
    kernels = [("tl kernel", "tl", portable[op])]
    gluon = gluon_tier()
    if gluon is not None:
        blockwise, bmm = gluon
        launch = launchers(bmm.fp8_bmm, blockwise.group_gemm_contiguous, blockwise.group_gemm_masked)
        kernels.insert(0, ("Gluon kernel", "gluon", launch[op]))
    return kernels


def groupwise_section(table, fg, impls, deepgemm=None):
    from flashinfer.gemm._args import Groupwise
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise

    gluon = gluon_tier()
    if deepgemm is not None:
        deepgemm.precompile([("dense", m, n, k) for n, k in DEEPSEEK_NK for m in DEEPSEEK_M])

    for n, k in DEEPSEEK_NK:
        for m in DEEPSEEK_M:

            def make(m=m, n=n, k=k):
                a, b = fp8(m, k), fp8(n, k)
                a_scale = torch.rand(m, ceil_div(k, 128), device="cuda") + 0.5
                b_scale = torch.rand(ceil_div(n, 128), ceil_div(k, 128), device="cuda") + 0.5
                sa, sb = cublas_block_scales(a_scale, b_scale)
                out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                # sglang's call (callers.md G5): MN-major (k/128, m) and (k/128, n/128) storage
                mn = dict(a_scale_mn=a_scale.t().contiguous(), b_scale_mn=b_scale.t().contiguous())
                return dict(a=a, b=b, a_scale=a_scale, b_scale=b_scale, sa=sa, sb=sb, out=out, **mn)

            flops, moved = 2 * m * n * k, m * k + n * k + 2 * m * n
            sets = rotating(make, m * k + n * k)
            one = torch.ones((), device="cuda")
            shape = f"m={m} n={n} k={k}"

            def anchor_fn(d):
                torch._scaled_mm(d["a"], d["b"].t(), d["sa"], d["sb"], out_dtype=torch.bfloat16, out=d["out"])

            def per_tensor_fn(d, one=one):
                torch._scaled_mm(d["a"], d["b"].t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True)

            def ours_fn(d):
                fg.gemm_fp8_nt_groupwise(d["a"], d["b"], d["a_scale"], d["b_scale"], "K", out=d["out"])

            def ours_mn_fn(d):
                fg.gemm_fp8_nt_groupwise(d["a"], d["b"], d["a_scale_mn"], d["b_scale_mn"], "MN", out=d["out"])

            def tier_fn(kernels, d):
                kernels.gemm_groupwise(
                    Groupwise(d["a"], d["b"], d["a_scale"], d["b_scale"], False, False, 1, 128, 128, d["out"])
                )

            def deepgemm_call(d):
                return _deepgemm.dense(d["a"], d["b"], d["a_scale"], d["b_scale"], d["out"])

            row = functools.partial(table.add, "groupwise", shape, flops=flops, bytes_moved=moved, peak="fp8")
            anchor = None
            if m % 4 == 0:  # cuBLASLt's block scaling needs m % 4 == 0 (see _cuda)
                anchor = row("torch._scaled_mm blockwise", bench(anchor_fn, sets), tier="cublas")
            row("torch._scaled_mm tensorwise", bench(per_tensor_fn, sets), tier="cublas")
            if deepgemm is not None:  # before our rows, which carry their speedup over it
                deepgemm.add(
                    table, "groupwise", shape, "DeepGEMM", deepgemm_call, sets, flops, moved, ours_fn
                )
            if gluon is not None:
                row(
                    "ours: Gluon kernel",
                    bench(functools.partial(tier_fn, gluon[0]), sets),
                    anchor,
                    tier="gluon",
                )
            row(f"ours ({impls})", bench(ours_fn, sets), anchor)
            row(f"ours MN scales ({impls})", bench(ours_mn_fn, sets), anchor)
            row("ours: tl kernel", bench(functools.partial(tier_fn, fp8_blockwise), sets), anchor, tier="tl")


def bmm_fp8_section(table, fg, impls, who="ours"):
    one = torch.ones((), device="cuda")
    for n, k in DEEPSEEK_NK:
        for m in DEEPSEEK_M:

            def make(m=m, n=n, k=k):
                x, w = fp8(1, m, k), fp8(1, n, k)
                out = torch.empty(1, m, n, device="cuda", dtype=torch.bfloat16)
                return dict(x=x, w=w, x16=x.to(torch.bfloat16), w16=w.to(torch.bfloat16), out=out)

            flops, moved = 2 * m * n * k, m * k + n * k + 2 * m * n
            sets = rotating(make, m * k + n * k)
            shape = f"b=1 m={m} n={n} k={k}"

            def anchor_fn(d, one=one):
                torch._scaled_mm(
                    d["x"][0], d["w"][0].t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True
                )

            def bf16_fn(d):
                torch.bmm(d["x16"], d["w16"].transpose(1, 2))

            def ours_fn(d, one=one):
                fg.bmm_fp8(d["x"], d["w"].transpose(1, 2), one, one, torch.bfloat16, d["out"])

            anchor = bench(anchor_fn, sets)
            table.add("bmm_fp8", shape, "torch._scaled_mm tensorwise", anchor, flops, moved, "fp8")
            table.add("bmm_fp8", shape, "torch.bmm bf16", bench(bf16_fn, sets), flops, 2 * moved, "bf16")
            table.add("bmm_fp8", shape, f"{who} ({impls})", bench(ours_fn, sets), flops, moved, "fp8", anchor)


def mla_section(table, fg, impls, who="ours"):
    one = torch.ones((), device="cuda")
    heads = 128
    for k, n in [(128, 512), (512, 128)]:
        for tokens in [64, 128, 256, 512]:

            def make(tokens=tokens, k=k, n=n):
                x, w = fp8(heads, tokens, k), fp8(heads, n, k)
                out = torch.empty(heads, tokens, n, device="cuda", dtype=torch.bfloat16)
                return dict(x=x, w=w, x16=x.to(torch.bfloat16), w16=w.to(torch.bfloat16), out=out)

            flops = 2 * heads * tokens * n * k
            moved = heads * (tokens * k + n * k + 2 * tokens * n)
            moved16 = moved + heads * (tokens * k + n * k)
            sets = rotating(make, heads * (tokens * k + n * k))  # the FP8 operands: the smallest reads
            shape = f"h={heads} t={tokens} {k}->{n}"

            def anchor_fn(d):
                torch.bmm(d["x16"], d["w16"].transpose(1, 2), out=d["out"])

            def ours_fn(d, one=one):
                fg.bmm_fp8(d["x"], d["w"].transpose(1, 2), one, one, torch.bfloat16, d["out"])

            def ours16_fn(d):
                fg.bmm_bf16(d["x16"], d["w16"].transpose(1, 2), out=d["out"])

            row = functools.partial(table.add, "mla", shape, flops=flops, bytes_moved=moved, peak="fp8")
            anchor = row(
                "torch.bmm bf16", bench(anchor_fn, sets), tier="cublas", bytes_moved=moved16, peak="bf16"
            )
            row(f"{who} bmm_fp8 ({impls})", bench(ours_fn, sets), anchor)
            if who == "ours":  # each of our kernel tiers called directly; upstream's bmm_bf16 needs cuDNN
                for name, tier, kernel in tier_kernels("bmm"):
                    ms = bench(
                        lambda d, kernel=kernel: kernel(d["x"], d["w"].transpose(1, 2), one, one, d["out"]),
                        sets,
                    )
                    row(f"ours bmm_fp8: {name}", ms, anchor, tier=tier)
                row(
                    f"ours bmm_bf16 ({impls})",
                    bench(ours16_fn, sets),
                    anchor,
                    bytes_moved=moved16,
                    peak="bf16",
                )


def bf16_section(table, fg, impls):
    for batch, size in [(1, 4096), (1, 8192), (8, 2048), (16, 1024)]:
        for out_dtype in (torch.bfloat16, torch.float32):

            def make(batch=batch, size=size, out_dtype=out_dtype):
                A = torch.randn(batch, size, size, device="cuda", dtype=torch.bfloat16)
                B = torch.randn(batch, size, size, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                return dict(A=A, B=B, out=torch.empty(batch, size, size, device="cuda", dtype=out_dtype))

            flops = 2 * batch * size**3
            moved = batch * size * size * (4 + out_dtype.itemsize)
            sets = rotating(make, 4 * batch * size * size)
            shape = f"b={batch} {size}^3 -> {str(out_dtype)[6:]}"

            def anchor_fn(d):
                if d["out"].dtype == torch.bfloat16:
                    torch.bmm(d["A"], d["B"], out=d["out"])
                else:  # what a caller without an fp32-output bmm would do
                    d["out"].copy_(torch.bmm(d["A"], d["B"]))

            def ours_fn(d):
                fg.bmm_bf16(d["A"], d["B"], out=d["out"], out_dtype=d["out"].dtype)

            name = "torch.bmm" if out_dtype == torch.bfloat16 else "torch.bmm + copy to fp32"
            anchor = bench(anchor_fn, sets)
            table.add("bf16", shape, name, anchor, flops, moved, "bf16")
            table.add("bf16", shape, f"ours ({impls})", bench(ours_fn, sets), flops, moved, "bf16", anchor)


GROUPED_NK = [(4096, 7168), (7168, 2048)]
GROUPED_SIZES = [(4, 1024), (8, 512), (8, 1024), (16, 256), (32, 256), (4, 8192), (32, 512)]


def grouped_section(table, fg, impls, deepgemm=None):
    if deepgemm is not None:
        deepgemm.precompile(
            [("contiguous", g * r, n, k, g) for n, k in GROUPED_NK for g, r in GROUPED_SIZES]
            + [("masked", r, n, k, g, r) for n, k in GROUPED_NK for g, r in GROUPED_SIZES]
        )
    for n, k in GROUPED_NK:
        for groups, rows in GROUPED_SIZES:
            total = groups * rows

            def make(groups=groups, rows=rows, n=n, k=k):
                return grouped_inputs(groups, rows, n, k)

            flops = 2 * total * n * k
            moved = total * k + groups * n * k + 2 * total * n
            sets = rotating(make, total * k + groups * n * k)
            shape = f"G={groups} rows={rows} n={n} k={k}"

            def anchor_fn(d):  # the dense GEMM with the same rows: equal FLOPs
                torch._scaled_mm(
                    d["a"], d["b"][0].t(), d["sa"], d["sb"], out_dtype=torch.bfloat16, out=d["out"]
                )

            def contiguous_fn(d):
                fg.group_deepgemm_fp8_nt_groupwise(
                    d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indices"], out=d["out"]
                )

            def segments_fn(d):
                fg.group_gemm_fp8_nt_groupwise(d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indptr"],
                                               scale_major_mode="K", out=d["out"])  # fmt: skip

            def contiguous_kernel(kernel, d):
                kernel(d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indices"], d["out"])

            def masked_args(d, groups=groups, rows=rows, n=n):  # the masked calls' tensors, in order
                return (d["a"].view(groups, rows, -1), d["b"], d["a_scale"].view(groups, rows, -1), d["b_scale"],
                        d["masked_m"], rows, d["out"].view(groups, rows, n))  # fmt: skip

            def masked_kernel(kernel, d):
                kernel(*masked_args(d))

            def masked_fn(d):
                *args, out = masked_args(d)
                fg.batch_deepgemm_fp8_nt_groupwise(*args, out=out)

            def deepgemm_contiguous(d):
                return _deepgemm.contiguous(
                    d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indices"], d["out"]
                )

            def masked_rows(d, rows=rows):  # the rows of out (groups x rows) below each masked_m
                return (torch.arange(rows, device="cuda") < d["masked_m"][:, None]).flatten()

            row = functools.partial(table.add, "grouped", shape, flops=flops, bytes_moved=moved, peak="fp8")
            dense_moved = total * k + n * k + 2 * total * n
            anchor = row(
                "dense blockwise _scaled_mm", bench(anchor_fn, sets), tier="cublas", bytes_moved=dense_moved
            )
            if deepgemm is not None:  # before our rows, which carry their speedup over it
                deepgemm.add(table, "grouped", shape, "DeepGEMM contiguous", deepgemm_contiguous, sets, flops, moved,
                             contiguous_fn, valid=lambda d: d["m_indices"] >= 0)  # fmt: skip
                deepgemm.add(table, "grouped", shape, "DeepGEMM masked", lambda d: _deepgemm.masked(*masked_args(d)),
                             sets, flops, moved, masked_fn, valid=masked_rows)  # fmt: skip
            row(f"ours contiguous ({impls})", bench(contiguous_fn, sets), anchor)
            row(f"ours group_gemm m_indptr ({impls})", bench(segments_fn, sets), anchor)
            row(f"ours masked ({impls})", bench(masked_fn, sets), anchor)
            for layout, fn in (("contiguous", contiguous_kernel), ("masked", masked_kernel)):
                for name, tier, kernel in tier_kernels(layout):
                    ms = bench(lambda d, kernel=kernel, fn=fn: fn(kernel, d), sets)
                    row(f"ours {layout}: {name}", ms, anchor, tier=tier)


def blockscale_section(table, fg, impls, who="ours"):
    """``fp8_blockscale_gemm_sm90`` as vLLM calls it (BF16 input) and W8A8 (FP8 input)."""
    for n, k in BLOCKSCALE_NK:
        for m in BLOCKSCALE_M:

            def make(m=m, n=n, k=k):
                kb = k // 128
                x16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                x, w = fp8(m, k), fp8(n, k)
                x_scale = torch.rand(m, kb, device="cuda") + 0.5
                w_scale = torch.rand(ceil_div(n, 128), kb, device="cuda") + 0.5
                # upstream's W8A8 input scale: MN-major (k/128, m) with rows padded to 4 (its test)
                padded = torch.empty(kb, ceil_div(m, 4) * 4, device="cuda")
                padded[:, :m] = x_scale.t()
                sa, sb = cublas_block_scales(x_scale, w_scale)
                out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                return dict(x16=x16, x=x, w=w, x_scale=padded[:, :m], w_scale=w_scale, sa=sa, sb=sb, out=out)

            flops = 2 * m * n * k
            moved, moved16 = m * k + n * k + 2 * m * n, 2 * m * k + n * k + 2 * m * n
            sets = rotating(make, m * k + n * k)
            shape = f"m={m} n={n} k={k}"

            def anchor_fn(d):
                torch._scaled_mm(d["x"], d["w"].t(), d["sa"], d["sb"], out_dtype=torch.bfloat16, out=d["out"])

            def bf16_input_fn(d):
                fg.fp8_blockscale_gemm_sm90(d["x16"], d["w"], None, d["w_scale"], out=d["out"])

            def fp8_input_fn(d):
                fg.fp8_blockscale_gemm_sm90(d["x"], d["w"], d["x_scale"], d["w_scale"], out=d["out"])

            row = functools.partial(
                table.add, "blockscale", shape, flops=flops, bytes_moved=moved, peak="fp8"
            )
            anchor = None
            if who == "ours" and m % 4 == 0:  # cuBLASLt's block scaling needs m % 4 == 0 (see _cuda)
                anchor = row("torch._scaled_mm blockwise", bench(anchor_fn, sets))
            row(f"{who} bf16 input ({impls})", bench(bf16_input_fn, sets), anchor, bytes_moved=moved16)
            row(f"{who} fp8 input ({impls})", bench(fp8_input_fn, sets), anchor)


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
        if not row["impl"].startswith("ours"):
            continue
        k = key(row, "ours")
        if k in theirs:
            lines.append(
                f"| {k[0]} | {k[1]} | {k[2]} | {row['ms'] * 1e3:.1f} | {theirs[k] * 1e3:.1f} | "
                f"{theirs[k] / row['ms']:.2f}x |"
            )
    return "\n".join(lines) + "\n"


def autotune_choices():
    """The tile each autotuned Triton kernel chose, per autotune key (shape bucket)."""
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    return {
        name: {str(key): str(config) for key, config in tuned.cache.items()}
        for name, tuned in (
            ("fp8_bmm", fp8_bmm.fp8_bmm_tuned),
            ("fp8_blockwise", fp8_blockwise.fp8_blockwise_tuned),
        )
    }


def reference_section(table):
    from flashinfer.gemm import _reference
    from flashinfer.gemm._args import Bmm, Groupwise

    one = torch.ones((), device="cuda")
    for m, n, k in [(16, 2112, 7168), (128, 7168, 2048)]:

        def make(m=m, n=n, k=k):
            x, w = fp8(1, m, k), fp8(1, n, k).transpose(1, 2)
            sa = torch.ones(m, k // 128, device="cuda")
            sb = torch.ones(ceil_div(n, 128), k // 128, device="cuda")
            return dict(x=x, w=w, sa=sa, sb=sb, out=torch.empty(1, m, n, device="cuda", dtype=torch.bfloat16))

        def bmm_fn(d, one=one):
            _reference.bmm(Bmm(d["x"], d["w"], d["out"], one, one))

        def groupwise_fn(d):
            call = Groupwise(
                d["x"][0], d["w"][0].t(), d["sa"], d["sb"], False, False, 1, 128, 128, d["out"][0]
            )
            _reference.gemm_groupwise(call)

        flops, moved = 2 * m * n * k, m * k + n * k + 2 * m * n
        sets = rotating(make, m * k + n * k)
        table.add("reference", f"bmm_fp8 m={m} n={n} k={k}", "reference (float32)", bench(bmm_fn, sets), flops,
                  moved, "fp8", tier="reference")  # fmt: skip
        table.add("reference", f"groupwise m={m} n={n} k={k}", "reference (float32)", bench(groupwise_fn, sets),
                  flops, moved, "fp8", tier="reference")  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(OUT)))
    parser.add_argument(
        "--sections",
        default="mla,grouped,groupwise,bmm_fp8,blockscale,bf16,reference",
        help="comma-separated subset",
    )
    parser.add_argument(
        "--upstream",
        action="store_true",
        help="time the importable flashinfer as upstream (sections mla, bmm_fp8, blockscale): an in-run anchor",
    )
    parser.add_argument(
        "--compare", metavar="UPSTREAM_JSON", help="print ours against an --upstream run's gemm_upstream.json"
    )
    parser.add_argument(
        "--deepgemm",
        action="store_true",
        help="sections groupwise and grouped: DeepGEMM's rows on the same inputs (benchmarks/deepgemm_anchor.sh)",
    )
    args = parser.parse_args()
    if args.deepgemm and args.upstream:
        parser.error("--deepgemm sets DeepGEMM against our rows: not with --upstream")
    require_cuda_gpu("bench_gemm.py")
    deepgemm = None
    if args.deepgemm:
        try:
            print(_deepgemm.describe(), flush=True)
        except Exception as error:  # not prepared, not importable or no compiler: say so before timing
            sys.exit(f"--deepgemm: {error}")
        deepgemm = DeepGEMMRows()
    import flashinfer
    import flashinfer.gemm as fg

    impls = "public API -> _cuda"
    if args.upstream:
        impls = f"FlashInfer {flashinfer.__version__}"
    table = Table()
    device = torch.cuda.get_device_name()
    print(
        f"{device}, torch {torch.__version__}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    )
    torch.manual_seed(0)
    runners = {
        "groupwise": groupwise_section,
        "bmm_fp8": bmm_fp8_section,
        "mla": mla_section,
        "bf16": bf16_section,
        "grouped": grouped_section,
        "blockscale": blockscale_section,
    }
    if deepgemm is not None:
        runners["groupwise"] = functools.partial(groupwise_section, deepgemm=deepgemm)
        runners["grouped"] = functools.partial(grouped_section, deepgemm=deepgemm)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "device": device,
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "called_through": impls,
    }
    if deepgemm is not None:
        meta["deepgemm"] = _deepgemm.version()
    name = "gemm_upstream.json" if args.upstream else "gemm.json"
    for section in args.sections.split(","):
        try:
            if section == "reference":
                reference_section(table)
            elif args.upstream:
                runners[section](table, fg, impls, who="upstream")
            else:
                runners[section](table, fg, impls)
        except Exception:  # report the failed section and still measure the others
            traceback.print_exc()
        if not args.upstream:
            meta["autotuned"] = autotune_choices()
        # written after every section, so a run cut short keeps what it measured
        (out_dir / name).write_text(json.dumps({"meta": meta, "rows": table.rows}, indent=1))
    if args.compare:
        versus = compare(table.rows, json.loads(Path(args.compare).read_text())["rows"])
        print(versus)
        (out_dir / "gemm_vs_upstream.md").write_text(versus)


if __name__ == "__main__":
    main()
