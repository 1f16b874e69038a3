"""DeepGEMM (deepseek-ai/DeepGEMM) as an in-process anchor of the FP8 GEMM benchmarks.

``benchmarks/deepgemm_anchor.sh`` prepares its pinned Python package in ``benchmarks/.anchor/deepgemm``,
which goes first on ``sys.path`` when ``load`` imports it. ``dense``, ``contiguous`` and ``masked``
take one of our input sets and return a zero-argument call of DeepGEMM's kernel on the same
tensors, writing ``out``. Its layout is prepared when that call is made, once, as an engine does at
weight load: the A scales copied to its MN-major TMA-aligned form (``get_col_major_tma_aligned_tensor``),
the B scales made contiguous; the call is then DeepGEMM's Python call alone (config lookup, TMA
descriptors, launch). ``precompile`` compiles a list of shapes' kernels ahead, in parallel.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ANCHOR = Path(__file__).resolve().parent / ".anchor" / "deepgemm"
JIT_CACHE = Path(__file__).resolve().parent / ".anchor-build" / "deepgemm-jit"
SCRIPT = "benchmarks/deepgemm_anchor.sh"

_module = None


def cuda_home() -> str | None:
    """The CUDA toolkit DeepGEMM compiles with: ``$CUDA_HOME``, else ``/usr/local/cuda``, else the
    one of ``nvcc`` on ``PATH`` (through links: DeepGEMM runs ``CUDA_HOME/bin/cuobjdump``)."""
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return home
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None


def _triton_cuobjdump() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(path) if path.exists() else None


def _deepgemm_home(home: str) -> str:
    """``home``, or where it has no ``bin/cuobjdump`` (a toolkit from pip wheels), a stand-in under
    ``benchmarks/.anchor-build`` linking one found elsewhere (``PATH``, else Triton's) and
    ``home``'s ``include``; nvcc is then named by ``DG_JIT_NVCC_COMPILER``."""
    if os.path.exists(os.path.join(home, "bin", "cuobjdump")):
        return home
    found = shutil.which("cuobjdump") or _triton_cuobjdump()
    if found is None:
        return home  # DeepGEMM fails at its first launch, naming the missing cuobjdump
    stand_in = JIT_CACHE.parent / "deepgemm-cuda"
    (stand_in / "bin").mkdir(parents=True, exist_ok=True)
    for link, target in (
        (stand_in / "bin" / "cuobjdump", found),
        (stand_in / "include", os.path.join(home, "include")),
    ):
        if os.path.realpath(link) != os.path.realpath(target):
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    os.environ.setdefault("DG_JIT_NVCC_COMPILER", os.path.join(home, "bin", "nvcc"))
    return str(stand_in)


def load(required: bool = True):
    """The ``deep_gemm`` module, imported once; None when absent and not ``required``."""
    global _module
    if _module is not None:
        return _module
    if (ANCHOR / "COMMIT").exists() and str(ANCHOR) not in sys.path:
        sys.path.insert(0, str(ANCHOR))
    # the defaults `deepgemm_anchor.sh setup` uses, so no environment has to be sourced
    os.environ.setdefault("DG_JIT_CACHE_DIR", str(JIT_CACHE))
    home = cuda_home()
    if home:
        os.environ.setdefault("CUDA_HOME", home)
    try:
        module = importlib.import_module("deep_gemm")
    except ImportError as error:
        if not required:
            return None
        raise RuntimeError(
            f"DeepGEMM is not importable ({error}). Prepare it with `bash {SCRIPT} prepare DEEPGEMM_GIT "
            f"CUTLASS_GIT` (writes {ANCHOR}, to carry to the GPU machine), then run `bash {SCRIPT} setup` "
            "there; it needs the cuda-bindings package and a CUDA toolkit with nvcc."
        ) from error
    if home:  # torch's CUDA_HOME, which DeepGEMM reads, may predate the environment set above
        from deep_gemm.jit import compiler, runtime

        home = _deepgemm_home(home)
        for mod in (compiler, runtime):
            if getattr(mod, "CUDA_HOME", None) != home:
                mod.CUDA_HOME = home
    _module = module
    return module


def version() -> str | None:
    """The DeepGEMM commit of the anchor (its ``COMMIT`` file), None without one."""
    root = ANCHOR
    if _module is not None:
        root = Path(_module.__file__).resolve().parent.parent
    commit = root / "COMMIT"
    return commit.read_text().strip() if commit.exists() else None


def describe() -> str:
    """One line: where ``deep_gemm`` comes from, its commit, the compiler and the JIT cache."""
    dg = load()
    import cuda.bindings
    from deep_gemm.jit import runtime

    nvcc, nvcc_version = dg.jit.get_nvcc_compiler()
    cuobjdump = os.path.realpath(os.path.join(runtime.CUDA_HOME or "?", "bin", "cuobjdump"))
    return (
        f"deep_gemm {(version() or '?')[:12]} from {Path(dg.__file__).parent}; nvcc {nvcc_version} ({nvcc}); "
        f"cuobjdump {cuobjdump if os.path.exists(cuobjdump) else 'MISSING: kernels cannot be loaded'}; "
        f"cuda-bindings {cuda.bindings.__version__}; JIT cache {os.environ['DG_JIT_CACHE_DIR']}"
    )


def dense(a, b, a_scale, b_scale, out):
    """``out = a @ b.T`` with 1x128 / 128x128 block scales: ``a`` (m, k) and ``b`` (n, k) e4m3,
    ``a_scale`` float32 (m, k/128) (any strides), ``b_scale`` (n/128, k/128), ``out`` (m, n) bf16."""
    dg = load()
    lhs = (a, dg.get_col_major_tma_aligned_tensor(a_scale.float()))
    rhs = (b, b_scale.float().contiguous())

    def run():
        dg.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)

    return run


