"""RESULTS.md's Machine and Summary blocks, from the rows the section tables show."""

from __future__ import annotations

import re

from _harness import HBM_BYTES_PER_S, L2_BYTES, PEAK_FLOPS

from report_sections import FILES, load, prose, sci, shown, span, verdict
from report_sections.gemm import blockscale_rows, gemm_sections, ours, ref_ours, versus_gluon
from report_sections.host import eager_call, eager_device
from report_sections.mla import rope_rows, tier_rows

# the sparse decode's targets, FP8, in a graph: (batch, heads, q_len) -> us
DECODE_TARGETS_US = {(128, 128, 1): 150, (128, 64, 1): 100, (32, 128, 2): 80, (1, 128, 1): 15}


def machine() -> str:
    """The Machine and Method paragraphs: versions, dates and the constants of the floors."""
    runs = [load(k) for k in FILES if FILES[k].endswith(".json")]
    metas = [run["meta"] for run in runs if isinstance(run, dict) and "meta" in run]
    gpu = [m for m in metas if "triton" in m]
    one = {key: sorted({m[key] for m in gpu}) for key in ("device", "torch", "triton")}
    dates = sorted({m["date"][:10] for m in gpu if "date" in m})
    copy = [load(k)["meta"]["copy_bandwidth_gbps"] for k in ("rope", "rope_upstream", "decode_grid")]
    copy.append(load("decode_tiers")["copy_gbps"])
    machine_line = (
        f"**Machine.** One {', '.join(one['device'])}, torch {', '.join(one['torch'])}, Triton "
        f"{', '.join(one['triton'])}; runs of {' and '.join(dates)}. The API layer's host time is "
        f"measured on a CPU machine ({load('host')['meta']['machine']}, torch {load('host')['meta']['torch']})."
    )
    method = (
        "**Method.** GPU times are medians of CUDA-event timings (`triton.testing`), host overhead "
        'excluded unless a column says "eager". Inputs exceed the '
        f"{L2_BYTES / 2**20:.0f} MB L2: GEMM calls rotate through fresh random input sets, "
        'decode gathers random slots of a large KV pool. "floor" is max(bytes / bandwidth, FLOPs / peak) '
        f"with {HBM_BYTES_PER_S / 1e12:.1f} TB/s for the GEMMs and the device-to-device copy "
        f"bandwidth measured in the same run ({span(copy, 0, ' GB/s')}) for MLA, and "
        f"{PEAK_FLOPS['bf16'] / 1e12:.0f} TFLOP/s BF16 / {PEAK_FLOPS['fp8'] / 1e12:.0f} "
        'TFLOP/s FP8 dense. GEMM cells read "microseconds (TFLOP/s)". A ratio "ours vs anchor" is the '
        "anchor's time over ours: above 1 is faster than the anchor."
    )
    return prose(machine_line) + "\n\n" + prose(method)


