#!/usr/bin/env bash
# Upstream FlashInfer (flashinfer-python VERSION from PyPI) importable on the GPU machine: the in-run
# anchor of `bench_gemm.py --upstream` (sections blockscale, bmm_fp8, mla), upstream's own
# `fp8_blockscale_gemm_sm90` (its SM90 JIT module) and `bmm_fp8` (cuBLASLt) on our inputs.
#
#   prepare   (a machine with PyPI) writes benchmarks/.anchor/upstream-wheels/ (git-ignored, ~19 MB):
#             the cp312 wheels of flashinfer-python VERSION and apache-tvm-ffi, all that these two
#             modules need beyond the GPU machine's packages (the other requirements are imported
#             lazily). Carry it. (`flashmla_anchor.sh prepare` empties .anchor/: run it first.)
#   setup     (the H200: CUDA 13 nvcc, no internet) installs the wheels into .anchor-build/upstream,
#             builds the two JIT modules with ninja, then (unless UPSTREAM_WARM=0) runs
#             fp8_blockscale_gemm_sm90 once per bench_gemm blockscale shape in parallel processes,
#             so the DeepGEMM kernels it compiles at first use are cached (TRTLLM_DG_CACHE_DIR)
#             before timing; prints each step's time and a relative error per shape. Idempotent;
#             the first build takes minutes (one CUTLASS translation unit dominates).
#   env       prints the exports that import and run upstream, e.g.
#           bash benchmarks/upstream_anchor.sh setup && eval "$(bash benchmarks/upstream_anchor.sh env)" && \
#               python3 benchmarks/bench_gemm.py --upstream --sections blockscale --out $OUT/upstream
#       (none of our packages on PYTHONPATH there: `import flashinfer` must be upstream's).
#
# Offline, the wheel ships the sources and headers the two modules build from (flashinfer/data);
# they link cudart, cuda, nvrtc, cublas and cublasLt from $CUDA_HOME/lib64, and where a toolkit
# from pip wheels lacks them setup links them into .anchor-build/upstream-lib
# (FLASHINFER_EXTRA_LDFLAGS).
set -euo pipefail

VERSION=0.6.17
TVM_FFI_VERSION=0.1.15.post2 # newest that flashinfer-python 0.6.17 allows (>=0.1.6,<0.2, not 0.1.8)

here=$(cd "$(dirname "$0")" && pwd)
wheels=$here/.anchor/upstream-wheels
build=$here/.anchor-build
site=$build/upstream

prepare() {
    rm -rf "$wheels"
    mkdir -p "$wheels"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$wheels" \
        "flashinfer-python==$VERSION" "apache-tvm-ffi==$TVM_FFI_VERSION"
    ls -l "$wheels"
    du -sh "$wheels"
}

find_cuda_home() { # as the benchmarks find it: CUDA_HOME, /usr/local/cuda, nvcc's on PATH
    local cuda_home
    cuda_home=$(PYTHONPATH=$here python3 -c 'import _deepgemm; print(_deepgemm.cuda_home() or "")')
    [ -x "$cuda_home/bin/nvcc" ] || { echo "no nvcc under '$cuda_home' (set CUDA_HOME)" >&2; exit 2; }
    echo "$cuda_home"
}

# -L/-rpath flags for the libraries the two modules link where $CUDA_HOME/lib64 lacks them
extra_ldflags() {
    local cuda_home=$1 name found missing=0 dir=$build/upstream-lib rpaths=""
    for name in cudart nvrtc cublas cublasLt; do
        [ -e "$cuda_home/lib64/lib$name.so" ] || missing=1
    done
    [ -e "$cuda_home/lib64/stubs/libcuda.so" ] || [ -e "$cuda_home/lib64/libcuda.so" ] || missing=1
    [ "$missing" = 1 ] || return 0
    mkdir -p "$dir"
    local roots="$cuda_home/lib64 $cuda_home/lib $cuda_home/targets/x86_64-linux/lib $cuda_home/lib64/stubs"
    roots="$roots $(python3 -c 'import nvidia, glob; print(" ".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2> /dev/null || true)"
    for name in cudart nvrtc cublas cublasLt cuda; do
        # shellcheck disable=SC2086
        found=$(find $roots -maxdepth 1 -name "lib$name.so*" 2> /dev/null | sort | head -n 1)
        if [ -z "$found" ] && [ "$name" = cuda ]; then
            found=$(ldconfig -p 2> /dev/null | awk '/libcuda\.so(\.1)? /{print $NF; exit}')
        fi
        [ -n "$found" ] || { echo "lib$name.so not found (under $roots)" >&2; exit 2; }
        ln -sfn "$found" "$dir/lib$name.so"
        rpaths="$rpaths -Wl,-rpath,$(dirname "$found")"
    done
    echo "-L$dir$rpaths"
}

env_exports() {
    local cuda_home ldflags ninja_dir
    cuda_home=$(find_cuda_home)
    ldflags=$(extra_ldflags "$cuda_home")
    echo "export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH}"
    echo "export CUDA_HOME=$cuda_home"
    echo "export FLASHINFER_WORKSPACE_BASE=$build/upstream-ws" # JIT .so files: .cache/flashinfer/VERSION/90a/cached_ops
    echo "export FLASHINFER_CUDA_ARCH_LIST=9.0"                # sm_90a; upstream reads this, not TORCH_CUDA_ARCH_LIST
    echo "export TORCH_CUDA_ARCH_LIST=9.0"
    echo "export TRTLLM_DG_CACHE_DIR=$build/upstream-dg"        # DeepGEMM's run-time cubins (default ~/.tensorrt_llm)
    echo "export TVM_FFI_CACHE_DIR=$build/upstream-tvm-ffi"    # only used where torch lacks __dlpack_c_exchange_api__
    echo "export MAX_JOBS=${MAX_JOBS:-16}"
    [ -z "$ldflags" ] || echo "export FLASHINFER_EXTRA_LDFLAGS='$ldflags'"
    if ! command -v ninja > /dev/null; then # upstream runs `ninja` from PATH
        ninja_dir=$(python3 -c 'import ninja; print(ninja.BIN_DIR)') ||
            { echo "no ninja on PATH nor the ninja package" >&2; exit 2; }
        echo "export PATH=$ninja_dir:\$PATH"
    fi
}

