#!/usr/bin/env bash
# DeepGEMM (deepseek-ai/DeepGEMM), the anchor of the FP8 GEMM benchmarks (`bench_gemm.py --deepgemm`):
# its Hopper 1x128 / 128x128 block-scaled FP8 GEMMs (dense,
# grouped contiguous, grouped masked) timed on the same inputs in the same process as ours.
#
#   prepare DEEPGEMM_GIT CUTLASS_GIT   (a machine with the two repositories, e.g. git mirrors)
#       writes benchmarks/.anchor/deepgemm/ (git-ignored, about 24 MB): the importable `deep_gemm`
#       package at DEEPGEMM_COMMIT with its JIT include folder deep_gemm/include/{deep_gemm,cute,cutlass}
#       as real directories (CUTLASS's include/cute and include/cutlass at CUTLASS_COMMIT, where
#       DeepGEMM's setup.py would symlink them), the two licenses and a COMMIT file. Only that
#       folder is touched (a FlashMLA anchor may sit beside it in benchmarks/.anchor/; note that
#       `flashmla_anchor.sh prepare` empties benchmarks/.anchor/ first: prepare FlashMLA before this).
#       Carry benchmarks/.anchor/deepgemm to the GPU machine.
#   setup                              (the H200: CUDA 13 nvcc, torch, cuda-bindings, no internet)
#       fast and idempotent; run at the start of each benchmark command. Nothing is built: DeepGEMM
#       compiles each kernel when first called (NVCC, its default: about 3 s of one core a kernel
#       with CUDA 13.0's nvcc; the benchmarks compile a section's kernels ahead, in parallel),
#       cached in DG_JIT_CACHE_DIR (default benchmarks/.anchor-build/deepgemm-jit, kept while the
#       machine stays warm). On CUDA 13 the CCCL headers moved to $CUDA_HOME/include/cccl: nvcc
#       still finds them (nvcc.profile adds it with -isystem), NVRTC (DG_JIT_USE_NVRTC=1) does not,
#       so links cuda, nv, cub, thrust -> $CUDA_HOME/include/cccl/... go into the JIT include folder.
#       Then a one-line import check (commit, nvcc, the cuobjdump DeepGEMM names kernels with:
#       $CUDA_HOME/bin's, else one on PATH or Triton's through a stand-in CUDA_HOME). The benchmarks
#       set the same defaults themselves (benchmarks/_deepgemm.py), so nothing needs sourcing:
#           bash benchmarks/deepgemm_anchor.sh setup && \
#           PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src:benchmarks/.anchor/deepgemm \
#               python3 benchmarks/bench_gemm.py --deepgemm --sections groupwise,grouped --out $OUT
#
# What the DeepGEMM commit's JIT does on CUDA 13.0 (deep_gemm/jit/compiler.py), and why no source
# is patched: NVCC is found as $DG_JIT_NVCC_COMPILER or torch's CUDA_HOME/bin/nvcc; its version is
# parsed from "release 13.0" and compared as a string with "12.3" (passes); flags are
# -std=c++20 -gencode=arch=compute_90a,code=sm_90a -cubin -O3 --expt-relaxed-constexpr
# --expt-extended-lambda --ptxas-options=--register-usage-level=10 --diag-suppress=...
# --compiler-options=-fPIC,-O3,-fconcepts,... (host g++: -fconcepts is a GCC flag) and
# -I deep_gemm/include only; its FFMA-interleaving SASS pass runs for NVCC <= 12.8 only, so it is
# off here (NVCC >= 12.9 does that itself); kernels are named with cuobjdump from CUDA_HOME/bin and
# loaded/launched through cuda.bindings.driver (cuLibraryLoadFromFile, cuLaunchKernelEx).
# NVRTC is not used: CUTLASS 3.8's cute declares std::tuple_size for NVRTC in a way CCCL 3 (CUDA 13)
# no longer matches, so keep DG_JIT_USE_NVRTC unset.
set -euo pipefail

DEEPGEMM_COMMIT=78d8362e7a7fded67e730a74c9423fd05db003dd # 2025-05-15, "Add a missing `#pragma once`" (Python JIT release)
CUTLASS_COMMIT=eefa171318b79cbe2e78514d4cce5cd0fe919d0c  # DeepGEMM's third-party/cutlass submodule at that commit (v3.8.0+1)

here=$(cd "$(dirname "$0")" && pwd)
anchor=$here/.anchor/deepgemm
build=$here/.anchor-build

prepare() {
    local deepgemm_git=$1 cutlass_git=$2
    [ "$(git -C "$deepgemm_git" rev-parse "$DEEPGEMM_COMMIT:third-party/cutlass")" = "$CUTLASS_COMMIT" ] ||
        { echo "DeepGEMM's cutlass submodule is not at $CUTLASS_COMMIT" >&2; exit 2; }
    rm -rf "$anchor"
    mkdir -p "$anchor/deep_gemm/include"
    git -C "$deepgemm_git" archive "$DEEPGEMM_COMMIT" deep_gemm LICENSE README.md | tar -x -C "$anchor"
    # setup.py's symlinks third-party/cutlass/include/{cute,cutlass} -> deep_gemm/include/, as copies
    git -C "$cutlass_git" archive "$CUTLASS_COMMIT:include" cute cutlass | tar -x -C "$anchor/deep_gemm/include"
    git -C "$cutlass_git" show "$CUTLASS_COMMIT:LICENSE.txt" > "$anchor/LICENSE.cutlass.txt"
    echo "$DEEPGEMM_COMMIT" > "$anchor/COMMIT"
    echo "$CUTLASS_COMMIT" > "$anchor/CUTLASS_COMMIT"
    if find "$anchor" -type l | grep -q .; then
        echo "unexpected symlinks in $anchor" >&2
        exit 1
    fi
    du -sh "$anchor"
}

setup() {
    [ -f "$anchor/COMMIT" ] || { echo "no $anchor: run '$0 prepare' and carry it" >&2; exit 2; }
    local cuda_home=${CUDA_HOME:-} # as _deepgemm.cuda_home: CUDA_HOME, /usr/local/cuda, nvcc's on PATH
    if [ ! -x "$cuda_home/bin/nvcc" ]; then
        if [ -x /usr/local/cuda/bin/nvcc ]; then
            cuda_home=/usr/local/cuda
        elif command -v nvcc > /dev/null; then
            cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
        fi
    fi
    [ -x "$cuda_home/bin/nvcc" ] || { echo "no nvcc under $cuda_home (set CUDA_HOME)" >&2; exit 2; }
    export CUDA_HOME=$cuda_home
    local include=$anchor/deep_gemm/include cccl=$cuda_home/include/cccl name
    if [ -d "$cccl" ]; then
        for name in cuda nv cub thrust; do
            if [ -d "$cccl/$name" ] && { [ -L "$include/$name" ] || [ ! -e "$include/$name" ]; }; then
                ln -sfn "$cccl/$name" "$include/$name"
            fi
        done
    fi
    export DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-$build/deepgemm-jit}
    mkdir -p "$DG_JIT_CACHE_DIR"
    # the import check, through the module the benchmarks use (same defaults, same toolkit)
    PYTHONPATH=$here:$anchor${PYTHONPATH:+:$PYTHONPATH} python3 -c 'import _deepgemm; print(_deepgemm.describe())'
}

case ${1:-} in
prepare) prepare "${2:?DeepGEMM git dir}" "${3:?cutlass git dir}" ;;
setup) setup ;;
*) sed -n '2,27p' "$0"; exit 2 ;;
esac
