"""The headline rows under one Triton release: time per call and the kernels ``auto`` launches.

Run once per release on the same GPU (the release: whichever ``triton`` is importable, e.g. a
copy made by ``../shared/tools/slim_triton.sh`` first on ``PYTHONPATH``; ``triton_release_gpu.sh``
runs it under the machine's Triton and a release). Rows, each through the public API under
``FLASHINFER_KERNEL_TIER=auto``: the sparse MLA decode (128 heads, top-k 2048, a pool far past
the L2), the grouped GEMMs and the decode-size block-scaled GEMM; each timed as ``CALLS`` calls in
one CUDA graph, the median of ``REPLAYS`` replays, per call. The kernels a call launches are read
once, outside the timing, through Triton's launch hook.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
from functools import partial

from _harness import capture, replay_us, require_cuda_gpu
from _harness import fp8 as _fp8

CALLS, REPLAYS = 10, 30
fp8 = partial(_fp8, scale=0.5)


def decode_row(dtype: str, batch: int, heads: int = 128, top_k: int = 2048):
    import torch

    from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla

    element = torch.float8_e4m3fn if dtype == "fp8" else torch.bfloat16
    pool_pages, page = 1 << 14, 64  # 1M rows: 576 MB of FP8 rows, far past the L2
    kv = torch.randn(pool_pages, page, 576, device="cuda").to(element)
    query = torch.randn(batch, 1, heads, 576, device="cuda").to(element)
    slots = torch.randint(0, pool_pages * page, (batch, 1, top_k), dtype=torch.int32, device="cuda")
    seq_lens = torch.full((batch,), pool_pages * page, dtype=torch.int32, device="cuda")
    workspace = torch.empty(1 << 27, dtype=torch.uint8, device="cuda")
    metadata = get_batch_decode_metadata_mla(query, seq_lens, top_k)
    out = torch.empty(batch, 1, heads, 512, dtype=torch.bfloat16, device="cuda")

    def call():
        trtllm_batch_decode_with_kv_cache_mla(
            query, kv, workspace, qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64,
            block_tables=slots, seq_lens=seq_lens, max_seq_len=pool_pages * page,
            sparse_mla_top_k=top_k, bmm1_scale=192**-0.5, metadata=metadata, out=out,
        )  # fmt: skip

    return f"decode {dtype} B{batch} H{heads}", call


def grouped_contiguous_row(groups=4, rows=8192, n=7168, k=2048):
    import torch

    from flashinfer.gemm import group_deepgemm_fp8_nt_groupwise

    a, b = fp8(groups * rows, k), fp8(groups, n, k)
    a_scale = torch.rand(k // 128, groups * rows, device="cuda").t()  # MN-major, as DeepGEMM's
    b_scale = torch.rand(groups, n // 128, k // 128, device="cuda")
    m_indices = torch.arange(groups, dtype=torch.int32, device="cuda").repeat_interleave(rows)
    out = torch.empty(groups * rows, n, dtype=torch.bfloat16, device="cuda")

    def call():
        group_deepgemm_fp8_nt_groupwise(a, b, a_scale, b_scale, m_indices, out=out)

    return f"grouped contiguous G{groups}x{rows} n{n} k{k}", call


def grouped_masked_row(groups=32, rows=256, expected=64, n=7168, k=2048):
    import torch

    from flashinfer.gemm import batch_deepgemm_fp8_nt_groupwise

    a, b = fp8(groups, rows, k), fp8(groups, n, k)
    a_scale = torch.rand(groups, k // 128, rows, device="cuda").transpose(1, 2)
    b_scale = torch.rand(groups, n // 128, k // 128, device="cuda")
    masked_m = torch.randint(0, 2 * expected + 1, (groups,), dtype=torch.int32, device="cuda")
    out = torch.empty(groups, rows, n, dtype=torch.bfloat16, device="cuda")

    def call():
        batch_deepgemm_fp8_nt_groupwise(a, b, a_scale, b_scale, masked_m, expected, out=out)

    return f"grouped masked G{groups} expected_m {expected} n{n} k{k}", call


def decode_size_row(m=16, n=7168, k=2048):
    import torch

    from flashinfer.gemm import gemm_fp8_nt_groupwise

    a, b = fp8(m, k), fp8(n, k)
    a_scale = torch.rand(m, -(-k // 128), device="cuda")
    b_scale = torch.rand(-(-n // 128), -(-k // 128), device="cuda")
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")

    def call():
        gemm_fp8_nt_groupwise(a, b, a_scale, b_scale, "K", out=out)

    return f"decode-size gemm_fp8_nt_groupwise m{m} n{n} k{k}", call


ROWS = [
    lambda: decode_row("fp8", 128),
    lambda: decode_row("fp8", 1),
    lambda: decode_row("bf16", 128),
    grouped_contiguous_row,
    grouped_masked_row,
    decode_size_row,
    lambda: decode_size_row(m=64, n=2112, k=7168),
]


def kernels_launched(call) -> list[str]:
    """The names of the Triton kernels one call launches (through the launch hook)."""
    import torch
    from triton import knobs

    names = []

    def hook(metadata):
        names.append(getattr(metadata, "data", {}).get("name", "?"))

    chain = knobs.runtime.launch_enter_hook  # a chain of hooks (Triton >= 3.5)
    chain.add(hook)
    try:
        call()
    finally:
        chain.remove(hook)
    torch.cuda.synchronize()
    return sorted(set(names))


def time_per_call(call) -> float:
    """Median microseconds per call over CUDA-graph replays of ``CALLS`` calls (three calls
    first: they compile, tune and bind the replay)."""
    return replay_us(capture(call, CALLS, warmup=3), CALLS, REPLAYS, statistics.median, queued=False)


def measure(path: str) -> None:
    require_cuda_gpu("triton_releases.py")
    import torch
    import triton

    from flashinfer._core.kernel_tier import gluon_supported

    os.environ.setdefault("FLASHINFER_KERNEL_TIER", "auto")
    rows = []
    for make in ROWS:
        torch.manual_seed(0)
        name, call = make()
        entry = {"row": name}
        try:
            entry["us"] = round(time_per_call(call), 2)
            entry["kernels"] = kernels_launched(call)
        except Exception as error:  # reported, the other rows still timed
            entry["error"] = f"{type(error).__name__}: {error}"[:500]
        print(json.dumps(entry), flush=True)
        rows.append(entry)
        del call
        torch.cuda.empty_cache()
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "gluon_tier": gluon_supported(torch.cuda.current_device()),
        "rows": rows,
    }
    with open(path, "w") as file:
        json.dump(report, file, indent=1)


def table(paths: list[str]) -> str:
    """Markdown: one row per headline row, a column per release (time, ratio to the first)."""
    runs = [json.load(open(p)) for p in paths]
    head = "| row | " + " | ".join(f"Triton {r['triton']}" for r in runs) + " |"
    lines = [head, "|---" * (len(runs) + 1) + "|"]
    for i, row in enumerate(runs[0]["rows"]):
        cells = []
        for run in runs:
            other = run["rows"][i]
            if "us" not in other:
                cells.append(other.get("error", "-"))
                continue
            ratio = f", {row['us'] / other['us']:.2f}x" if run is not runs[0] and "us" in row else ""
            cells.append(f"{other['us']:.1f} us{ratio} ({', '.join(other['kernels'])})")
        lines.append(f"| {row['row']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="time the rows under this Triton and write them here")
    parser.add_argument("--table", nargs="+", help="runs to put side by side (the first is the base)")
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
    elif args.json:
        measure(args.json)
    else:
        parser.error("give --json PATH or --table RUN...")


if __name__ == "__main__":
    main()
