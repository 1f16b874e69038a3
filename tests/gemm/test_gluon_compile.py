"""The Hopper Gluon GEMM kernels compile for sm_90 on this CPU-only machine, as shipped.

Triton 3.6 has no CPU interpreter for Gluon, so what can be checked without an H200 is the
compiled code: every tile configuration the launchers can pick, in every layout and output
dtype they launch it with, is compiled to a cubin for sm_90 (Triton's own ptxas) and its SASS
and resource usage read back (Triton's own cuobjdump):

- no register spills (no local-memory loads or stores, no stack) in any partition;
- the register budgets of the partitions (``setmaxnreg``): the producer warp 24, the math
  warpgroups what the launch's ``maxnreg`` leaves;
- the tensor-core and TMA instructions the design relies on: FP8 wgmma (``QGMMA``), TMA loads
  (``UTMALDG``) and, for the batched kernel, TMA stores (``UTMASTG``); the block-scaled kernel's
  16-byte output stores (``STG.E.128``) for rows the launcher found aligned;
- shared memory within the 227 KB a block may use.

The compilation runs in one subprocess without ``TRITON_INTERPRET``: the CPU test folders set it
for the tl kernels, and Triton then builds its own helpers (which Gluon's reductions call) as
interpreted functions, which the compiler cannot take. Results on the H200 are tested in
``tests/gpu/test_gemm_gluon.py``.
"""

from __future__ import annotations

import json
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

LAYOUTS = ("dense", "contiguous", "masked")
# (kernel, configuration name, layout, output dtype, rows per A scale): every combination the
# launchers can pick (the 192-row tile serves the dense layout only)
BLOCKWISE = (
    [("blockwise", "LARGE", "dense", "bfloat16", 1)]
    + [("blockwise", "WIDE", layout, "bfloat16", 1) for layout in LAYOUTS]
    + [("blockwise", name, layout, "bfloat16", 1) for name in ("MEDIUM", "NARROW") for layout in LAYOUTS]
    + [("blockwise", f"SMALL_M[{w}]", layout, "bfloat16", 1) for w in (128, 64, 32) for layout in LAYOUTS]
    + [
        ("blockwise", "MEDIUM", "dense", "float16", 1),
        ("blockwise", "LARGE", "dense", "float16", 128),
        ("blockwise", "FP8_OUTPUT", "dense", "float8_e4m3fn", 1),
    ]
)
BMM = [
    ("bmm", name, "batched", out, 0)
    for name in ("WIDE", "SQUARE", "FEW_ROWS")
    for out in ("bfloat16", "float16")
]
# the decode-size GEMM's Gluon form: every tile (weight rows x tokens), writing partial sums or out
DECODE = [
    ("decode", f"{w}x{t}", target, "bfloat16", 1)
    for w in (64, 128)
    for t in (8, 16, 32, 64, 128)
    for target in ("partial", "out")
]
# the decode-MoE (masked) GEMM: every tile (weight rows x tokens) its launcher can pick or take
MASKED_DECODE = [
    ("masked_decode", f"{w}x{t}", "masked", "bfloat16", 1) for w in (64, 128) for t in (16, 32, 64, 128)
]
VARIANTS = BLOCKWISE + BMM + DECODE + MASKED_DECODE
INSTRUCTIONS = ("QGMMA", "UTMALDG", "UTMASTG", "LDL", "STL", "STG.E.128", "LDGSTS")


def variant_id(variant) -> str:
    return "-".join(map(str, variant))


# ---------------------------------------------------------------------------------------------
# the subprocess: compile every variant, report what the cubin holds


def _config(kernel, name):
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise
    from flashinfer.gemm.kernels.bmm import gluon_fp8_bmm

    if kernel == "bmm":
        return getattr(gluon_fp8_bmm, name)
    if name.startswith("SMALL_M"):
        return gluon_fp8_blockwise.SMALL_M[int(name[8:-1])]
    return getattr(gluon_fp8_blockwise, name)


