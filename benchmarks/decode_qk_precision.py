"""FP8 ``Q K^T`` precision of the sparse decode against its speed, per kernel tier.

Hopper's FP8 wgmma keeps its running sum at reduced precision, so one chain over a key row's 576
columns loses bits the op table's LSE rule (3e-4 of ``max(1, |lse|)``) notices; each setting sums
shorter chains in float32: Gluon (``mla_decode_gluon.QK_CHAINS_FP8``) 1 chain or 4 (128 latent
columns each), tl (``mla_decode.QK_IMPRECISE_ACC``) the columns after which the FP8 partial sum
is added into a float32 one. Per setting: the LSE error of the op table's FP8 samples (worst of
``--seeds``) and the CUDA-graph time of ``decode_tiers.py``'s FP8 target shapes.

Run: ``PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-mla/src python3
benchmarks/decode_qk_precision.py --out OUT_DIR``
"""

from __future__ import annotations

import argparse
import json
import os

import _harness as h
import torch
from decode_accuracy import lse_sample
from decode_tiers import measure

SAMPLES = (
    "fp8_heads80_padded",
    "fp8_heads128_topk128",
    "real_dense_fp8_q2_page64",
    "fp8_heads3_strided_out",
    "fp8_sinks_bmm2",
    "fp8_tensor_scales",
)
SHAPES = [(128, 128, 1), (128, 64, 1), (32, 128, 2), (1, 128, 1), (128, 16, 1)]  # FP8 (batch, heads, q_len)
SETTINGS = {"gluon": [1, 4], "tl": [256, 64]}


def apply(tier: str, value) -> None:
    from flashinfer.mla.kernels import mla_decode, mla_decode_gluon

    os.environ["FLASHINFER_KERNEL_TIER"] = tier
    if tier == "gluon":
        mla_decode_gluon.QK_CHAINS_FP8 = value
    else:
        mla_decode.QK_IMPRECISE_ACC = value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(h.OUT)))
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    h.require_cuda_gpu("decode_qk_precision.py")
    os.makedirs(args.out, exist_ok=True)
    from flashinfer.mla import _cuda

    rows = []
    for tier, values in SETTINGS.items():
        for value in values:
            apply(tier, value)
            for name in SAMPLES:
                errors = []
                for seed in range(args.seeds):
                    torch.manual_seed(seed)
                    errors.append(lse_sample(name))
                worst = max(e["lse_error"] or 0.0 for e in errors)
                out = max(e["out_error"] for e in errors)
                rows.append(
                    {"tier": tier, "setting": value, "sample": name, "lse_error": worst, "out_error": out}
                )
                print(f"{tier} {value!s:5} {name:28s} lse {worst:.2e} (rule 3e-4) out {out:.1e}", flush=True)
    for batch, heads, q_len in SHAPES:
        case = h.sparse_case(batch, heads, q_len, h.DTYPES["fp8"])
        plan = _cuda.decode_plan(batch, q_len, heads, h.TOPK, case["query"].device)
        line = f"fp8 B={batch:3d} H={heads:3d} q={q_len}"
        for tier, values in SETTINGS.items():
            for value in values:
                apply(tier, value)
                err, us = measure(case, plan)
                shape = {"batch": batch, "heads": heads, "q_len": q_len}
                rows.append({"tier": tier, "setting": value, **shape, "graph_us": us, "rel_err": err})
                line += f" | {tier} {value!s} {us:6.1f} us"
        print(line, flush=True)
        del case
    with open(os.path.join(args.out, "decode_qk_precision.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