setup() {
    compgen -G "$wheels/flashinfer_python-$VERSION-*.whl" > /dev/null ||
        { echo "no $wheels: run '$0 prepare' and carry it" >&2; exit 2; }
    local stamp=$site/.installed want
    want=$(cd "$wheels" && ls ./*.whl)
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        rm -rf "$site"
        python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl
        echo "$want" > "$stamp"
    fi
    local exports
    exports=$(env_exports)
    eval "$exports"
    export UPSTREAM_SITE=$site
    echo "upstream FlashInfer $VERSION in $site; CUDA_HOME=$CUDA_HOME ($("$CUDA_HOME/bin/nvcc" --version | grep -o 'release [0-9.]*')); ninja $(command -v ninja)"
    # the JIT modules, built the way upstream's first call builds them (ninja, MAX_JOBS jobs)
    cd "$here/.."
    python3 - << 'EOF'
import os, sys, time
from concurrent.futures import ThreadPoolExecutor

t0 = time.time()
import flashinfer
from flashinfer.jit.gemm import gen_fp8_blockscale_gemm_sm90_module, gen_gemm_module

if not os.path.realpath(flashinfer.__file__).startswith(os.path.realpath(os.environ["UPSTREAM_SITE"]) + "/"):
    sys.exit(f"imported {flashinfer.__file__}, not upstream's under {os.environ['UPSTREAM_SITE']}: PYTHONPATH?")
print(f"import flashinfer {flashinfer.__version__} from {os.path.dirname(flashinfer.__file__)}: {time.time() - t0:.1f} s", flush=True)


def build(spec):
    start = time.time()
    missing = [str(p) for p in spec.sources if not p.exists()]
    if missing:
        raise FileNotFoundError(f"{spec.name}: missing sources {missing}")
    done = spec.get_library_path().exists()
    spec.build_and_load()  # ninja; a no-op where up to date
    what = "up to date" if done else "built"
    print(f"  {spec.name}: {what} in {time.time() - start:.1f} s -> {spec.get_library_path()}", flush=True)


start = time.time()
with ThreadPoolExecutor(2) as pool:  # each its own ninja; the blockscale one is the long one
    list(pool.map(build, [gen_fp8_blockscale_gemm_sm90_module(), gen_gemm_module()]))
print(f"JIT modules: {time.time() - start:.1f} s", flush=True)
EOF
    [ "${UPSTREAM_WARM:-1}" = 0 ] || warm
}

# upstream's fp8_blockscale_gemm_sm90 once per bench_gemm blockscale shape, BF16 and FP8 input,
# in WORKERS processes: DeepGEMM compiles each kernel configuration at first use (serially, in
# the calling process), so compiling them here in parallel keeps that out of the benchmark.
warm() {
    mkdir -p "$TRTLLM_DG_CACHE_DIR"
    local workers=${WORKERS:-16} i start=$SECONDS pids=() rc=0
    for ((i = 0; i < workers; i++)); do
        python3 - "$i" "$workers" << 'EOF' &
import sys, time
sys.path.insert(0, "benchmarks")
import torch
from _harness import ceil_div
from bench_gemm import BLOCKSCALE_M, BLOCKSCALE_NK
from flashinfer.gemm import fp8_blockscale_gemm_sm90

worker, workers = int(sys.argv[1]), int(sys.argv[2])
shapes = [(m, n, k) for n, k in BLOCKSCALE_NK for m in BLOCKSCALE_M][worker::workers]
torch.manual_seed(worker)
for m, n, k in shapes:
    start = time.time()
    kb = k // 128
    x16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    x_scale = torch.rand(m, kb, device="cuda") + 0.5
    w_scale = torch.rand(ceil_div(n, 128), kb, device="cuda") + 0.5
    x = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    padded = torch.empty(kb, ceil_div(m, 4) * 4, device="cuda")  # as bench_gemm: MN-major, rows padded to 4
    padded[:, :m] = x_scale.t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    w_deq = (w.float().view(n, kb, 128) * w_scale.repeat_interleave(128, 0)[:n, :, None]).view(n, k)
    errors = []
    for a, a_deq, a_scale in ((x16, x16.float(), None),
                              (x, (x.float().view(m, kb, 128) * x_scale[:, :, None]).view(m, k), padded[:, :m])):
        fp8_blockscale_gemm_sm90(a, w, a_scale, w_scale, out=out)
        ref = a_deq @ w_deq.t()
        errors.append(((out.float() - ref).norm() / ref.norm()).item())
    torch.cuda.synchronize()
    print(f"  m={m} n={n} k={k}: {time.time() - start:.1f} s, rel err bf16 input {errors[0]:.1e}, fp8 input {errors[1]:.1e}",
          flush=True)
EOF
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=$?; done
    echo "DeepGEMM run-time kernels for the blockscale shapes: $((SECONDS - start)) s, $(find "$TRTLLM_DG_CACHE_DIR" -name '*.cubin' | wc -l) cubins in $TRTLLM_DG_CACHE_DIR"
    return "$rc"
}

case ${1:-} in
prepare) prepare ;;
setup) setup ;;
env) env_exports ;;
*) sed -n '2,24p' "$0"; exit 2 ;;
esac