def contiguous(a, b, a_scale, b_scale, m_indices, out):
    """Grouped GEMM, contiguous layout: ``a`` (M, k), ``b`` (G, n, k), ``a_scale`` (M, k/128),
    ``b_scale`` (G, n/128, k/128), ``m_indices`` int32 (M,) the group of each row, constant over
    each aligned block of ``get_m_alignment_for_contiguous_layout()`` (128) rows, ``out`` (M, n)
    bf16. DeepGEMM computes the blocks of padding rows (``m_indices`` -1) too: compare valid rows only."""
    dg = load()
    align = dg.get_m_alignment_for_contiguous_layout()
    blocks = m_indices.reshape(-1, align) if m_indices.numel() % align == 0 else None
    if blocks is None or not bool((blocks == blocks[:, :1]).all()):
        raise ValueError(f"DeepGEMM's contiguous layout needs groups aligned to {align} rows")
    lhs = (a, dg.get_col_major_tma_aligned_tensor(a_scale.float()))
    rhs = (b, b_scale.float().contiguous())
    indices = m_indices.int().contiguous()

    def run():
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, indices)

    return run


def masked(a, b, a_scale, b_scale, masked_m, expected_m, out):
    """Grouped GEMM, masked layout: ``a`` (G, m, k), ``b`` (G, n, k), ``a_scale`` (G, m, k/128),
    ``b_scale`` (G, n/128, k/128), ``masked_m`` int32 (G,) the valid rows of each group,
    ``expected_m`` (a host int) its tile hint, ``out`` (G, m, n) bf16. DeepGEMM writes whole row
    tiles: rows past ``masked_m`` may be written too."""
    dg = load()
    lhs = (a, dg.get_col_major_tma_aligned_tensor(a_scale.float()))
    rhs = (b, b_scale.float().contiguous())
    valid = masked_m.int().contiguous()

    def run():
        dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, valid, int(expected_m))

    return run


