"""Host time of an eager call's whole NVIDIA path, on the CPU: issue 32's calls between device runs.

``eager_calls.py`` times these calls on a GPU. Here, without one, the NVIDIA implementation runs
on CPU tensors of the same shapes against a stubbed H200 (``tests/core/launch_protocol.py``'s
``install``: compute capability 9.0, 132 multiprocessors, the ``auto`` tier), with the real
``FastLaunch`` and its bound launches in front of a compiled launcher that does nothing: validation,
the implementation's choices, the launch layer and any replay (``flashinfer._core.replay``), all
but the driver's launch and the GPU. Each row is the thread's CPU time per call, best of many
rounds of back-to-back calls. CPU tensor allocations cost less than CUDA ones and the driver's
launch (a few us a kernel on the H200's host) is not here: compare rows across trees, not with
the GPU's wall times.

Against an older commit (``--baseline REV``): REV's packages (``git archive``) and this tree's
each run in fresh processes, alternately in ABBA order, ``--repeat`` times each, best per row.

Run from the repository root:
``python benchmarks/eager_host_cpu.py [--baseline REV [--repeat N]] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flashinfer-core", "flashinfer-gemm", "flashinfer-mla", "flashinfer-python")


def _stub_launches() -> None:
    """The NVIDIA path on CPU tensors with every Triton launch reaching a no-op compiled
    launcher through the real launch layer (what a tree's FastLaunch does with it is timed)."""
    import types

    sys.path.insert(0, str(ROOT / "tests" / "core"))
    import launch_protocol
    from triton.compiler import CompiledKernel

    from flashinfer._core import triton_launch
    from flashinfer.gemm.kernels.blockwise import fp8_decode_gemm, gluon_fp8_decode_gemm  # noqa: F401 (stubbed below)

    class Nothing(launch_protocol.Recorder):  # library calls (cuBLASLt) recorded as nothing
        def record(self, *args, **kwargs):
            pass

    launch = triton_launch.FastLaunch.launch
    launch_protocol.install(Nothing(), device := {})
    launch_protocol.set_device(device, "h200")
    triton_launch.FastLaunch.launch = launch  # install() records launches instead: run them
    for name in ("_current_device", "_current_stream"):  # this tree's device queries, if it has them
        if hasattr(triton_launch, name):
            setattr(triton_launch, name, (lambda: -1) if name == "_current_device" else (lambda index: 0))
    active = types.SimpleNamespace(get_current_device=lambda: -1, get_current_stream=lambda index: 0)
    triton_launch.driver = types.SimpleNamespace(active=active)

    class Launcher:  # Triton 3.6's CudaLauncher without a kernel: its C launch does nothing
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid = launch_pdl = False

        def __init__(self):
            self.launch = lambda *args: None

        def __call__(self, gx, gy, gz, stream, function, *args):
            self.launch(gx, gy, gz, stream, function, False, False, None, None, *args)

    class Compiled(CompiledKernel):
        run = None

        def __init__(self):
            self.run, self.function, self.packed_metadata, self.module = Launcher(), 0, (), None

    class Kernel:  # the JIT function's face that FastLaunch reads: its parameters, its launch
        def __init__(self, fn):
            self.params, self.__name__, self.compiled = fn.params, fn.__name__, Compiled()

        def __getitem__(self, grid):
            return lambda *args, **kwargs: self.compiled

    for module in [m for name, m in list(sys.modules.items()) if name.startswith("flashinfer") and m]:
        for value in list(vars(module).values()):
            if isinstance(value, triton_launch.FastLaunch) and not isinstance(value.kernel, Kernel):
                value.kernel, value.enabled = Kernel(value.kernel), True


def calls() -> dict:
    """Issue 32's eager calls (``eager_calls.py``'s rows) on CPU tensors."""
    import torch

    import flashinfer.decode
    import flashinfer.gemm as fg
    import flashinfer.rope

    e4m3, bf16 = torch.float8_e4m3fn, torch.bfloat16
    m, n, k = 1, 2112, 7168
    x16, x, w = torch.randn(m, k).to(bf16), torch.randn(m, k).to(e4m3), torch.randn(n, k).to(e4m3)
    w_scale, x_scale = torch.rand(17, k // 128) + 0.5, (torch.rand(k // 128, 4) + 0.5)[:, :m]
    out, one = torch.empty(m, n, dtype=bf16), torch.ones(())
    latent, heads = torch.randn(1, 576).to(bf16), 128
    q_out, k_out = torch.empty(1, heads, 576, dtype=e4m3), torch.empty(1, 576, dtype=e4m3)
    rope = dict(
        q_rope=torch.randn(1, heads, 64).to(bf16), k_rope=latent[:, 512:], q_nope=torch.randn(1, heads, 512).to(bf16),
        k_nope=latent[:, :512], cos_sin_cache=torch.randn(4096, 64), pos_ids=torch.randint(0, 4096, (1,)),
        is_neox=False, q_rope_out=q_out[..., 512:], q_nope_out=q_out[..., :512], k_rope_out=k_out[:, 512:],
        k_nope_out=k_out[:, :512],
    )  # fmt: skip
    query, seq_lens = torch.randn(1, 1, heads, 576).to(e4m3), torch.full((1,), 4096, dtype=torch.int32)
    decode = dict(
        query=query, kv_cache=torch.randn(64, 64, 576).to(e4m3), workspace_buffer=torch.empty(64 << 20, dtype=torch.uint8),
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64,
        block_tables=torch.randint(0, 4096, (1, 1, 2048), dtype=torch.int32), seq_lens=seq_lens, max_seq_len=4096,
        sparse_mla_top_k=2048, bmm1_scale=0.07, bmm2_scale=1.0, out=torch.empty(1, 1, heads, 512, dtype=bf16),
        metadata=flashinfer.decode.get_batch_decode_metadata_mla(query, seq_lens, 2048),
    )  # fmt: skip
    return {
        "mla_rope_quantize_fp8, 1 token": lambda: flashinfer.rope.mla_rope_quantize_fp8(**rope),
        "bmm_fp8, m=1 n=2112 k=7168": lambda: fg.bmm_fp8(
            x.unsqueeze(0), w.unsqueeze(0).transpose(1, 2), one, one, bf16, out.unsqueeze(0)
        ),
        "fp8_blockscale_gemm_sm90, BF16 input": lambda: fg.fp8_blockscale_gemm_sm90(
            x16, w, None, w_scale, out=out
        ),
        "fp8_blockscale_gemm_sm90, FP8 input": lambda: fg.fp8_blockscale_gemm_sm90(
            x, w, x_scale, w_scale, out=out
        ),
        "sparse decode B1 H128 top-k 2048, metadata, out=": lambda: (
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**decode)
        ),
    }


def host_us(fn, calls_per_round=500, rounds=30) -> float:
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time_ns()
        for _ in range(calls_per_round):
            fn()
        best = min(best, (time.thread_time_ns() - start) / calls_per_round / 1e3)
    return best


def measure() -> dict:
    _stub_launches()
    return {name: host_us(fn) for name, fn in calls().items()}


def _tree_rows(packages: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(packages / p / "src") for p in PACKAGES)}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run(
        [sys.executable, __file__, "--rows"], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="an older commit to time beside this tree (ABBA)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each tree (best per row)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--rows", action="store_true", help=argparse.SUPPRESS)  # one tree, in a subprocess
    args = parser.parse_args()
    if args.rows:
        print(json.dumps(measure()))
        return
    trees = {"this tree": ROOT / "packages"}
    with tempfile.TemporaryDirectory() as folder:
        if args.baseline:
            archive = subprocess.run(
                ["git", "archive", args.baseline, "packages"], cwd=ROOT, capture_output=True, check=True
            ).stdout
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(folder, filter="data")
            trees[args.baseline] = Path(folder) / "packages"
        best: dict = {}
        order = list(trees)
        for i in range(args.repeat):
            for tree in order if i % 2 == 0 else order[::-1]:
                for row, us in _tree_rows(trees[tree]).items():
                    best.setdefault(row, {})[tree] = min(us, best.get(row, {}).get(tree, float("inf")))
    print(f"{'call':52s} " + " ".join(f"{t:>12s}" for t in trees))
    for row, times in best.items():
        print(f"{row:52s} " + " ".join(f"{times[t]:9.2f} us" for t in trees))
    if args.json:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        meta = {
            "machine": os.uname().machine, "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "this tree": f"{commit.stdout.strip()} and its working tree's changes, if any",
        }  # fmt: skip
        args.json.write_text(json.dumps({"meta": {**meta, "trees": list(trees)}, "rows": best}, indent=1))


if __name__ == "__main__":
    main()
