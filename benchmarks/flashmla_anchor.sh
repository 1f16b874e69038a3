#!/usr/bin/env bash
# FlashMLA (deepseek-ai/FlashMLA), the anchor of `bench_mla.py --packed --flashmla`: its Hopper
# sparse FP8 decode reads the same 656-byte rows.
#
#   prepare FLASHMLA_GIT CUTLASS_GIT   (a machine with the two repositories, e.g. git mirrors)
#       writes benchmarks/.anchor/ (git-ignored, ~30 MB): FlashMLA's sources at FLASHMLA_COMMIT, its
#       cutlass submodule's headers at CUTLASS_COMMIT and a ninja wheel. Carry it.
#   build                              (the H200: CUDA 13 nvcc, torch, no internet)
#       builds the extension in benchmarks/.anchor-build/FlashMLA (not carried: objects survive a
#       second call) for sm_90a only, ninja with MAX_JOBS jobs: ~30 CUTLASS-heavy units, 8-15
#       minutes on 16 cores; run it again if a command limit cuts it (ninja resumes).
#       FLASHMLA_PART=sparse-decode builds only what `flash_mla_with_kvcache(indices=...)` runs,
#       behind a module binding `sparse_decode_fwd` alone: 10 units, a few minutes. Then:
#       PYTHONPATH=benchmarks/.anchor-build/FlashMLA:... python3 benchmarks/bench_mla.py --packed --flashmla
set -euo pipefail

FLASHMLA_COMMIT=9241ae3ef9bac614dd25e45e507e089f888280e0 # 2026-04-29, "Swap FlashMLA combine grid dimensions"
CUTLASS_COMMIT=147f5673d0c1c3dcf66f78d677fd647e4a020219  # FlashMLA's csrc/cutlass submodule at that commit

here=$(cd "$(dirname "$0")" && pwd)
anchor=$here/.anchor
build=$here/.anchor-build

prepare() {
    local flashmla_git=$1 cutlass_git=$2
    rm -rf "$anchor"
    mkdir -p "$anchor/FlashMLA/csrc/cutlass" "$anchor/wheels"
    git -C "$flashmla_git" archive "$FLASHMLA_COMMIT" csrc flash_mla setup.py LICENSE README.md |
        tar -x -C "$anchor/FlashMLA"
    git -C "$cutlass_git" archive "$CUTLASS_COMMIT" include tools/util/include LICENSE.txt |
        tar -x -C "$anchor/FlashMLA/csrc/cutlass"
    python3 -m pip download -q ninja --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
        --python-version 3.10 -d "$anchor/wheels"
    echo "$FLASHMLA_COMMIT" > "$anchor/FLASHMLA_COMMIT"
    du -sh "$anchor"
}

build() {
    [ -f "$anchor/FLASHMLA_COMMIT" ] || { echo "no $anchor: run '$0 prepare' and carry it" >&2; exit 2; }
    command -v nvcc > /dev/null || [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] ||
        { echo "nvcc not found (set CUDA_HOME)" >&2; exit 2; }
    if ! command -v ninja > /dev/null && ! python3 -c "import ninja" 2> /dev/null; then
        python3 -m pip install -q --no-index --no-deps --target "$build/tools" "$anchor"/wheels/ninja-*.whl
    fi
    export PATH=$build/tools/bin:$PATH PYTHONPATH=$build/tools${PYTHONPATH:+:$PYTHONPATH}
    mkdir -p "$build"
    if ! cmp -s "$anchor/FLASHMLA_COMMIT" "$build/FlashMLA/FLASHMLA_COMMIT" 2> /dev/null; then
        rm -rf "$build/FlashMLA"
        cp -r "$anchor/FlashMLA" "$build/FlashMLA"
        cp "$anchor/FLASHMLA_COMMIT" "$build/FlashMLA/"
    fi
    cd "$build/FlashMLA"
    if [ "${FLASHMLA_PART:-all}" = sparse-decode ]; then sparse_decode_only; fi
    export FLASH_MLA_DISABLE_SM100=1 TORCH_CUDA_ARCH_LIST=9.0a NVCC_THREADS=1
    export MAX_JOBS=${MAX_JOBS:-$(nproc)}
    local start=$SECONDS
    python3 setup.py build_ext --inplace 2>&1 | grep -v "^ptxas info\|bytes stack frame\|Compiling entry\|Function properties\|Used [0-9]* registers" || true
    python3 -c "import flash_mla, torch; print('flash_mla built:', flash_mla.__file__)"
    echo "build took $((SECONDS - start)) s"
}

sparse_decode_only() {
    # a module binding sparse_decode_fwd alone, and setup.py's sources cut to what it needs
    cat > csrc/api/sparse_decode_api.cpp << 'CPP'
#include <pybind11/pybind11.h>

#include "sparse_decode.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "FlashMLA, sparse decode only";
    m.def("sparse_decode_fwd", &sparse_attn_decode_interface);
}
CPP
    python3 - << 'PY'
import re
setup = open("setup.py").read()
sources = [
    "csrc/api/sparse_decode_api.cpp",
    "csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
    "csrc/smxx/decode/combine/combine.cu",
    "csrc/sm90/decode/sparse_fp8/instantiations/model1_persistent_h64.cu",
    "csrc/sm90/decode/sparse_fp8/instantiations/model1_persistent_h128.cu",
    "csrc/sm90/decode/sparse_fp8/instantiations/v32_persistent_h64.cu",
    "csrc/sm90/decode/sparse_fp8/instantiations/v32_persistent_h128.cu",
    "csrc/sm100/decode/head64/instantiations/v32.cu",
    "csrc/sm100/decode/head64/instantiations/model1.cu",
    "csrc/sm100/prefill/sparse/fwd_for_small_topk/head128/instantiations/phase1_decode_k512.cu",
]
setup, count = re.subn(r"sources=\[.*?\],", "sources=" + repr(sources) + ",", setup, count=1, flags=re.S)
assert count == 1, "setup.py's sources list was not found"
open("setup.py", "w").write(setup)
PY
}

case ${1:-} in
prepare) prepare "${2:?FlashMLA git dir}" "${3:?cutlass git dir}" ;;
build) build ;;
*) sed -n '2,14p' "$0"; exit 2 ;;
esac
