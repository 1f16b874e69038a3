"""The Hopper Gluon decode kernel compiles for sm_90 on this CPU-only machine, as shipped.

Triton 3.6 has no CPU interpreter for Gluon, so without an H200 what can be checked is the
compiled code. Every variant the launcher can pick (FP8 and BF16, sparse and paged, final output
and split partials, with sinks, LSE and on-device scales) is compiled to a cubin for sm_90 with
Triton's own ptxas, and the tests read back:

- that ptxas does not serialize the kernel's wgmma (its warnings C7510-C7519: a wgmma left in
  flight across a loop's back edge, or an accumulator read inside an open wgmma stage, makes it
  serialize every wgmma of the kernel; this was seen and fixed once);
- the tensor-core instructions the design relies on (FP8 ``QGMMA`` for ``Q K^T`` of e4m3 rows,
  ``HGMMA`` for ``P V``) and the ``cp.async`` gather (``LDGSTS``);
- shared memory within the 227 KB a block may use, and at most a few spilled registers;
- that the gather copies and the fp16 copy of V are free of shared-memory bank conflicts
  (``gl.bank_conflicts`` on the layouts the kernel uses; 41% of shared-memory wavefronts were
  excess on the H200 before).

The compilation runs in a subprocess without ``TRITON_INTERPRET`` (the CPU test folders switch
the interpreter on, and Gluon's compiler cannot take interpreted helpers). Results on the H200 are
tested in ``tests/gpu/test_mla_cuda.py`` with ``FLASHINFER_KERNEL_TIER=gluon``.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile

import pytest
from gluon_sm90 import (
    SHARED_MEMORY_LIMIT,
    compile_for_sm90,
    cubin_report,
    report_from_subprocess,
    requires_gluon_triton,
)

pytestmark = requires_gluon_triton

MAX_SPILL_BYTES = 96  # loop-invariant scalars around the partition boundaries (0 to 88 bytes seen)
# (dtype, page size, split, sinks + device scales, slots per padded page)
VARIANTS = [
    ("e4m3", 0, False, False, 0),
    ("e4m3", 0, True, True, 0),
    ("e4m3", 64, False, True, 0),
    ("e4m3", 64, True, False, 0),
    ("bf16", 0, False, False, 0),
    ("bf16", 32, True, True, 0),
    ("e4m3", 0, True, False, 64),
    ("packed", 0, False, True, 0),
    ("packed", 0, True, False, 64),
]


def variant_id(variant) -> str:
    dtype, page, split, extras, slot_page = variant
    return (
        f"{dtype}-{'paged' if page else 'sparse'}-{'split' if split else 'final'}{'-sinks' if extras else ''}"
        + ("-padded-pages" if slot_page else "")
    )


# ---------------------------------------------------------------------------------------------
# the subprocess: compile every variant, report what the cubin holds


def _compile(variant):
    from flashinfer.mla.kernels import mla_decode_gluon as kernels

    dtype, page, split, extras, slot_page = variant
    config = {"e4m3": kernels.FP8_CONFIG, "bf16": kernels.BF16_CONFIG, "packed": kernels.PACKED_CONFIG}[dtype]
    kernel = kernels.mla_decode_gluon_kernel
    element = "*fp8e4nv" if dtype == "e4m3" else "*bf16"
    typed = {
        "q_ptr": element, "kv_ptr": "*u8" if dtype == "packed" else element, "list_ptr": "*i32", "seq_lens_ptr": "*i32",
        "sinks_ptr": "*fp32", "out_ptr": "*bf16", "lse_ptr": "*fp32", "workspace_ptr": "*u8",
        "bmm1_scale": "*fp32" if extras else "fp32", "bmm2_scale": "*fp32" if extras else "fp32",
    }  # fmt: skip
    constexprs = {
        "D_V": 512, "D_ROPE": 64, "PAGE_SIZE": page, "BLOCK_N": config.block_n, "STAGES": config.stages,
        "SPLIT": split, "HAS_SINKS": extras, "HAS_LSE": True, "SCALE1_ON_DEVICE": extras,
        "SCALE2_ON_DEVICE": extras, "SLOT_PAGE": slot_page,
        "QK_CHAINS": kernels.QK_CHAINS_FP8 if dtype == "e4m3" else 1, "MAX_SLACK_LOG2": config.max_slack_log2,
        "PACKED": dtype == "packed", "LENGTH_MODE": 1 if dtype == "packed" else 0, "SINK_IN_LSE": dtype == "packed",
    }  # fmt: skip
    # what the launch specializes on: 16-byte aligned pointers and row strides (the launcher
    # takes the Gluon kernel only for such key rows; 576-wide rows give such strides)
    aligned = ("q_ptr", "kv_ptr", "list_ptr", "seq_lens_ptr", "sinks_ptr", "out_ptr", "lse_ptr",
               "workspace_ptr", "stride_qb", "stride_qt", "stride_qh", "stride_kv_row", "stride_kv_tok",
               "stride_list_row", "stride_ob", "stride_ot", "stride_oh")  # fmt: skip
    attrs = {name: [["tt.divisibility", 16]] for name in aligned}
    return compile_for_sm90(kernel, typed, constexprs, {"num_warps": 4, "maxnreg": 168}, attrs)


def _bank_conflicts() -> dict:
    """Bank conflicts of the layouts the gather and the V conversion use (0 is conflict-free)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    from flashinfer.mla.kernels.mla_decode_gluon import V_CONVERT_LAYOUT, gather_layout

    found = {}

    @gluon.jit
    def probe(WHAT: gl.constexpr):
        fp8_tile: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 512], gl.float8e4nv)
        fp16_tile: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 256], gl.float16)
        gather: gl.constexpr = gather_layout(512, 16)
        convert: gl.constexpr = V_CONVERT_LAYOUT
        gl.static_print(
            "BANKS",
            gl.bank_conflicts(
                gl.distributed_type(gl.float8e4nv, [64, 512], gather),
                gl.shared_memory_descriptor_type(gl.float8e4nv, [64, 512], fp8_tile, [64, 512]),
            ),
            gl.bank_conflicts(
                gl.distributed_type(gl.float8e4nv, [64, 512], convert),
                gl.shared_memory_descriptor_type(gl.float8e4nv, [64, 512], fp8_tile, [64, 512]),
            ),
            gl.bank_conflicts(
                gl.distributed_type(gl.float16, [64, 256], convert),
                gl.shared_memory_descriptor_type(gl.float16, [64, 256], fp16_tile, [64, 256]),
            ),
        )

    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        source = gluon._runtime.GluonASTSource(probe, signature={"WHAT": "constexpr"}, constexprs={"WHAT": 0})
        triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    values = re.search(r"BANKS (\d+) (\d+) (\d+)", text.getvalue()).groups()
    found["gather copies"], found["V loads"], found["V stores"] = map(int, values)
    return found


