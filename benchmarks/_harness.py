"""The benchmarks' shared harness: what a GPU script needs, how every script times, the cases.

The timing loops, in one place so that every table means the same by "median", "in a graph" or
"eager": ``median_ms`` (``do_bench``, CUDA events), ``cudagraph_ms`` (``do_bench_cudagraph`` over
``rotating`` input sets, operands from HBM), ``graph_time_ms`` and ``replay_us`` (calls captured
in one CUDA graph), ``host_us`` and ``eager_wall_us`` (host clocks). The cases (the sparse
decode's pool, sglang's RoPE call, the FP8 GEMM operands) are those every script times.
Importable without a GPU: Triton and flashinfer are imported where a function needs them.
"""

from __future__ import annotations

import contextlib
import cProfile
import datetime
import importlib.util
import io
import itertools
import json
import math
import os
import pstats
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"  # the default output folder (git-ignored)
PACKAGES = ("flashinfer-core", "flashinfer-gemm", "flashinfer-mla", "flashinfer-python")

# an H200: HBM bandwidth for the GEMMs' floor (MLA measures its copy bandwidth), its L2, and the
# dense peaks as measured through PyTorch
HBM_BYTES_PER_S = 4.3e12
L2_BYTES = 60 * 2**20
PEAK_FLOPS = {"bf16": 790e12, "fp8": 1270e12}
E4M3, BF16 = torch.float8_e4m3fn, torch.bfloat16


def require_cuda_gpu(script: str) -> None:
    """Exit with a message saying what ``script`` needs when this machine lacks it.

    Parameters
    ----------
    script : str
        The script's name (and section) as the message names it.
    """
    problems = []
    if torch.version.cuda is None:
        problems.append(f"torch {torch.__version__} is built without CUDA")
    elif not torch.cuda.is_available():
        problems.append("no CUDA device is visible")
    if importlib.util.find_spec("triton") is None:
        problems.append("Triton is not installed")
    if problems:
        sys.exit(
            f"{script} times kernels on an NVIDIA GPU and cannot run here: {'; '.join(problems)}.\n"
            "It needs a CUDA build of torch (2.11 or newer), a visible CUDA device and Triton "
            "(pip install 'triton>=3.6'). benchmarks/host_time.py --section api-layer measures the "
            "API layer on the CPU."
        )


def run_meta(**extra) -> dict:
    """What a GPU run's JSON says of it: the device, torch and Triton, the UTC time, the command.

    Parameters
    ----------
    **extra
        Further entries, after those.

    Returns
    -------
    dict
        ``device``, ``torch``, ``triton``, ``date`` (ISO 8601), ``command`` and ``extra``.
    """
    import triton

    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]), **extra}  # fmt: skip


def write_json(path, report) -> None:
    """``report`` as indented JSON at ``path``, its folder made where missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))


def tests_on_path() -> None:
    """Put ``tests/`` on ``sys.path``: the tests' oracles, op table and launch stubs."""
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))


# ----------------------------------------------------------------------------- timing


def median_ms(fn) -> float:
    """Median milliseconds of ``fn()`` by CUDA events (``triton.testing.do_bench``)."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def cudagraph_ms(fn, input_sets, rep=20) -> float:
    """Median GPU milliseconds of one ``fn(inputs)``, replayed back to back from a CUDA graph.

    Parameters
    ----------
    fn : callable
        Takes one input set.
    input_sets : list
        Cycled through call by call (see ``rotating``), so operands come from HBM as in
        serving rather than from the L2 filled by the previous call.
    rep : int
        ``do_bench_cudagraph``'s repetition time in ms.

    Returns
    -------
    float
        Milliseconds per call.
    """
    import triton.testing

    sets = itertools.cycle(input_sets)
    return triton.testing.do_bench_cudagraph(lambda: fn(next(sets)), rep=rep, return_mode="median")


def rotating(make, nbytes, least=1) -> list:
    """Enough fresh input sets from ``make()`` (``least`` or more) that one cycle reads twice the L2."""
    return [make() for _ in range(min(32, max(least, ceil_div(2 * L2_BYTES, nbytes))))]


def capture(fn, calls, warmup=1):
    """A CUDA graph of ``calls`` calls of ``fn``, after ``warmup`` calls on a side stream."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def graph_time_ms(fn, calls=20) -> float:
    """Per-call time of ``calls`` launches captured in one CUDA graph (``median_ms`` of replays)."""
    return median_ms(capture(fn, calls).replay) / calls


def replay_us(graph, calls, replays, reduce=min, queued=True) -> float:
    """Per-call microseconds of timed replays of ``graph`` (of ``calls`` calls), ``reduce``-d.

    With ``queued`` each timed replay follows an untimed one still on the GPU; without, the
    graph is replayed once first and each timed replay starts on an idle GPU.
    """
    if not queued:
        graph.replay()
    times = []
    for _ in range(replays):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if queued:
            graph.replay()
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3 / calls)
    return reduce(times)


