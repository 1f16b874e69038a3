#!/usr/bin/env bash
# One H200 call: the decode-size GEMM's sweep (writes its table), then fp8_blockscale_gemm_sm90
# ours against upstream FlashInfer's own SM90 kernel, same machine, same session.
#
#   bash benchmarks/blockscale_vs_upstream.sh OUT_DIR     (carry benchmarks/.anchor/upstream-wheels)
#
# SWEEP_SECONDS (default 330) bounds the sweep, 0 skips it; SWEEP_ARGS goes to the sweep. Upstream's
# JIT modules build while the sweep runs; its per-shape kernels compile after it (`upstream_anchor.sh
# setup`), so no compile runs while anything is timed. Leaves in OUT_DIR the sweep's JSON and table,
# gemm_upstream.json, gemm.json (ours), the comparison (gemm_vs_upstream.md) and the logs.
set -uo pipefail
out=${1:?OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
ours=$root/packages/flashinfer-core/src:$root/packages/flashinfer-gemm/src
mkdir -p "$out/upstream"
export PYTHONUNBUFFERED=1
(UPSTREAM_WARM=0 bash "$here/upstream_anchor.sh" setup > "$out/upstream_build.log" 2>&1) &
build=$!
if [ "${SWEEP_SECONDS:-330}" != 0 ]; then
    PYTHONPATH=$ours timeout "${SWEEP_SECONDS:-330}" python3 "$here/decode_gemm_sweep.py" --out "$out" --write-table ${SWEEP_ARGS:-} \
        2>&1 | grep -v Warning | tee "$out/sweep.log"
    cp "$root/packages/flashinfer-gemm/src/flashinfer/gemm/kernels/blockwise/decode_gemm_table.json" "$out/"
else  # the committed table as it is; WHILE_BUILDING (e.g. a test run) uses the GPU meanwhile
    eval "${WHILE_BUILDING:-true}"
fi
wait $build
tail -5 "$out/upstream_build.log"
bash "$here/upstream_anchor.sh" setup > "$out/upstream_warm.log" 2>&1
tail -3 "$out/upstream_warm.log"
(eval "$(bash "$here/upstream_anchor.sh" env)" &&
    python3 "$here/bench_gemm.py" --upstream --sections blockscale --out "$out/upstream" > "$out/upstream_bench.log" 2>&1)
tail -3 "$out/upstream_bench.log"
PYTHONPATH=$ours python3 "$here/bench_gemm.py" --sections blockscale --compare "$out/upstream/gemm_upstream.json" \
    --out "$out" > "$out/bench.log" 2>&1
tail -75 "$out/bench.log"
# at most 8 files come back from a device call: keep the JSON, the table, the comparison and logs
mv "$out/upstream/gemm_upstream.json" "$out/" 2>/dev/null
cat "$out"/upstream_{build,warm,bench}.log > "$out/upstream.log" 2>/dev/null
rm -rf "$out/upstream" "$out"/upstream_*.log "$out/sweep.log"
