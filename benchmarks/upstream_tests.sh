#!/usr/bin/env bash
# FlashInfer's own tests for the APIs we ship, run against our packages on a GPU machine.
#
#   prepare FLASHINFER_GIT   (a machine with the repository) writes benchmarks/.anchor/upstream/
#       (git-ignored, under 1 MB): TAG's test files for these APIs and the helpers they import, a
#       conftest.py that lifts their compute-capability gates, and wheels of einops and
#       pytest-xdist. Carry it.
#   run [PYTEST ARGS]        (the GPU machine) runs pytest on them with our four packages, e.g.
#           bash benchmarks/upstream_tests.sh run tests/attention/test_trtllm_gen_mla.py -k sparse -n 8
#
# Upstream runs trtllm-gen MLA on compute capability 10.x only (sm100 cubins); ours runs on any
# CUDA GPU, so each test module sees (10, 0) from `get_compute_capability`. Other skips stay.
set -euo pipefail

TAG=v0.6.17
# the test files, and the helpers they import (kept at their paths: they import `tests.…`)
FILES="tests/attention/test_trtllm_gen_mla.py tests/attention/test_rope.py tests/gemm/test_bmm_fp8.py
tests/gemm/test_bmm_bf16.py tests/gemm/test_groupwise_scaled_gemm_fp8.py tests/gemm/test_fp8_blockscale_gemm.py
tests/__init__.py tests/utils_fp8.py tests/test_helpers/__init__.py tests/test_helpers/rope_reference.py"

here=$(cd "$(dirname "$0")" && pwd)
anchor=$here/.anchor/upstream
build=$here/.anchor-build

prepare() {
    local git_dir=$1 file
    rm -rf "$anchor"
    mkdir -p "$anchor/wheels"
    for file in $FILES; do
        mkdir -p "$anchor/$(dirname "$file")"
        git -C "$git_dir" show "$TAG:$file" > "$anchor/$file"
    done
    cat > "$anchor/conftest.py" << 'EOF'
"""Lift upstream's compute-capability gates: each test module sees (10, 0)."""

import pytest


@pytest.fixture(autouse=True)
def _capability_gate_lifted(request, monkeypatch):
    if hasattr(request.module, "get_compute_capability"):
        monkeypatch.setattr(request.module, "get_compute_capability", lambda device=None: (10, 0))
EOF
    python3 -m pip download -q einops pytest-xdist execnet --no-deps --only-binary=:all: -d "$anchor/wheels"
    echo "$TAG" > "$anchor/TAG"
    du -sh "$anchor"
}

run() {
    [ -f "$anchor/TAG" ] || { echo "no $anchor: run '$0 prepare' and carry it" >&2; exit 2; }
    python3 -m pip install -q --no-index --no-deps --target "$build/tools" "$anchor"/wheels/*.whl
    local root
    root=$(cd "$here/.." && pwd)
    cd "$anchor"
    PYTHONPATH=$build/tools:$root/packages/flashinfer-core/src:$root/packages/flashinfer-gemm/src:$root/packages/flashinfer-mla/src:$root/packages/flashinfer-python/src${PYTHONPATH:+:$PYTHONPATH} \
        python3 -m pytest -q -p no:cacheprovider "$@"
}

case ${1:-} in
prepare) prepare "${2:?FlashInfer git dir}" ;;
run) shift; run "$@" ;;
*) sed -n '2,12p' "$0"; exit 2 ;;
esac
