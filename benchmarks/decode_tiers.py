"""Sparse MLA decode on one CUDA device: the Gluon kernel next to the portable Triton kernel.

For each shape and kernel tier (``FLASHINFER_KERNEL_TIER``): the error against a float64 oracle
and the time per call in a CUDA graph (``_harness.sparse_case``'s inputs), next to the floor from
the measured copy bandwidth. ``--variants`` also times other Gluon tiles and split counts. The
command: RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

import _harness as h

SHAPES = [  # (dtype, batch, heads, q_len)
    ("fp8", 128, 128, 1), ("fp8", 128, 64, 1), ("fp8", 32, 128, 2), ("fp8", 1, 128, 1),
    ("fp8", 128, 16, 1), ("fp8", 64, 128, 1), ("fp8", 64, 64, 1), ("fp8", 32, 128, 1),
    ("fp8", 128, 128, 2), ("bf16", 128, 128, 1), ("bf16", 32, 64, 1), ("bf16", 8, 16, 1),
]  # fmt: skip
VARIANT_SHAPES = [("fp8", 128, 128, 1), ("fp8", 128, 16, 1), ("fp8", 1, 128, 1), ("bf16", 128, 128, 1)]


def measure(case, plan):
    """(error against the float64 oracle, CUDA-graph time in us) of one decode through ``_cuda``."""
    from flashinfer.mla import _cuda

    h.run_sparse(_cuda, case, plan)
    err = h.oracle_error(case)
    return err, h.graph_time_ms(lambda: h.run_sparse(_cuda, case, plan)) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(h.OUT)))
    parser.add_argument("--variants", action="store_true", help="also time other Gluon tiles")
    parser.add_argument("--tiers", default="gluon,tl")
    parser.add_argument("--shapes", default="all", help="'all' or 'none'")
    args = parser.parse_args()
    h.require_cuda_gpu("decode_tiers.py")
    os.makedirs(args.out, exist_ok=True)
    from flashinfer.mla import _cuda
    from flashinfer.mla.kernels import mla_decode_gluon as glu

    copy_bw = h.copy_bandwidth()
    print(f"copy {copy_bw * 1e-9:.0f} GB/s", flush=True)
    rows = []
    for kind, batch, heads, q_len in SHAPES if args.shapes == "all" else []:
        case = h.sparse_case(batch, heads, q_len, h.DTYPES[kind])
        plan = _cuda.decode_plan(batch, q_len, heads, h.TOPK, case["query"].device)
        nbytes, flops, floor_ms = h.decode_roofline(batch, heads, q_len, kind, copy_bw)
        line = f"{kind:4s} B={batch:3d} H={heads:3d} q={q_len} floor {floor_ms * 1e3:6.1f} us"
        for tier in args.tiers.split(","):
            os.environ["FLASHINFER_KERNEL_TIER"] = tier
            err, us = measure(case, plan)
            rows.append({"dtype": kind, "batch": batch, "heads": heads, "q_len": q_len, "tier": tier,
                         "graph_us": us, "rel_err": err, "floor_us": floor_ms * 1e3,
                         "gbps": nbytes / us * 1e-3, "tflops": flops / us * 1e-6})  # fmt: skip
            line += f" | {tier} {us:7.1f} us err {err:.1e} ({nbytes / us * 1e-3:5.0f} GB/s)"
        print(line, flush=True)
        del case
    os.environ["FLASHINFER_KERNEL_TIER"] = "gluon"
    if args.variants:  # BF16's other tile (FP8 has none left to try), and split counts at batch 1
        default = glu.BF16_CONFIG
        for kind, batch, heads, q_len in VARIANT_SHAPES:
            case = h.sparse_case(batch, heads, q_len, h.DTYPES[kind])
            plan = _cuda.decode_plan(batch, q_len, heads, h.TOPK, case["query"].device)
            variants = {}
            if kind == "bf16":
                config = glu.GluonDecodeConfig(block_n=32, stages=2, max_slack_log2=0.0)
                variants[str(config)] = (plan, config)
            if batch == 1:  # more, shorter chunks against the combine's cost
                for splits in (8, 32):
                    gluon_plan = dataclasses.replace(plan.gluon, num_splits=splits)
                    variants[f"splits={splits}"] = (_cuda.DecodePlans(plan.portable, gluon_plan), default)
            for name, (variant_plan, config) in variants.items():
                glu.BF16_CONFIG = config
                try:
                    err, us = measure(case, variant_plan)
                except Exception as exc:  # a tile that does not compile or fit is reported
                    print(f"variant {kind} B={batch} H={heads} {name}: {type(exc).__name__}: {exc}"[:300])
                    continue
                finally:
                    glu.BF16_CONFIG = default
                rows.append({"dtype": kind, "batch": batch, "heads": heads, "q_len": q_len, "variant": name,
                             "graph_us": us, "rel_err": err})  # fmt: skip
                print(
                    f"variant {kind} B={batch:3d} H={heads:3d} {name}: {us:7.1f} us err {err:.1e}", flush=True
                )
            del case
    with open(os.path.join(args.out, "decode_tiers.json"), "w") as f:
        json.dump({"copy_gbps": copy_bw * 1e-9, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
