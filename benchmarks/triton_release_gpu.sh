#!/usr/bin/env bash
# One GPU run for one Triton release beside the machine's own Triton: the `gpu` session's tests
# under the release (SESSION=base: under the machine's), the quick start's example under both, then
# triton_releases.py under the machine's Triton and under the release (ROWS=0: not).
#
#   here:  bash ../shared/tools/slim_triton.sh VERSION .triton-slim     (a ~45 MB copy, git-ignored)
#   there: [SESSION=base] [ROWS=0] bash benchmarks/triton_release_gpu.sh VERSION OUT_DIR  (.triton-slim carried)
#
# Writes OUT_DIR/gpu_TRITON.{xml,log} and OUT_DIR/triton_{machine's,VERSION}.json.
set -uo pipefail
VER=${1:?triton version, e.g. 3.9.0}
OUT=${2:-benchmarks/out}
mkdir -p "$OUT" "/tmp/triton-$VER"
tar -xJf ".triton-slim/triton-$VER.tar.xz" -C "/tmp/triton-$VER" || exit 1
export PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src:packages/flashinfer-mla/src:packages/flashinfer-python/src
export TRITON_PTXAS_PATH=$(command -v ptxas) TRITON_CUOBJDUMP_PATH=$(command -v cuobjdump) \
       TRITON_NVDISASM_PATH=$(command -v nvdisasm) TRITON_PTXAS_BLACKWELL_PATH=$(command -v ptxas)
export PYTHONUNBUFFERED=1
release() { PYTHONPATH="/tmp/triton-$VER:$PYTHONPATH" TRITON_BACKENDS_IN_TREE=1 "$@"; }
base=$(python3 -c "import triton; print(triton.__version__)")
echo "== machine: Triton $base; under test: $(release python3 -c 'import triton; print(triton.__version__)')"
nvidia-smi --query-gpu=name --format=csv,noheader

if [ "${SESSION:-release}" = base ]; then session=(env) tested=$base; else session=(release) tested=$VER; fi
echo "== tests/gpu -m 'not slow' under Triton $tested"
start=$(date +%s)
"${session[@]}" python3 -m pytest tests/gpu -q -p no:cacheprovider -m "not slow" -n 16 -W ignore \
    --junitxml="$OUT/gpu_$tested.xml" > "$OUT/gpu_$tested.log" 2>&1
echo "rc $? in $(( $(date +%s) - start )) s"
tail -n 25 "$OUT/gpu_$tested.log"

echo "== examples/fp8_mla_decode.py"
python3 examples/fp8_mla_decode.py 2>&1 | tail -n 3
release python3 examples/fp8_mla_decode.py 2>&1 | tail -n 3

[ "${ROWS:-1}" = 0 ] && exit 0
echo "== headline rows"
python3 benchmarks/triton_releases.py --json "$OUT/triton_$base.json"
release python3 benchmarks/triton_releases.py --json "$OUT/triton_$VER.json"
python3 benchmarks/triton_releases.py --table "$OUT/triton_$base.json" "$OUT/triton_$VER.json"