def host_us(fn, calls, rounds, warmup=0, clock=time.perf_counter_ns, sync=None, wait=False) -> float:
    """Microseconds per call of ``calls`` back-to-back calls on ``clock``, the best of ``rounds``.

    Parameters
    ----------
    fn : callable
        The call.
    calls, rounds, warmup : int
        Calls a round, rounds, and untimed calls before the first.
    clock : callable
        Nanoseconds: ``time.perf_counter_ns`` (wall) or ``time.thread_time_ns`` (this thread's CPU).
    sync : callable, optional
        ``torch.cuda.synchronize``: run before each round and after it.
    wait : bool
        Whether the round's time includes its closing ``sync`` (the GPU's work: wall time per
        call) or stops before it (the host's issue time alone).

    Returns
    -------
    float
        The best round's time per call.
    """
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(rounds):
        if sync:
            sync()
        start = clock()
        for _ in range(calls):
            fn()
        if sync and wait:
            sync()
        best = min(best, (clock() - start) / calls / 1e3)
        if sync and not wait:
            sync()
    return best


def eager_wall_us(fn, calls=2000, batches=1) -> float:
    """Wall time per call of ``calls`` back-to-back eager calls (host overhead included),
    synchronized before and after each batch; the best of ``batches``."""
    return host_us(fn, calls, batches, warmup=50, sync=torch.cuda.synchronize, wait=True)


@contextlib.contextmanager
def jit_launch(*launchers):
    """Launch through ``kernel[grid]`` (Triton's dispatcher) instead of ``FastLaunch``'s cache."""
    saved = [launcher.enabled for launcher in launchers]
    for launcher in launchers:
        launcher.enabled = False
    try:
        yield
    finally:
        for launcher, enabled in zip(launchers, saved):
            launcher.enabled = enabled


