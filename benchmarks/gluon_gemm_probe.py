"""H200 probe of the Hopper Gluon GEMM kernels: correctness at real shapes, then Gluon vs cuBLASLt vs tl.

One process, about five minutes on an H200 (most of it compiling: every Gluon variant and the
tl kernels' autotuning):

1. **check**: every Gluon variant (each tile configuration in the layouts it serves, FP8 output,
   the batched kernel's tiles) at one or two real shapes, against a float64 oracle on the GPU;
   reported as ``max |error| / bound`` (pass at <= 1): the oracles and bounds of ``tests/oracles.py``
   with the tensor-core slack of ``tests/gpu/test_gemm_gluon.py``.
2. **dense**: ``gemm_fp8_nt_groupwise``'s kernel, m in {16, 64, 128, 512, 4096} x (n, k) in
   {(7168, 2048), (4096, 7168), (2112, 7168)}: the Gluon kernel with the tile ``pick_config``
   chooses and with the other tiles (to retune the rule), cuBLASLt block-scaled
   (``torch._scaled_mm`` with 1x128 / 128x128 scales already in its layout) and the tl kernel.
3. **grouped**: contiguous and masked, G in {4, 8, 32} with 256..8192 rows a group, (n, k) in
   {(4096, 7168), (7168, 2048)}: Gluon and tl, next to a dense cuBLASLt GEMM of equal FLOPs.
4. **mla**: the MLA absorb ``bmm_fp8`` shapes (128 heads, 64-512 tokens, 128 -> 512 and
   512 -> 128): the Gluon batched kernel's tiles, the tl kernel and ``torch.bmm`` in bf16
   (upstream FlashInfer's cuBLASLt ``bmm_fp8`` is timed by ``bench_gemm.py --upstream``).

``--deepgemm`` adds DeepGEMM (deepseek-ai/DeepGEMM, pinned and prepared by
``benchmarks/deepgemm_anchor.sh``, called through ``benchmarks/_deepgemm.py``) to **dense**
(``gemm_fp8_fp8_bf16_nt``) and **grouped** (``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`` and
``..._masked``): timed on the same input sets, its A scales re-laid out to its MN-major TMA-aligned
form once per set ahead of timing (as an engine does at weight load), its kernels compiled ahead
in parallel; each shape's line then shows Gluon's speedup over it (``xdeepgemm``, masked against
Gluon's masked) and the relative Frobenius error of its output against Gluon's (``rel_err_vs_ours``
in the JSON).

Kernels are called directly (``flashinfer.gemm.kernels.*``), not through the public API, so each
tier is timed as it is. Timing as ``bench_gemm.py``: CUDA-graph replay
(``triton.testing.do_bench_cudagraph``, median), inputs rotated through sets of more than the
60 MB L2. Prints a compact table (microseconds, TFLOP/s, Gluon's speedup over each anchor) and
writes ``gluon_probe.json`` to ``--out``.

Run: ``PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src python3 benchmarks/gluon_gemm_probe.py --out $OUT``;
``python3 benchmarks/gluon_gemm_probe.py --tables gluon_probe.json`` prints a probe's tables in
Markdown (those of ``benchmarks/RESULTS.md``).
(with DeepGEMM: ``bash benchmarks/deepgemm_anchor.sh setup && PYTHONPATH=...:benchmarks/.anchor/deepgemm
python3 benchmarks/gluon_gemm_probe.py --deepgemm --out $OUT``)
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path

import _deepgemm  # noqa: E402
import torch
from _harness import (  # noqa: E402
    HBM_BYTES_PER_S,
    PEAK_FLOPS,
    ceil_div,
    cublas_block_scales,
    fp8,
    grouped_inputs,
    rotating,
    tests_on_path,
)
from _harness import cudagraph_ms as bench  # noqa: E402
from report_sections.gemm import probe_tables  # noqa: E402

tests_on_path()  # the tests' oracles
from oracles import (  # noqa: E402
    bound_ratio,
    fp8_output_ratios,
    oracle_bmm,
    oracle_contiguous,
    oracle_groupwise,
    oracle_masked,
)

from flashinfer.gemm._args import Bmm, GroupedContiguous, GroupedMasked  # noqa: E402

DENSE_M = [16, 64, 128, 512, 4096]
DENSE_NK = [(7168, 2048), (4096, 7168), (2112, 7168)]
# (groups, rows a group, n, k): DeepSeek-V3 MoE shapes, the four of the grouped GEMMs' targets first
GROUPED = [
    (4, 1024, 4096, 7168),
    (8, 512, 7168, 2048),
    (32, 256, 4096, 7168),
    (4, 8192, 7168, 2048),
]
MLA_TOKENS = [64, 128, 256, 512]
E4M3 = torch.float8_e4m3fn
# the tensor cores' FP8 accumulation, in units of the result's rms (tests/gpu/test_gemm_gluon.py)
BLOCK_ACCUM_TOL, FAST_ACCUM_TOL = 2e-3, 2e-2


def groupwise(a, b, a_scale, b_scale, out, output_scale=None):
    """The record of a dense 1x128 x 128x128 call with logical scale views."""
    from flashinfer.gemm._args import Groupwise

    return Groupwise(a, b, a_scale, b_scale, False, False, 1, 128, 128, out, output_scale)


def kernels():
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise, gluon_fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm, gluon_fp8_bmm

    return gluon_fp8_blockwise, gluon_fp8_bmm, fp8_blockwise, fp8_bmm


def config_name(config) -> str:
    return f"{config.block_m}x{config.block_n}/{config.stages}"


class Report:
    def __init__(self, out_dir: Path, meta: dict):
        self.out_dir, self.meta, self.rows = out_dir, meta, []

    def add(self, **row):
        self.rows.append(row)

    def save(self):
        (self.out_dir / "gluon_probe.json").write_text(
            json.dumps({"meta": self.meta, "rows": self.rows}, indent=1)
        )


# ---------------------------------------------------------------------------------------------
# 1. correctness


def pow2(*shape):
    return 2.0 ** torch.randint(-3, 4, shape, device="cuda").float()


def check_section(report):
    glu, gbmm, _, _ = kernels()
    torch.manual_seed(1)
    configs = {config_name(c): c for c in glu.CONFIGS}

    def record(variant, shape, ratio, untouched=True):
        ok = ratio <= 1.0 and untouched
        report.add(
            section="check", variant=variant, shape=shape, error_ratio=ratio, untouched=untouched, ok=ok
        )
        print(
            f"check  {variant:34s} {shape:28s} error/bound {ratio:7.3f} {'ok' if ok else 'FAIL'}", flush=True
        )

    for name, config in configs.items():
        # dense, MN-major scales, m not a multiple of the tile, k / 128 odd
        m, n, k = 300, 2112, 7168 - 128 * 7
        a, b = fp8(m, k), fp8(n, k)
        sa = pow2(ceil_div(k, 128), m).t()
        sb = pow2(ceil_div(k, 128), ceil_div(n, 128)).t()
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        glu.gemm_groupwise(groupwise(a, b, sa, sb, out), config=config)
        expected = oracle_groupwise(a, b, sa, sb, 1, 128, 128)
        record(f"dense {name}", f"{m}x{n}x{k} MN", bound_ratio(out, *expected, slack=BLOCK_ACCUM_TOL))
        if config.block_m == 192:
            continue  # dense only
        # contiguous: DeepGEMM's layout with -1 padding rows
        groups, n, k = 4, 4096, 7168
        sizes = [200, 0, 384, 77]
        ids = torch.cat(
            [torch.cat([torch.full((r,), g), torch.full((-r % 128,), -1)]) for g, r in enumerate(sizes)]
        )
        ids = ids.int().cuda()
        rows = ids.numel()
        a, b = fp8(rows, k), fp8(groups, n, k)
        sa, sb = pow2(rows, k // 128), pow2(groups, n // 128, k // 128)
        out = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        glu.group_gemm_contiguous(GroupedContiguous(a, b, sa, sb, ids, out), config=config)
        valid = (ids >= 0)[:, None].expand(rows, n)
        ratio = bound_ratio(out, *oracle_contiguous(a, b, sa, sb, ids), valid, BLOCK_ACCUM_TOL)
        record(f"contiguous {name}", f"G={groups} rows={rows} n={n}", ratio, bool(out[~valid].isnan().all()))
        # masked: an empty group and a full one; rows past masked_m poisoned
        groups, m, n, k = 4, 512, 7168, 2048
        masked_m = torch.tensor([0, 100, 511, 512], dtype=torch.int32, device="cuda")
        a, b = fp8(groups, m, k), fp8(groups, n, k)
        sa, sb = pow2(groups, m, k // 128), pow2(groups, n // 128, k // 128)
        for g, valid in enumerate(masked_m.tolist()):
            a[g, valid:] = torch.full(a[g, valid:].shape, float("nan"), device="cuda").to(E4M3)
        out = torch.full((groups, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        glu.group_gemm_masked(GroupedMasked(a, b, sa, sb, masked_m, 256, out), config=config)
        valid = (torch.arange(m, device="cuda")[None, :, None] < masked_m[:, None, None]).expand(groups, m, n)
        ratio = bound_ratio(out, *oracle_masked(a, b, sa, sb, masked_m), valid, BLOCK_ACCUM_TOL)
        record(f"masked {name}", f"G={groups} m={m} n={n}", ratio, bool(out[~valid].isnan().all()))

    # FP8 output: the scales and the dequantized values
    m, n, k = 256, 2112, 7168
    a, b, sa, sb = fp8(m, k), fp8(n, k), pow2(m, k // 128), pow2(17, k // 128)
    out8 = torch.empty(m, n, device="cuda", dtype=E4M3)
    scales = torch.full((m, 17), float("nan"), device="cuda")
    glu.gemm_groupwise(groupwise(a, b, sa, sb, out8, scales))
    ratios = fp8_output_ratios(out8, scales, *oracle_groupwise(a, b, sa, sb, 1, 128, 128), BLOCK_ACCUM_TOL)
    for part, ratio in zip(("scales", "values"), ratios):
        record(f"dense fp8 output {part}", f"{m}x{n}x{k}", ratio)

    for config in gbmm.CONFIGS:
        for tokens, (k, n) in ((77, (128, 512)), (512, (512, 128))):
            A, B = fp8(128, tokens, k), fp8(128, n, k).transpose(1, 2)
            A_scale, B_scale = pow2(128, tokens, 1), pow2(128, 1, n)
            out = torch.full((128, tokens, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            gbmm.fp8_bmm(Bmm(A, B, out, A_scale, B_scale), config=config)
            ratio = bound_ratio(out, *oracle_bmm(A, B, A_scale, B_scale), slack=FAST_ACCUM_TOL)
            record(f"bmm {config_name(config)}", f"h=128 t={tokens} {k}->{n}", ratio)


# ---------------------------------------------------------------------------------------------
# 2-4. timings


def floor_ms(flops, moved):
    return max(moved / HBM_BYTES_PER_S, flops / PEAK_FLOPS["fp8"]) * 1e3


def time_row(report, section, shape, impl, tier, fn, sets, flops, moved, config=""):
    try:
        ms = bench(fn, sets)
    except Exception as error:  # a failing variant is reported, the others still timed
        print(f"{section:8s} {shape:32s} {impl:28s} FAILED: {error!r}", flush=True)
        report.add(section=section, shape=shape, impl=impl, tier=tier, config=config, error=repr(error))
        return None
    report.add(section=section, shape=shape, impl=impl, tier=tier, config=config, ms=ms,
               tflops=flops / ms / 1e9, floor_ms=floor_ms(flops, moved))  # fmt: skip
    return ms


def summarize(report, section, shape, times: dict, flops, moved, note=""):
    """One line: the floor, each implementation's microseconds and TFLOP/s, Gluon's speedups
    (over DeepGEMM's masked call: Gluon's masked kernel's)."""
    cells = " ".join(f"{name} {ms * 1e3:8.1f} ({flops / ms / 1e9:6.0f})" for name, ms in times.items() if ms)

    def base(name):
        return times.get("gluon masked" if name == "deepgemm masked" else "gluon")

    ratios = " ".join(
        f"x{name}={times[name] / base(name):.2f}"
        for name in times
        if name != "gluon" and times[name] and base(name)
    )
    print(
        f"{section:8s} {shape:32s} floor {floor_ms(flops, moved) * 1e3:7.1f} | {cells} | {ratios}{note}",
        flush=True,
    )


def deepgemm_precompile(shapes) -> bool:
    """DeepGEMM's kernels for ``shapes`` compiled ahead; False (reported) where that failed."""
    try:
        _deepgemm.precompile(shapes)
    except Exception:
        traceback.print_exc()
        print("DeepGEMM's kernels failed to compile: this section goes without DeepGEMM", flush=True)
        return False
    return True


def deepgemm_time(report, section, shape, impl, make, sets, flops, moved, ours, valid=None):
    """DeepGEMM's call ``make(d)`` (its layout prepared there, once per input set) timed over
    ``sets`` as ours are, after one check of its output against ``ours(d)`` on the first set
    (``valid(d)``: the rows both define). Returns (ms, relative error), Nones where it failed."""
    try:
        err = _deepgemm.attach(sets, make, ours, valid)
        ms = time_row(report, section, shape, impl, "deepgemm", lambda d: d["deepgemm"](), sets, flops, moved)
    except Exception as error:  # reported; the other rows of the shape are still timed
        print(f"{section:8s} {shape:32s} {impl:28s} FAILED: {error!r}", flush=True)
        report.add(section=section, shape=shape, impl=impl, tier="deepgemm", error=repr(error))
        return None, None
    finally:
        for d in sets:
            d.pop("deepgemm", None)
    if ms is not None:
        report.rows[-1]["rel_err_vs_ours"] = err
    return ms, err


def dense_section(report, deepgemm=False, skip_tl=False):
    glu, _, tl, _ = kernels()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if deepgemm:
        deepgemm = deepgemm_precompile([("dense", m, n, k) for n, k in DENSE_NK for m in DENSE_M])
    for n, k in DENSE_NK:
        for m in DENSE_M:

            def make(m=m, n=n, k=k):
                a, b = fp8(m, k), fp8(n, k)
                a_scale = torch.rand(m, k // 128, device="cuda") + 0.5
                b_scale = torch.rand(ceil_div(n, 128), k // 128, device="cuda") + 0.5
                sa, sb = cublas_block_scales(a_scale, b_scale)
                out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                return dict(a=a, b=b, a_scale=a_scale, b_scale=b_scale, sa=sa, sb=sb, out=out)

            sets = rotating(make, m * k + n * k)
            flops, moved = 2 * m * n * k, m * k + n * k + 2 * m * n
            shape = f"m={m} n={n} k={k}"
            picked = glu.pick_config(glu.DENSE.value, m, n, ceil_div(m, 128), num_sms, False)
            times = {}
            for config in glu.CONFIGS:
                if (m <= 64) != (config.block_m == 64):
                    continue  # 64-row tiles for small m only, and only those there
                name = "gluon" if config == picked else f"gluon {config_name(config)}"
                times[name] = time_row(
                    report, "dense", shape, name, "gluon",
                    lambda d, config=config: glu.gemm_groupwise(groupwise(d["a"], d["b"], d["a_scale"], d["b_scale"], d["out"]), config=config),
                    sets, flops, moved, config_name(config),
                )  # fmt: skip
            times["cublas"] = time_row(
                report, "dense", shape, "cuBLASLt blockwise", "cublas",
                lambda d: torch._scaled_mm(d["a"], d["b"].t(), d["sa"], d["sb"], out_dtype=torch.bfloat16, out=d["out"]),
                sets, flops, moved,
            )  # fmt: skip
            if not skip_tl:
                times["tl"] = time_row(
                    report, "dense", shape, "tl kernel", "tl",
                    lambda d: tl.gemm_groupwise(groupwise(d["a"], d["b"], d["a_scale"], d["b_scale"], d["out"])),
                    sets, flops, moved,
                )  # fmt: skip
            note = ""
            if deepgemm:
                times["deepgemm"], err = deepgemm_time(
                    report, "dense", shape, "DeepGEMM", sets=sets, flops=flops, moved=moved,
                    make=lambda d: _deepgemm.dense(d["a"], d["b"], d["a_scale"], d["b_scale"], d["out"]),
                    ours=lambda d, picked=picked: glu.gemm_groupwise(
                        groupwise(d["a"], d["b"], d["a_scale"], d["b_scale"], d["out"]), config=picked),
                )  # fmt: skip
                note = f" | deepgemm err {err:.1e}" if err is not None else ""
            summarize(report, "dense", shape, times, flops, moved, note)
            report.save()


def grouped_section(report, deepgemm=False, skip_tl=False):
    glu, _, tl, _ = kernels()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if deepgemm:
        deepgemm = deepgemm_precompile(
            [("contiguous", g * r, n, k, g) for g, r, n, k in GROUPED]
            + [("masked", r, n, k, g, r) for g, r, n, k in GROUPED]
        )
    for groups, rows, n, k in GROUPED:
        total = groups * rows

        def make(groups=groups, rows=rows, n=n, k=k):
            return grouped_inputs(groups, rows, n, k)

        sets = rotating(make, total * k + groups * n * k)
        flops, moved = 2 * total * n * k, total * k + groups * n * k + 2 * total * n
        shape = f"G={groups} rows={rows} n={n} k={k}"

        def masked(kernel, d, config=None, groups=groups, rows=rows, n=n):
            call = GroupedMasked(
                d["a"].view(groups, rows, -1), d["b"], d["a_scale"].view(groups, rows, -1), d["b_scale"],
                d["masked_m"], rows, d["out"].view(groups, rows, n),
            )  # fmt: skip
            kernel.group_gemm_masked(call, **({"config": config} if config else {}))

        def contiguous(kernel, d, config=None):
            call = GroupedContiguous(d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indices"], d["out"])
            kernel.group_gemm_contiguous(call, **({"config": config} if config else {}))

        # every 128-row tile (grouped tiles stay aligned to 128-row groups), the picked one as "gluon"
        picked = glu.pick_config(glu.CONTIGUOUS.value, total, n, ceil_div(total, 128), num_sms, False)
        times = {}
        for config in (c for c in glu.CONFIGS if c.block_m == 128):
            tag = "" if config == picked else f" {config_name(config)}"
            times["gluon" + tag] = time_row(
                report, "grouped", shape, "gluon contiguous" + tag, "gluon",
                lambda d, config=config: contiguous(glu, d, config), sets, flops, moved, config_name(config),
            )  # fmt: skip
            times["gluon masked" + tag] = time_row(
                report, "grouped", shape, "gluon masked" + tag, "gluon",
                lambda d, config=config: masked(glu, d, config), sets, flops, moved, config_name(config),
            )  # fmt: skip
        if not skip_tl:
            times["tl"] = time_row(report, "grouped", shape, "tl contiguous", "tl",
                                   lambda d: contiguous(tl, d), sets, flops, moved)  # fmt: skip
            times["tl masked"] = time_row(report, "grouped", shape, "tl masked", "tl",
                                          lambda d: masked(tl, d), sets, flops, moved)  # fmt: skip
        times |= {
            "cublas": time_row(
                report, "grouped", shape, "dense cuBLASLt, equal FLOPs", "cublas",
                lambda d: torch._scaled_mm(d["a"], d["b"][0].t(), d["sa"], d["sb"], out_dtype=torch.bfloat16,
                                           out=d["out"]),
                sets, flops, total * k + n * k + 2 * total * n,
            ),
        }  # fmt: skip
        note = ""
        if deepgemm:
            times["deepgemm"], err = deepgemm_time(
                report, "grouped", shape, "DeepGEMM contiguous", sets=sets, flops=flops, moved=moved,
                make=lambda d: _deepgemm.contiguous(d["a"], d["b"], d["a_scale"], d["b_scale"], d["m_indices"],
                                                    d["out"]),
                ours=lambda d: contiguous(glu, d), valid=lambda d: d["m_indices"] >= 0,
            )  # fmt: skip
            times["deepgemm masked"], err_masked = deepgemm_time(
                report, "grouped", shape, "DeepGEMM masked", sets=sets, flops=flops, moved=moved,
                make=lambda d, groups=groups, rows=rows, n=n: _deepgemm.masked(
                    d["a"].view(groups, rows, -1), d["b"], d["a_scale"].view(groups, rows, -1), d["b_scale"],
                    d["masked_m"], rows, d["out"].view(groups, rows, n)),
                ours=lambda d: masked(glu, d),
                valid=lambda d, rows=rows: (torch.arange(rows, device="cuda") < d["masked_m"][:, None]).flatten(),
            )  # fmt: skip
            errors = [f"{e:.1e}" if e is not None else "-" for e in (err, err_masked)]
            note = f" | deepgemm err {errors[0]} (masked {errors[1]})"
        summarize(report, "grouped", shape, times, flops, moved, note)
        report.save()


def mla_section(report):
    _, gbmm, _, tl_bmm = kernels()
    one = torch.ones((), device="cuda")
    heads = 128
    for k, n in [(128, 512), (512, 128)]:
        for tokens in MLA_TOKENS:

            def make(tokens=tokens, k=k, n=n):
                x, w = fp8(heads, tokens, k), fp8(heads, n, k)
                out = torch.empty(heads, tokens, n, device="cuda", dtype=torch.bfloat16)
                return dict(x=x, w=w, x16=x.to(torch.bfloat16), w16=w.to(torch.bfloat16), out=out)

            sets = rotating(make, heads * (tokens * k + n * k))
            flops = 2 * heads * tokens * n * k
            moved = heads * (tokens * k + n * k + 2 * tokens * n)
            shape = f"h={heads} t={tokens} {k}->{n}"
            picked = gbmm.pick_config(tokens, n)
            times = {}
            for config in gbmm.CONFIGS:
                name = "gluon" if config == picked else f"gluon {config_name(config)}"
                times[name] = time_row(
                    report, "mla", shape, name, "gluon",
                    lambda d, config=config: gbmm.fp8_bmm(Bmm(d["x"], d["w"].transpose(1, 2), d["out"], one, one), config=config),
                    sets, flops, moved, config_name(config),
                )  # fmt: skip
            times["tl"] = time_row(
                report, "mla", shape, "tl kernel", "tl",
                lambda d: tl_bmm.fp8_bmm(Bmm(d["x"], d["w"].transpose(1, 2), d["out"], one, one)), sets, flops, moved,
            )  # fmt: skip
            times["bmm bf16"] = time_row(
                report, "mla", shape, "torch.bmm bf16", "cublas",
                lambda d: torch.bmm(d["x16"], d["w16"].transpose(1, 2), out=d["out"]), sets, flops,
                moved + heads * (tokens * k + n * k),
            )  # fmt: skip
            summarize(report, "mla", shape, times, flops, moved)
            report.save()


def tables(path: Path) -> str:
    """Markdown tables of a probe's grouped and dense rows (``_tables.probe_tables``)."""
    return probe_tables(json.loads(path.read_text()))


def main():
    if sys.argv[1:2] == ["--tables"]:
        for path in sys.argv[2:]:
            print(tables(Path(path)), end="\n\n")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "probe_out"))
    parser.add_argument("--sections", default="check,dense,grouped,mla", help="comma-separated subset")
    parser.add_argument(
        "--deepgemm",
        action="store_true",
        help="dense and grouped: DeepGEMM on the same inputs (prepare with benchmarks/deepgemm_anchor.sh)",
    )
    parser.add_argument("--skip-tl", action="store_true", help="dense and grouped: leave out the tl kernels")
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import triton

    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    if args.deepgemm:
        try:
            meta["deepgemm"] = _deepgemm.describe()
        except Exception as error:  # not prepared, not importable or no compiler: say so before timing
            sys.exit(f"--deepgemm: {error}")
    print(meta, flush=True)
    report = Report(out_dir, meta)
    sections = {
        "check": check_section,
        "dense": functools.partial(dense_section, deepgemm=args.deepgemm, skip_tl=args.skip_tl),
        "grouped": functools.partial(grouped_section, deepgemm=args.deepgemm, skip_tl=args.skip_tl),
        "mla": mla_section,
    }
    for name in args.sections.split(","):
        start = time.time()
        try:
            sections[name](report)
        except Exception:  # report the failed section and still run the others
            traceback.print_exc()
            report.add(section=name, error=traceback.format_exc())
        report.meta[f"seconds_{name}"] = round(time.time() - start, 1)
        report.save()
    failed = [row for row in report.rows if row.get("ok") is False or "error" in row]
    print(f"\n{len(failed)} failed checks or errors; JSON: {out_dir / 'gluon_probe.json'}", flush=True)


if __name__ == "__main__":
    main()