def _descriptor_type(block, dtype_name):
    from triton.experimental.gluon import language as gl

    short, dtype = {"float8_e4m3fn": ("fp8e4nv", gl.float8e4nv), "bfloat16": ("bf16", gl.bfloat16),
                    "float16": ("fp16", gl.float16)}[dtype_name]  # fmt: skip
    layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
    return f"tensordesc<{short}[{', '.join(map(str, block))}],{layout!r}>"


_DIVISIBLE = (
    "out_ptr",
    "a_scale_ptr",
    "b_scale_ptr",
    "rows_ptr",
    "out_scale_ptr",
    "N",
    "K",
    "stride_og",
    "stride_om",
)


def _compile_decode(name, target):
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_decode_gemm as decode

    w, t = (int(x) for x in name.split("x"))
    typed = {
        "a_desc": _descriptor_type([t, 128], "float8_e4m3fn"),
        "b_desc": _descriptor_type([w, 128], "float8_e4m3fn"),
        "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32", "out_ptr": "*bf16", "partial_ptr": "*fp32", "counter_ptr": "*i32",
    }  # fmt: skip
    constexprs = {
        "SCALE_BM": 1,
        "SCALE_BN": 128,
        "STAGES": decode.stages_for(w, t),
        "PARTIAL": target == "partial",
    }
    return None, compile_for_sm90(
        decode.fp8_decode_gemm_ws_kernel, typed, constexprs, decode.launch_options(w)
    )


def _compile_masked_decode(name):
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_decode_gemm as decode
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_masked_decode_gemm as masked

    w, t = (int(x) for x in name.split("x"))
    typed = {
        "a_desc": _descriptor_type([t, 128], "float8_e4m3fn"),
        "b_desc": _descriptor_type([w, 128], "float8_e4m3fn"),
        "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32", "out_ptr": "*bf16", "masked_m_ptr": "*i32",
    }  # fmt: skip
    constexprs = {"STAGES": masked.stages_for(w, t), "GROUPS": 32}
    return None, compile_for_sm90(
        masked.fp8_masked_decode_gemm_ws_kernel, typed, constexprs, decode.launch_options(w)
    )


def _compile(variant):
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise
    from flashinfer.gemm.kernels.bmm import gluon_fp8_bmm

    kernel_kind, name, layout, out, scale_bm = variant
    if kernel_kind == "decode":
        return _compile_decode(name, layout)
    if kernel_kind == "masked_decode":
        return _compile_masked_decode(name)
    config = _config(kernel_kind, name)
    pointer = {"bfloat16": "*bf16", "float16": "*fp16", "float8_e4m3fn": "*fp8e4nv"}
    tile = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "SUB_N": config.sub_n,
            "GROUP_M": config.group_m, "STAGES": config.stages}  # fmt: skip
    if kernel_kind == "blockwise":
        tile["HALVES"] = config.halves
    if kernel_kind == "blockwise":
        kernel = gluon_fp8_blockwise.fp8_blockwise_ws_kernel
        typed = {
            "a_desc": _descriptor_type([config.a_box, 128], "float8_e4m3fn"),
            "b_desc": _descriptor_type([config.block_n, 128], "float8_e4m3fn"),
            "out_ptr": pointer[out], "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32", "rows_ptr": "*i32",
            "out_scale_ptr": "*fp32",
        }  # fmt: skip
        # as launched for a row-major output: Triton specializes the unit column stride and the
        # 16-divisible pointers and sizes, and the launcher finds the rows 16-byte aligned
        constexprs = {"SCALE_BM": scale_bm, "LAYOUT": LAYOUTS.index(layout), "OUT_FP8": out == "float8_e4m3fn",
                      "OUT_ALIGNED": True, "stride_on": 1, **tile}  # fmt: skip
        attrs = {name: [["tt.divisibility", 16]] for name in _DIVISIBLE}
        options = config.launch_options
    else:
        kernel = gluon_fp8_bmm.fp8_bmm_ws_kernel
        typed = {
            "a_desc": _descriptor_type([config.block_m, 128], "float8_e4m3fn"),
            "b_desc": _descriptor_type([config.block_n, 128], "float8_e4m3fn"),
            "out_desc": _descriptor_type([1, 64, config.sub_n], out),
            "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32",
        }  # fmt: skip
        constexprs, attrs = tile, None
        options = {"num_warps": 4, "maxnreg": 168}
    return config, compile_for_sm90(kernel, typed, constexprs, options, attrs)