def compile_all(path: str) -> None:
    """Compile every variant and write what each cubin holds (or its error) to ``path``."""
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for variant in VARIANTS:
            try:
                results[variant_id(variant)] = cubin_report(
                    _compile(variant), workdir, ("QGMMA", "HGMMA", "LDGSTS"), ptxas_warnings=True
                )
            except Exception as error:  # reported per variant by the tests
                results[variant_id(variant)] = {"error": f"{type(error).__name__}: {error}"}
        results["bank_conflicts"] = _bank_conflicts()
    with open(path, "w") as file:
        json.dump(results, file)


# ---------------------------------------------------------------------------------------------
# the tests


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    # a fresh cache: the bank-conflict probe reports while it compiles, not from a cached cubin
    return report_from_subprocess(
        __file__, tmp_path_factory.mktemp("gluon_decode"), timeout=1800, fresh_cache=True
    )


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_compiles_for_sm90_with_pipelined_wgmma(compiled, variant):
    result = compiled[variant_id(variant)]
    assert "error" not in result, result.get("error")
    assert result["serialized"] == [], f"ptxas serializes the wgmma: {result['serialized']}"
    count = result["count"]
    if variant[0] == "e4m3":
        assert count["QGMMA"] > 0 and count["HGMMA"] > 0, count  # FP8 Q K^T, fp16 P V
    else:
        assert count["QGMMA"] == 0 and count["HGMMA"] > 0, count
    assert count["LDGSTS"] > 0, count
    assert result["shared"] <= SHARED_MEMORY_LIMIT, result["shared"]
    stack = result["resources"]["STACK"]
    assert stack <= MAX_SPILL_BYTES, f"{stack} bytes of spilled registers"


def test_gather_and_v_conversion_are_free_of_bank_conflicts(compiled):
    assert compiled["bank_conflicts"] == {"gather copies": 0, "V loads": 0, "V stores": 0}


if __name__ == "__main__":
    compile_all(sys.argv[1])