def summary() -> str:
    """The Summary table: per op, its anchor, its target and where it is now (from the rows the
    section tables show), and whether it meets the target."""
    rows = gemm_summary() + decode_summary() + rope_summary()
    lines = ["| op | anchor | target | now | |", "|---|---|---|---|---|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def gemm_summary() -> list[list[str]]:
    """The GEMM rows of the Summary: ratio ranges over the rows of the GEMM tables."""
    gemm = gemm_sections()
    absorb = [r["vs_anchor"] for r in ours(gemm["mla"]) if "bmm_fp8" in r["impl"]]
    single = [r["vs_anchor"] for r in ours(gemm["bmm_fp8"])]
    groupwise = {r["shape"]: r["vs_anchor"] for r in ours(gemm["groupwise"]) if r["vs_anchor"]}
    large = [v for shape, v in groupwise.items() if " m=4096 " in f" {shape} "]
    small = [v for shape, v in groupwise.items() if int(re.search(r"m=(\d+)", shape)[1]) <= 512]
    now = versus_gluon("probe", "DeepGEMM")
    bf16 = {
        out: [r["vs_anchor"] for r in ours(gemm["bf16"]) if r["shape"].endswith(out)]
        for out in ("bfloat16", "float32")
    }
    blockscale = blockscale_rows()
    decode_size = [r["ratio"] for r in blockscale if int(re.search(r"m=(\d+)", r["shape"])[1]) <= 128]
    larger = [r["ratio"] for r in blockscale if int(re.search(r"m=(\d+)", r["shape"])[1]) >= 512]
    ahead = sum(shown(v) >= 1 for v in decode_size)
    return [
        ["`fp8_blockscale_gemm_sm90`, FP8 and BF16 input", "upstream FlashInfer 0.6.17's sm90 kernel, same session",
         ">= 1.0x at every row", f"{span(decode_size)} at m <= 128 ({ahead} of {len(decode_size)} rows ahead), "
         f"{span(larger)} at m >= 512",
         verdict([min(map(shown, decode_size)) >= 1, min(map(shown, larger)) >= 1], ["at m <= 128", "at m >= 512"])],
        ["`bmm_fp8`, MLA absorb, 128 heads", "`torch.bmm` BF16", "no slower", span(absorb),
         verdict([shown(v) >= 1 for v in absorb])],
        ["`bmm_fp8`, one batch", "`torch._scaled_mm` per-tensor", "-", f"{span(single)} (the same cuBLASLt call)", ""],
        ["`gemm_fp8_nt_groupwise`", "`torch._scaled_mm` blockwise", ">= 0.95x",
         f"{span(large)} at m = 4096, {span(small)} at m <= 512",
         verdict([min(map(shown, large)) >= 0.95, min(map(shown, small)) >= 0.95], ["at m = 4096", "at m <= 512"])],
        ["`group_deepgemm_fp8_nt_groupwise` / `batch_deepgemm_fp8_nt_groupwise` (Gluon, 128 x 256 tiles)",
         "DeepGEMM (78d8362), same run", ">= 0.95x",
         f"{span(now[0])} / {span(now[1])}",
         verdict([shown(v) >= 0.95 for v in now[0] + now[1]])],
        ["`bmm_bf16`", "`torch.bmm`", "-",
         f"{span(bf16['bfloat16'])} (BF16 out), {span(bf16['float32'])} (FP32 out, against `torch.bmm` + a copy)", ""],
    ]  # fmt: skip


def decode_summary() -> list[list[str]]:
    """The sparse decode rows of the Summary: cells of the decode-tiers and eager tables."""
    tiers = tier_rows()
    rows = []
    for (batch, heads, q_len), limit in DECODE_TARGETS_US.items():
        glu, tl = tiers[("fp8", batch, heads, q_len, "gluon")], tiers[("fp8", batch, heads, q_len, "tl")]
        rows.append([
            f"sparse MLA decode, FP8, B={batch}, H={heads}{f', q_len {q_len}' if q_len > 1 else ''} (Gluon)",
            f"the floor, {glu['floor_us']:.1f} us", f"<= {limit} us",
            f"{glu['graph_us']:.1f} us in a graph (tl: {tl['graph_us']:.1f})", verdict([shown(glu["graph_us"], 1) <= limit]),
        ])  # fmt: skip
    share = [
        r["floor_us"] / r["graph_us"] * 100 for r in (tiers[("fp8", 128, 16, 1, t)] for t in ("gluon", "tl"))
    ]
    glu, tl = tiers[("bf16", 128, 128, 1, "gluon")], tiers[("bf16", 128, 128, 1, "tl")]
    eager, flashmla_eager = eager_call("sparse decode B1 H128 top-k 2048", "ours", "FlashMLA")
    return rows + [
        ["sparse MLA decode, FP8, H=16 (Gluon)", "the floor (copy bandwidth)", "floor/time >= 60%",
         f"{share[0]:.0f}% at B=128 (tl: {share[1]:.0f}%)", verdict([shown(share[0], 0) >= 60])],
        ["sparse MLA decode, BF16, B=128, H=128 (Gluon)", "the tl kernel", "no slower",
         f"{glu['graph_us']:.1f} us (tl: {tl['graph_us']:.1f})",
         verdict([shown(glu["graph_us"], 1) <= shown(tl["graph_us"], 1)])],
        ["sparse MLA decode, FP8, B=1, H=128, eager public API with metadata",
         f"FlashMLA {flashmla_eager:.1f} us, same run ({eager_device()})", "<= 30 us", f"{eager:.1f} us",
         verdict([shown(eager, 1) <= 30])],
    ]  # fmt: skip


def rope_summary() -> list[list[str]]:
    """The RoPE rows of the Summary: cells of the RoPE table."""
    rope, rope_up = rope_rows("rope"), rope_rows("rope_upstream")
    share = {t: (rope[t]["copy_fraction"] * 100, rope_up[t]["copy_fraction"] * 100) for t in (4096, 16384)}
    one, one_up = rope[1], rope_up[1]
    eager, upstream = eager_call("mla_rope_quantize_fp8, 1 token", "ours", "upstream")
    return [
        ["`mla_rope_quantize_fp8`", "device-to-device copy of the same bytes", ">= 85% at >= 4096 tokens",
         ", ".join(f"{mine:.1f}% at {t}" for t, (mine, _) in share.items())
         + f" (upstream {', '.join(f'{up:.1f}%' for _, up in share.values())})",
         verdict([shown(mine, 1) >= 85 for mine, _ in share.values()], [f"at {t}" for t in share])],
        ["`mla_rope_quantize_fp8`, 1 token", "-", "<= 3 us in a graph",
         f"{one['graph_us']:.2f} us (upstream {one_up['graph_us']:.2f})", verdict([shown(one["graph_us"]) <= 3])],
        ["`mla_rope_quantize_fp8`, 1 token, eager public API", f"upstream, same run ({eager_device()})",
         "<= 15 us", f"{eager:.1f} us (upstream {upstream:.1f})", verdict([shown(eager, 1) <= 15])],
    ]  # fmt: skip


def summary_notes() -> str:
    """The reference's speed and the decode accuracy, in sentences, from the section tables' rows."""
    reference = [r["ms"] / ref_ours(r)["ms"] for r in gemm_sections()["reference"]]
    decode_ref = [r["reference_ms"] * 1e3 for r in load("decode_grid")["rows"]
                  if r.get("batch") == 1 and "reference_ms" in r]  # fmt: skip
    errors = [r["rel_err"] for r in tier_rows().values()]
    cases = [r for r in load("decode_accuracy") if "case" in r]
    worst = {tier: max(r["worst_over_bound"] for r in cases if r["tier"] == tier) for tier in ("gluon", "tl")}
    passed = all(r["passed"] == r["repeats"] for r in cases)
    repeatable = all(r["distinct_outputs"] == 1 for r in cases)
    return prose(
        "The float32 reference implementation, which any device without a faster path runs, is "
        f"{span(reference, 1)} slower than ours on the GEMM shapes measured and takes {span(decode_ref, 0, ' us')} "
        "per sparse decode at B=1, 128 heads. Every decode row of the tiers table, both tiers, is within "
        f"{sci(min(errors))} to {sci(max(errors))} (max error / max |reference|) of a float64 computation. "
        f"On {len(cases) // 2} of upstream's own sparse decode test cases, each run "
        f"{cases[0]['repeats']} times on each tier, {'every call passed' if passed else 'some calls failed'}, "
        f"{'each case giving one output' if repeatable else 'some cases giving several outputs'}; "
        f"the worst element reaches {worst['gluon']:.2f} of upstream's bound on the Gluon tier and "
        f"{worst['tl']:.2f} on the tl tier."
    )


BLOCKS = {"machine": machine, "summary": summary, "summary_notes": summary_notes}