def compile_all(path: str) -> None:
    """Compile every variant and write what each cubin holds (or its error) to ``path``."""
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for variant in VARIANTS:
            try:
                config, compiled = _compile(variant)
                results[variant_id(variant)] = cubin_report(compiled, workdir, INSTRUCTIONS)
                if config is not None:
                    results[variant_id(variant)]["math_budget"] = 160 if config.block_m == 192 else 240
            except Exception as error:  # reported per variant by the tests
                results[variant_id(variant)] = {"error": f"{type(error).__name__}: {error}"}
    with open(path, "w") as file:
        json.dump(results, file)


# ---------------------------------------------------------------------------------------------
# the tests


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return report_from_subprocess(__file__, tmp_path_factory.mktemp("gluon"), timeout=3000)


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_compiles_for_sm90_without_spills(compiled, variant):
    result = compiled[variant_id(variant)]
    assert "error" not in result, result.get("error")
    print(result)
    count, resources = result["count"], result["resources"]
    # the 128 x 256 tile's contiguous form keeps a few registers of the tile schedule in local
    # memory (16 loads and 9 stores, outside the K loop, read off its SASS)
    allowed, stack = (32, 32) if variant[1] == "WIDE" and variant[2] == "contiguous" else (0, 0)
    assert count["LDL"] + count["STL"] <= allowed, f"register spills: {count}"
    assert resources["STACK"] <= stack and resources["LOCAL"] == 0, resources
    assert count["QGMMA"] > 0 and count["UTMALDG"] > 0, count
    if variant[0] in ("decode", "masked_decode"):
        # the scales come by cp.async; the producer warp keeps 40 registers (56 with the masked
        # form's group table), a math worker 232
        assert count["LDGSTS"] > 0, count
        producer = 40 if variant[0] == "decode" else 56
        assert producer in result["budgets"] and result["shared"] <= SHARED_MEMORY_LIMIT, result
        return
    if variant[0] == "bmm":
        assert count["UTMASTG"] > 0, count
    else:  # a whole 16-byte vector a thread for aligned rows (element-wise stores wrote 8x the sectors)
        assert count["STG.E.128"] > 0, count
    assert {24, result["math_budget"]} <= set(result["budgets"]), (
        f"partition register budgets {result['budgets']}"
    )
    assert result["shared"] <= SHARED_MEMORY_LIMIT, result["shared"]


def test_every_shipped_config_is_compiled():
    """The variant lists above cover each configuration the modules ship (a new one must be added)."""
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise
    from flashinfer.gemm.kernels.blockwise.decode_gemm_table import GLUON_TABLE
    from flashinfer.gemm.kernels.blockwise.gluon_fp8_masked_decode_gemm import pick_config
    from flashinfer.gemm.kernels.bmm import gluon_fp8_bmm

    covered = {
        _config(kernel, name) for kernel, name, *_ in VARIANTS if kernel not in ("decode", "masked_decode")
    }
    assert set(gluon_fp8_blockwise.CONFIGS) | set(gluon_fp8_bmm.CONFIGS) <= covered
    # (block_n, block_m, ..., gluon): the decode kernel's tiles its table launches
    tiles = {f"{c[0]}x{c[1]}" for rows in GLUON_TABLE.values() for _, c, _ in rows if c[7:] == (True,)}
    assert tiles <= {name for kernel, name, *_ in VARIANTS if kernel == "decode"}
    masked = {f"{c.block_w}x{c.block_t}" for c in map(pick_config, range(1, 257))}
    assert masked <= {name for kernel, name, *_ in VARIANTS if kernel == "masked_decode"}


if __name__ == "__main__":
    compile_all(sys.argv[1])