def _kernel(kind, m, n, k, groups=1, expected_m=None):
    """(name, code, template arguments) of the kernel DeepGEMM's call for this shape compiles, as
    its ``jit_kernels`` functions of this commit build them (``get_best_configs`` is theirs)."""
    from deep_gemm.jit_kernels.gemm import get_best_configs
    from deep_gemm.jit_kernels.runtime import FP8GemmRuntime, GemmType
    from deep_gemm.jit_kernels.utils import ceil_div, get_num_sms

    if kind == "dense":
        config = get_best_configs(m, n, k, 1, get_num_sms())
        name, gemm_type, k_arg, groups = "gemm_fp8_fp8_bf16_nt", GemmType.Normal, ceil_div(k, 128) * 128, 1
    elif kind == "contiguous":
        config = get_best_configs(m, n, k, 1, get_num_sms(), is_grouped_contiguous=True)
        name, gemm_type, k_arg = "m_grouped_gemm_fp8_fp8_bf16_nt", GemmType.GroupedContiguous, k
    elif kind == "masked":
        config = get_best_configs(expected_m or m, n, k, groups, get_num_sms(), is_grouped_masked=True)
        name, gemm_type, k_arg = "m_grouped_gemm_fp8_fp8_bf16_nt", GemmType.GroupedMasked, k
    else:
        raise ValueError(kind)
    _, block_m, block_n, stages, (multicast, on_a), smem = config
    kwargs = {
        "GEMM_TYPE": gemm_type, "NUM_TMA_THREADS": 128, "NUM_MATH_THREADS_PER_GROUP": 128,
        "N": n, "K": k_arg, "NUM_GROUPS": groups, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": 128,
        "SWIZZLE_D_MODE": smem[1], "BLOCK_N_PADDING": smem[2], "NUM_STAGES": stages,
        "NUM_TMA_MULTICAST": multicast, "IS_TMA_MULTICAST_ON_A": on_a,
    }  # fmt: skip
    return name, FP8GemmRuntime.generate(kwargs), kwargs


def precompile(shapes, jobs: int | None = None) -> float:
    """Compile, in parallel, the kernels DeepGEMM's calls at ``shapes`` will need, so that their
    first calls find them in its cache. Each shape is ``("dense", m, n, k)``,
    ``("contiguous", M, n, k, groups)`` or ``("masked", m, n, k, groups, expected_m)``. NVCC runs
    in threads (the GIL is released while it runs); nothing touches the GPU. Returns seconds."""
    dg = load()
    from deep_gemm.jit_kernels.runtime import FP8GemmRuntime

    start = time.time()
    kernels = {}
    for shape in shapes:
        name, code, kwargs = _kernel(*shape)
        kernels.setdefault((name, code), kwargs)
    jobs = jobs or min(len(kernels), os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(dg.jit.build, name, code, FP8GemmRuntime, kwargs) for (name, code), kwargs in kernels.items()]  # fmt: skip
        for future in futures:
            future.result()
    seconds = time.time() - start
    print(f"DeepGEMM: {len(kernels)} kernels ready in {seconds:.0f} s ({jobs} jobs)", flush=True)
    return seconds


def rel_error(ours, theirs, out, valid=None) -> float:
    """Relative Frobenius error ``||theirs - ours|| / ||ours||`` of two calls writing ``out``:
    ``ours()`` runs first and its result is kept, then ``theirs()``; ``valid`` (a boolean mask
    over ``out``'s rows, or an index) picks the rows both define."""
    ours()
    reference = out.clone()
    theirs()
    got = out
    if valid is not None:
        reference, got = reference[valid], got[valid]
    reference = reference.double()
    return ((got.double() - reference).norm() / reference.norm()).item()


def attach(sets, make, ours, valid=None) -> float:
    """Prepare DeepGEMM's call on every input set (``d["deepgemm"] = make(d)``: its layout laid out
    once, outside any timing) and return the relative error of its output against ``ours(d)`` on
    the first set (``valid(d)``: the rows both define). Pop ``"deepgemm"`` from the sets after."""
    for d in sets:
        d["deepgemm"] = make(d)
    first = sets[0]
    return rel_error(lambda: ours(first), first["deepgemm"], first["out"], valid(first) if valid else None)
