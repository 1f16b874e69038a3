#!/usr/bin/env bash
# DeepGEMM (deepseek-ai/DeepGEMM), the anchor of `bench_gemm.py --deepgemm`: its Hopper 1x128 /
# 128x128 block-scaled FP8 GEMMs (dense, grouped contiguous and masked) on our inputs, in our process.
#
#   prepare DEEPGEMM_GIT CUTLASS_GIT   (a machine with the two repositories, e.g. git mirrors)
#       writes benchmarks/.anchor/deepgemm/ (git-ignored, ~24 MB): the `deep_gemm` package at
#       DEEPGEMM_COMMIT, CUTLASS's include/cute and include/cutlass at CUTLASS_COMMIT copied where
#       its setup.py would link them, the licenses and a COMMIT file. Carry it to the GPU machine
#       (`flashmla_anchor.sh prepare` empties benchmarks/.anchor/: prepare FlashMLA first).
#   setup                              (the H200: CUDA 13 nvcc, torch, cuda-bindings, no internet)
#       fast and idempotent. Nothing is built: DeepGEMM compiles each kernel at its first call (NVCC,
#       ~3 s of one core; the benchmarks compile a section's kernels ahead, in parallel) into
#       DG_JIT_CACHE_DIR (default benchmarks/.anchor-build/deepgemm-jit). Links CUDA 13's CCCL
#       headers (cuda, nv, cub, thrust) into the JIT include folder, then checks the import
#       (benchmarks/_deepgemm.py sets the same defaults, so nothing needs sourcing):
#           bash benchmarks/deepgemm_anchor.sh setup && \
#           PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src:benchmarks/.anchor/deepgemm \
#               python3 benchmarks/bench_gemm.py --deepgemm --sections groupwise,grouped --out $OUT
#
# No source is patched: on CUDA 13.0 the commit's JIT passes its NVCC version check, skips its
# FFMA-interleaving SASS pass (NVCC >= 12.9 does that itself), names kernels with CUDA_HOME's
# cuobjdump and loads them through cuda.bindings. Keep DG_JIT_USE_NVRTC unset: CUTLASS 3.8's cute
# does not build under NVRTC with CCCL 3 (CUDA 13).
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
    local cuda_home # as the benchmarks find it: CUDA_HOME, /usr/local/cuda, nvcc's on PATH
    cuda_home=$(PYTHONPATH=$here python3 -c 'import _deepgemm; print(_deepgemm.cuda_home() or "")')
    [ -x "$cuda_home/bin/nvcc" ] || { echo "no nvcc under '$cuda_home' (set CUDA_HOME)" >&2; exit 2; }
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
*) sed -n '2,18p' "$0"; exit 2 ;;
esac