def profile(fn, calls=1000, top=12, warmup=0) -> str:
    """cProfile's ``top`` functions by own time over ``calls`` calls (the GPU's tail included)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


# ----------------------------------------------------------------------------- GEMM cases


def ceil_div(a, b):
    return -(-a // b)


def fp8(*shape, scale=2.0):
    """Random e4m3 values on the GPU (normal, times ``scale``)."""
    return (torch.randn(*shape, device="cuda") * scale).to(E4M3)


def cublas_block_scales(a_scale, b_scale):
    """Scales in the layout ``torch._scaled_mm`` reads for 1x128 x 128x128 block scaling."""
    return a_scale.t().contiguous().t(), b_scale.contiguous().t()


def grouped_inputs(groups, rows, n, k) -> dict:
    """One input set of the grouped GEMMs: ``groups`` groups of ``rows`` rows (K-major A scales),
    their ``m_indices``, ``m_indptr`` and ``masked_m``, and cuBLASLt's scales of the dense GEMM of
    equal FLOPs (``sa``, ``sb``: all rows against group 0's weight)."""
    total = groups * rows
    b = fp8(groups, n, k)
    b_scale = torch.rand(groups, n // 128, k // 128, device="cuda") + 0.5
    a = fp8(total, k)
    a_scale = torch.rand(total, k // 128, device="cuda") + 0.5
    sa, sb = cublas_block_scales(a_scale, b_scale[0])
    out = torch.empty(total, n, device="cuda", dtype=BF16)
    m_indices = torch.arange(groups, device="cuda", dtype=torch.int32).repeat_interleave(rows)
    m_indptr = torch.arange(groups + 1, device="cuda", dtype=torch.int32) * rows
    masked_m = torch.full((groups,), rows, device="cuda", dtype=torch.int32)
    return dict(a=a, b=b, a_scale=a_scale, b_scale=b_scale, sa=sa, sb=sb, out=out, m_indices=m_indices,
                m_indptr=m_indptr, masked_m=masked_m)  # fmt: skip


# ----------------------------------------------------------------------------- MLA cases

TOPK = 2048
SLOTS_PER_REQUEST = 32768
D_V, D_ROPE = 512, 64
DIM = D_V + D_ROPE
PACKED_ROW = 656  # 512 e4m3 values, 4 float32 scales, 64 bf16 RoPE values
DTYPES = {"fp8": E4M3, "bf16": BF16}
WORKSPACE_BYTES = 128 << 20


def copy_bandwidth(nbytes: int = 4 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return nbytes / (median_ms(lambda: dst.copy_(src)) * 1e-3)


def sparse_case(batch, heads, q_len, dtype, topk=TOPK, seed=0, with_kv=True) -> dict:
    """Fresh random decode inputs: each request's indices point into its own 32768-slot region
    of a pool far larger than the L2."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    slots = batch * SLOTS_PER_REQUEST
    kv = (torch.randn(slots, DIM, device="cuda", generator=gen) * 0.5).to(dtype) if with_kv else None
    query = (torch.randn(batch, q_len, heads, DIM, device="cuda", generator=gen) * 0.5).to(dtype)
    local = torch.randint(0, SLOTS_PER_REQUEST, (batch, q_len, topk), device="cuda", generator=gen)
    base = torch.arange(batch, device="cuda")[:, None, None] * SLOTS_PER_REQUEST
    return {
        "query": query, "kv": kv, "indices": (local + base).to(torch.int32),
        "seq_lens": torch.full((batch,), 4096, dtype=torch.int32, device="cuda"),
        "bmm1_scale": 1.0 / math.sqrt(192), "bmm2_scale": 1.0, "sinks": None,
        "out": torch.empty(batch, q_len, heads, D_V, dtype=BF16, device="cuda"),
        "lse": torch.empty(batch, q_len, heads, dtype=torch.float32, device="cuda"),
        "workspace": torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda"),
    }  # fmt: skip


def decode_record(case, plan, cache=None):
    """Our ``Decode`` record of ``case`` (the pool as one-token pages unless ``cache`` is given)."""
    from flashinfer.mla._args import Decode

    c = case
    if cache is not None:  # the packed rows: no sequence lengths, bmm2_scale 1
        return Decode(c["query"], cache, c["indices"], None, c["bmm1_scale"], 1.0, None, c["out"], c["lse"],
                      plan, c["workspace"])  # fmt: skip
    return Decode(c["query"], c["kv"].unsqueeze(1), c["indices"], c["seq_lens"], c["bmm1_scale"],
                  c["bmm2_scale"], c["sinks"], c["out"], c["lse"], plan, c["workspace"])  # fmt: skip


def run_sparse(impl, case, plan):
    """One sparse decode through ``impl`` (``_cuda`` or ``_reference``)."""
    impl.sparse_decode(decode_record(case, plan))


def run_packed(case, plan, cache):
    """One packed-cache decode through ``_cuda`` on ``cache`` (the 656-byte rows, paged)."""
    from flashinfer.mla import _cuda

    _cuda.packed_sparse_decode(decode_record(case, plan, cache))


def oracle_error(case) -> float:
    """max |out - ref| / max |ref| against a float64 oracle (first two requests' last token)."""
    q, kv, idx = case["query"], case["kv"], case["indices"]
    worst = 0.0
    for b in range(min(2, q.shape[0])):
        keys = kv[idx[b, -1].long()].double()
        s = case["bmm1_scale"] * q[b, -1].double() @ keys.T
        ref = torch.softmax(s, -1) @ keys[:, :D_V]
        err = (case["out"][b, -1].double() - ref).abs().max() / ref.abs().max()
        worst = max(worst, err.item())
    return worst


def decode_roofline(batch, heads, q_len, kind, copy_bw, topk=TOPK):
    """``(bytes, FLOPs, floor ms)`` of a sparse decode: q, ``topk`` gathered rows a query token
    and out; ``2 x heads x topk x (576 + 512)`` FLOPs a token; floor against the copy bandwidth."""
    elt = 1 if kind == "fp8" else 2
    tokens = batch * q_len
    nbytes = tokens * (heads * DIM * elt + topk * DIM * elt + heads * D_V * 2)
    flops = 2.0 * heads * topk * (DIM + D_V) * tokens
    return nbytes, flops, max(nbytes / copy_bw, flops / PEAK_FLOPS[kind]) * 1e3


def packed_case(batch, heads, q_len, topk=TOPK, seed=0) -> dict:
    """``sparse_case``'s shape on the packed 656-byte rows: random e4m3 codes, power-of-two
    scales (DeepSeek-V3.2's), bf16 RoPE values; a bf16 query; every column active."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    slots = batch * SLOTS_PER_REQUEST
    rows = torch.empty(slots, PACKED_ROW, dtype=torch.uint8, device="cuda")
    for start in range(0, slots, 1 << 20):  # in chunks: the float32 temporaries of all rows are 9 GB
        part = slice(start, min(slots, start + (1 << 20)))
        n = part.stop - start
        codes = (torch.randn(n, D_V, device="cuda", generator=gen) * 60).clamp(-448, 448)
        scales = torch.pow(2.0, torch.randint(-10, -5, (n, 4), device="cuda", generator=gen).float())
        rope = (torch.randn(n, D_ROPE, device="cuda", generator=gen) * 0.5).bfloat16()
        rows[part, :D_V] = codes.to(E4M3).view(torch.uint8)
        rows[part, D_V : D_V + 16] = scales.view(torch.uint8)
        rows[part, D_V + 16 :] = rope.view(torch.uint8)
    case = sparse_case(batch, heads, q_len, BF16, topk, seed + 1, with_kv=False)
    case.update(rows=rows, bmm1_scale=DIM**-0.5)
    return case


def flashmla_decode(case):
    """FlashMLA's sparse FP8 decode on a ``packed_case``'s bytes: ``(call, heads it runs)``."""
    # a sparse-decode-only build (flashmla_anchor.sh, FLASHMLA_PART=sparse-decode) may leave
    # functions of the units it skips unresolved: they are bound when called, and never are
    flags = sys.getdlopenflags()
    sys.setdlopenflags(os.RTLD_LAZY)
    try:
        import flash_mla
    finally:
        sys.setdlopenflags(flags)

    query = case["query"]
    batch, q_len, heads, _ = query.shape
    padded = 64 if heads <= 64 else 128  # its kernels take 64 or 128 heads
    if padded != heads:
        query = torch.cat((query, query.new_zeros(batch, q_len, padded - heads, DIM)), 2)
    k_cache = case["rows"].view(-1, 64, 1, PACKED_ROW)
    sched, _ = flash_mla.get_mla_metadata()

    def call():
        return flash_mla.flash_mla_with_kvcache(
            query, k_cache, None, None, D_V, sched, None, softmax_scale=case["bmm1_scale"], causal=False,
            is_fp8_kvcache=True, indices=case["indices"],
        )  # fmt: skip

    return call, padded


def decode_api_call(case):
    """The public decode call on ``sparse_case``'s tensors as an engine makes it at decode time
    (``metadata=`` and ``out=`` given, the cache as one-row pages): a callable."""
    import flashinfer.decode

    topk = case["indices"].shape[-1]
    metadata = flashinfer.decode.get_batch_decode_metadata_mla(case["query"], case["seq_lens"], topk)
    public = dict(
        query=case["query"], kv_cache=case["kv"].view(-1, 1, case["kv"].shape[-1]), workspace_buffer=case["workspace"],
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=case["indices"],
        seq_lens=case["seq_lens"], max_seq_len=4096, sparse_mla_top_k=topk, out=case["out"],
        bmm1_scale=case["bmm1_scale"], bmm2_scale=1.0, metadata=metadata,
    )  # fmt: skip
    return lambda: flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**public)


def rope_case(tokens, heads=128, with_record=True):
    """sglang's RoPE call: transposed q_nope, q_rope sliced from [T, H, 192], 2-D K slices of a
    576-wide latent row, q outputs as slices of one [T, H, 576] FP8 buffer.

    Returns
    -------
    tuple
        ``(public kwargs, our internal record (None without with_record: upstream's process),
        bytes moved)``.
    """
    dev = "cuda"
    q_nope = torch.randn(heads, tokens, D_V, dtype=BF16, device=dev).transpose(0, 1)
    q_rope = torch.randn(tokens, heads, 192, dtype=BF16, device=dev)[..., 128:]
    latent = torch.randn(tokens, DIM, dtype=BF16, device=dev)
    k_nope, k_rope = latent[:, :D_V], latent[:, D_V:]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D_ROPE, 2, device=dev).float() / D_ROPE))
    angles = torch.arange(65536, device=dev).float()[:, None] * inv_freq[None, :]
    cos_sin = torch.cat((angles.cos(), angles.sin()), -1)
    pos = torch.randint(0, 65536, (tokens,), device=dev)
    q_out = torch.empty(tokens, heads, DIM, dtype=E4M3, device=dev)
    k_rope_out = torch.empty(tokens, D_ROPE, dtype=E4M3, device=dev)
    k_nope_out = torch.empty(tokens, D_V, dtype=E4M3, device=dev)
    public = {
        "q_rope": q_rope, "k_rope": k_rope, "q_nope": q_nope, "k_nope": k_nope,
        "cos_sin_cache": cos_sin, "pos_ids": pos, "is_neox": False,
        "quantize_dtype": E4M3, "q_rope_out": q_out[..., D_V:], "k_rope_out": k_rope_out,
        "q_nope_out": q_out[..., :D_V], "k_nope_out": k_nope_out,
    }  # fmt: skip
    nbytes = tokens * (heads + 1) * DIM * (2 + 1)
    if not with_record:
        return public, None, nbytes
    from flashinfer.mla._args import Rope

    internal = Rope(q_rope, k_rope, q_nope, k_nope, cos_sin, pos, False, 1.0, 1.0, q_out[..., D_V:], k_rope_out,
                    q_out[..., :D_V], k_nope_out)  # fmt: skip
    return public, internal, nbytes
