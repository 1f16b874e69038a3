"""Sweep the decode-size block-scaled GEMM's launch shapes on an NVIDIA GPU and write its table.

For every DeepSeek-V3 linear shape ``(n, k)`` and decode row count ``m`` (1-256), times each
candidate launch shape of ``kernels.blockwise.fp8_decode_gemm`` (and of its Gluon form) on the same
rotating input sets, next to the routes these calls took before it (cuBLASLt's blockwise
``torch._scaled_mm``, the Gluon and tl kernels) and the floor ``bytes / HBM bandwidth``; the fastest
candidate is checked once against a float64 product. ``--write-table`` writes the fastest shape per
``(n, k, multiprocessors)`` and row count, and whether cuBLASLt was faster still, into the kernel's
``decode_gemm_table.json`` (a run over some shapes replaces the whole table); the rows go to
``decode_gemm_sweep.json`` under ``--out``. The command: RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch
from _harness import (
    HBM_BYTES_PER_S,
    OUT,
    ceil_div,
    cudagraph_ms,
    require_cuda_gpu,
    rotating,
    run_meta,
    write_json,
)

NK = [(7168, 2048), (2112, 7168), (24576, 1536), (4096, 7168), (7168, 16384)]
MS = [1, 8, 16, 32, 64, 128, 256]
SMEM_BUDGET = 210 * 1024  # of the 227 KB a program may hold, room left for the kernel's own


def candidates(m, n, k, num_sms, decode):
    """Launch shapes worth timing for ``m x n x k``: weight rows on the MMA's row side (TMA tiles
    of 16-256 rows, and the pointer-load kernel at 64 rows), and from m = 32 tokens on it
    (DeepGEMM's orientation: 64 or 128 tokens x 16-64 weight rows); pipelines as deep as shared
    memory allows; K splits up to 4 programs a multiprocessor."""
    fit = min(max(16, 1 << (m - 1).bit_length()), 128)
    shapes = [
        (fit, block_n, tma, True)
        for block_n, tma in [(16, True), (32, True), (64, True), (128, True), (256, True), (64, False)]
    ]
    if m > 64:
        shapes += [(64, block_n, True, True) for block_n in (64, 128)]
    if m >= 32:
        shapes += [
            (block_m, block_n, True, False) for block_m in sorted({64, fit}) for block_n in (16, 32, 64)
        ]
    k_steps = ceil_div(k, 128)
    seen = set()
    for block_m, block_n, tma, swap in shapes:
        if swap and ((block_n < 32 and block_m > 32) or (block_n == 256 and block_m > 64)):
            continue
        tiles = ceil_div(n, block_n) * ceil_div(m, block_m)
        stage_bytes = (block_n + block_m) * 128
        warps = 8 if block_n * block_m >= 128 * 64 else 4
        deep = max(2, min(10, SMEM_BUDGET // stage_bytes))
        for split in (1, 2, 3, 4, 6, 8, 12, 16):
            steps = ceil_div(k_steps, split)
            split = ceil_div(k_steps, steps)
            if steps < 2 or tiles * split > 4 * num_sms:
                continue
            config = decode.DecodeGemmConfig(block_n, block_m, split, deep if tma else 4, warps, tma, swap)
            if config not in seen:
                seen.add(config)
                yield config


def gluon_candidates(m, n, k, num_sms, decode, gluon_decode):
    """Launch shapes of the Gluon kernel: 64 or 128 weight rows (one or two math warpgroups), all
    tokens in one tile (8-128, a power of two) or, above 64, in 64-token tiles; K splits up to 4
    programs a multiprocessor; the deepest ring, and one that lets two programs share a
    multiprocessor."""
    fit = min(max(8, 1 << (m - 1).bit_length()), 128)
    k_steps = ceil_div(k, 128)
    seen = set()
    for block_n in (64, 128):
        for block_m in sorted({fit, 64} if m > 64 else {fit}):
            tiles = ceil_div(n, block_n) * ceil_div(m, block_m)
            deep = gluon_decode.stages_for(block_n, block_m)
            shared = max(2, min(deep, (100 * 1024) // ((block_n + block_m) * 132)))
            for split in (1, 2, 3, 4, 6, 8, 12, 16):
                steps = ceil_div(k_steps, split)
                split = ceil_div(k_steps, steps)
                if steps < 2 or tiles * split > 4 * num_sms:
                    continue
                for stages in sorted({deep, shared}):
                    config = decode.DecodeGemmConfig(block_n, block_m, split, stages, 4, True, True, True)
                    if config not in seen:
                        seen.add(config)
                        yield config


def write_tables(tables: dict) -> None:
    """Rewrite ``decode_gemm_table.json`` with the swept tables (``TABLE``, ``GLUON_TABLE``) and the
    others as they are."""
    from flashinfer.gemm.kernels.blockwise import decode_gemm_table

    current = {"TABLE": decode_gemm_table.TABLE, "GLUON_TABLE": decode_gemm_table.GLUON_TABLE}
    current.update({name: table for name, table in tables.items() if table})
    decode_gemm_table.PATH.write_text(decode_gemm_table.dumps(current))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--write-table", action="store_true")
    parser.add_argument("--ms", default=",".join(map(str, MS)))
    parser.add_argument("--nk", default=";".join(f"{n},{k}" for n, k in NK))
    parser.add_argument("--kernels", default="tl,gluon", help="which kernels' launch shapes to sweep")
    args = parser.parse_args()
    require_cuda_gpu("decode_gemm_sweep.py")

    from flashinfer._core.kernel_tier import gluon_supported
    from flashinfer.gemm._args import Groupwise
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.blockwise import fp8_decode_gemm as decode

    device = torch.device("cuda", torch.cuda.current_device())
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count
    gluon = gluon_decode = None
    if gluon_supported(device.index):
        from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise as gluon
        from flashinfer.gemm.kernels.blockwise import gluon_fp8_decode_gemm as gluon_decode
    kernels = args.kernels.split(",")
    if gluon_decode is None and "gluon" in kernels:
        kernels.remove("gluon")
    ms = [int(x) for x in args.ms.split(",")]
    nks = [tuple(map(int, x.split(","))) for x in args.nk.split(";")]
    rows, tables = [], {"TABLE": {}, "GLUON_TABLE": {}}
    started = time.time()
    meta = run_meta(sms=num_sms)
    for n, k in nks:
        kb = ceil_div(k, 128)
        for m in ms:

            def make(m=m, n=n, k=k, kb=kb):
                a = (torch.randn(m, k, device=device) * 2).to(torch.float8_e4m3fn)
                b = (torch.randn(n, k, device=device) * 2).to(torch.float8_e4m3fn)
                # activation scales column-major (m, k/128), as upstream's kernel and cuBLASLt read
                sa = (torch.rand(kb, m, device=device) + 0.5).t()
                sb = torch.rand(ceil_div(n, 128), kb, device=device) + 0.5
                out = torch.empty(m, n, device=device, dtype=torch.bfloat16)
                return Groupwise(a, b, sa, sb, False, False, 1, 128, 128, out)

            nbytes = m * k + n * k
            sets = rotating(make, nbytes, least=2)
            floor_us = (nbytes + 2 * m * n) / HBM_BYTES_PER_S * 1e6

            def time_us(fn, rep=20, sets=sets):
                return 1e3 * cudagraph_ms(fn, sets, rep)

            shape = {"m": m, "n": n, "k": k}
            anchors = {}
            if m % 4 == 0:
                anchors["cublas"] = time_us(
                    lambda c: torch._scaled_mm(
                        c.a, c.b.t(), c.a_scale, c.b_scale.t(), out_dtype=torch.bfloat16, out=c.out
                    )
                )
            if gluon is not None:
                anchors["gluon"] = time_us(gluon.gemm_groupwise)
            anchors["tl"] = time_us(fp8_blockwise.gemm_groupwise)
            tl_table = decode.pick_config(m, n, k, num_sms)
            anchors["decode_tl_table"] = time_us(lambda c, config=tl_table: decode.gemm_groupwise(c, config))
            # the float64 product the winners are checked against, once
            c = sets[0]
            a64 = c.a.double().view(m, kb, 128) * c.a_scale.double()[:, :, None]
            b64 = c.b.double().view(n, kb, 128) * c.b_scale.double().repeat_interleave(128, 0)[:n, :, None]
            ref = a64.view(m, k) @ b64.view(n, k).t()
            for kernel in kernels:
                # the Gluon tier's table holds the fastest launch on that tier: the portable
                # kernel's tabled shape competes
                sweep = (
                    [tl_table, *gluon_candidates(m, n, k, num_sms, decode, gluon_decode)]
                    if kernel == "gluon"
                    else candidates(m, n, k, num_sms, decode)
                )
                # every candidate briefly, then the five fastest again at full length
                timed = []
                for config in sweep:
                    us = time_us(lambda c, config=config: decode.gemm_groupwise(c, config), rep=2)
                    timed.append((us, config))
                timed.sort(key=lambda t: t[0])
                timed[:5] = sorted(
                    (
                        (time_us(lambda c, config=config: decode.gemm_groupwise(c, config)), config)
                        for _, config in timed[:5]
                    ),
                    key=lambda t: t[0],
                )
                best_us, best = timed[0]
                heuristic = decode._heuristic(m, n, k, num_sms, kernel == "gluon")
                heuristic_us = next((us for us, c in timed if c == heuristic), None)
                c.out.fill_(float("nan"))
                decode.gemm_groupwise(c, best)
                err = ((c.out.double() - ref).norm() / ref.norm()).item()
                cublas_ahead = anchors.get("cublas", float("inf")) < best_us
                row = dict(
                    shape, kernel=kernel, best_us=best_us, cublas_ahead=cublas_ahead, best=list(dataclasses.astuple(best)), floor_us=floor_us,
                    rel_err=err, heuristic_us=heuristic_us, anchors_us=anchors, candidates=len(timed),
                    top=[[us, list(cfg.__dict__.values())] for us, cfg in timed[:5]],
                )  # fmt: skip
                rows.append(row)
                table = tables["GLUON_TABLE" if kernel == "gluon" else "TABLE"]
                table.setdefault((n, k, num_sms), []).append((m, dataclasses.astuple(best), cublas_ahead))
                others = " ".join(f"{name} {us:.1f}" for name, us in anchors.items())
                print(
                    f"m={m:4d} n={n:5d} k={k:5d} {kernel:5s} best {best_us:6.1f} us {dataclasses.astuple(best)}  "
                    f"heuristic {heuristic_us or float('nan'):6.1f}  floor {floor_us:5.1f}  {others}  "
                    f"err {err:.1e}  ({len(timed)} configs, {time.time() - started:.0f} s)",
                    flush=True,
                )
            # written after every row: a run cut short still leaves what it measured
            write_json(args.out / "decode_gemm_sweep.json", {"meta": meta, "rows": rows})
            if args.write_table:
                write_tables(tables)


if __name__ == "__main__":
    main()
