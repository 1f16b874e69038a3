"""The Hopper Gluon GEMM kernels compile for sm_90 on this CPU-only machine, as shipped.

Triton 3.6 has no CPU interpreter for Gluon, so what can be checked without an H200 is the
compiled code: every tile configuration the launchers can pick, in every layout and output
dtype they launch it with, is compiled to a cubin for sm_90 (Triton's own ptxas) and its SASS
and resource usage read back (Triton's own cuobjdump):

- no register spills (no local-memory loads or stores, no stack) in any partition;
- the register budgets of the partitions (``setmaxnreg``): the producer warp 24, the math
  warpgroups what the launch's ``maxnreg`` leaves;
- the tensor-core and TMA instructions the design relies on: FP8 wgmma (``QGMMA``), TMA loads
  (``UTMALDG``) and, for the batched kernel, TMA stores (``UTMASTG``);
- shared memory within the 227 KB a block may use.

Results on the H200 are tested in ``tests/gpu/test_gemm_gluon.py``.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
import triton

from flashinfer._core.kernel_tier import GLUON_TRITON_VERSIONS

VERSION = tuple(int(part) for part in triton.__version__.split(".")[:2])
pytestmark = pytest.mark.skipif(
    VERSION not in GLUON_TRITON_VERSIONS,
    reason=f"the Gluon kernels use Triton {GLUON_TRITON_VERSIONS}'s Gluon API; this is Triton {triton.__version__}",
)

SHARED_MEMORY_LIMIT = 227 * 1024


def _target():
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", 90, 32)


def _descriptor_type(block, torch_dtype):
    from triton.experimental.gluon import language as gl

    names = {"float8_e4m3fn": ("fp8e4nv", gl.float8e4nv), "bfloat16": ("bf16", gl.bfloat16),
             "float16": ("fp16", gl.float16)}  # fmt: skip
    name, dtype = names[torch_dtype]
    layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
    return f"tensordesc<{name}[{', '.join(map(str, block))}],{layout!r}>"


def _compile(kernel, descriptors, pointers, constexprs, options):
    # every other parameter is an int32 size or stride
    from triton.experimental import gluon

    signature = {name: "i32" for name in kernel.arg_names}
    signature.update(descriptors)
    signature.update(pointers)
    signature.update({name: "constexpr" for name in constexprs})
    source = gluon._runtime.GluonASTSource(kernel, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=_target(), options=options)


def _inspect(compiled, tmp_path):
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(compiled.asm["cubin"])

    def run(flag):
        return subprocess.run(
            [os.path.join(tools, "cuobjdump"), flag, str(cubin)], capture_output=True, text=True, check=True
        ).stdout

    usage, sass = run("--dump-resource-usage"), run("--dump-sass")
    count = {op: len(re.findall(rf"\b{op}\b", sass)) for op in ("QGMMA", "UTMALDG", "UTMASTG", "LDL", "STL")}
    budgets = {
        int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", compiled.asm["ptx"])
    }
    resources = {key: int(value) for key, value in re.findall(r"(REG|STACK|LOCAL):(\d+)", usage)}
    return count, budgets, resources


def _assert_sound(compiled, tmp_path, math_budget, tma_store=False):
    count, budgets, resources = _inspect(compiled, tmp_path)
    print(f"shared={compiled.metadata.shared} {resources} setmaxnreg={sorted(budgets)} {count}")
    assert count["LDL"] == count["STL"] == 0, f"register spills: {count}"
    assert resources["STACK"] == 0 and resources["LOCAL"] == 0, resources
    assert count["QGMMA"] > 0 and count["UTMALDG"] > 0, count
    assert not tma_store or count["UTMASTG"] > 0, count
    assert {24, math_budget} <= budgets, f"partition register budgets {sorted(budgets)}"
    assert compiled.metadata.shared <= SHARED_MEMORY_LIMIT, compiled.metadata.shared


def _blockwise_variants():
    from flashinfer.gemm.kernels import gluon_fp8_blockwise as k

    variants = []
    for name, config in (("LARGE", k.LARGE), ("MEDIUM", k.MEDIUM), ("NARROW", k.NARROW)):
        layouts = (k.DENSE,) if config is k.LARGE else (k.DENSE, k.CONTIGUOUS, k.MASKED)
        variants += [(name, config, layout.value, "bfloat16", 1) for layout in layouts]
    for width, config in k.SMALL_M.items():
        variants += [(f"SMALL_M[{width}]", config, layout, "bfloat16", 1) for layout in (0, 1, 2)]
    variants += [
        ("MEDIUM", k.MEDIUM, k.DENSE.value, "float16", 1),
        ("LARGE", k.LARGE, k.DENSE.value, "float16", 128),
        ("FP8_OUTPUT", k.FP8_OUTPUT, k.DENSE.value, "float8_e4m3fn", 1),
    ]
    return variants


def _variant_id(variant):
    name, _, layout, out, scale_bm = variant
    return f"{name}-{('dense', 'contiguous', 'masked')[layout]}-{out}-scale{scale_bm}"


@pytest.mark.parametrize("variant", _blockwise_variants(), ids=_variant_id)
def test_blockwise_kernel_compiles_for_sm90(variant, tmp_path):
    """Every (tile, layout, output) the block-scaled launchers can pick."""
    from flashinfer.gemm.kernels import gluon_fp8_blockwise as k

    _, config, layout, out, scale_bm = variant
    compiled = _compile(
        k.fp8_blockwise_ws_kernel,
        {
            "a_desc": _descriptor_type([min(config.block_m, 128), 128], "float8_e4m3fn"),
            "b_desc": _descriptor_type([config.block_n, 128], "float8_e4m3fn"),
        },
        {
            "out_ptr": "*" + {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8e4nv"}[out],
            "a_scale_ptr": "*fp32",
            "b_scale_ptr": "*fp32",
            "rows_ptr": "*i32",
            "out_scale_ptr": "*fp32",
        },  # fmt: skip
        {
            "SCALE_BM": scale_bm,
            "LAYOUT": layout,
            "OUT_FP8": out == "float8_e4m3fn",
            "BLOCK_M": config.block_m,
            "BLOCK_N": config.block_n,
            "SUB_N": config.sub_n,
            "GROUP_M": config.group_m,
            "STAGES": config.stages,
        },  # fmt: skip
        config.launch_options,
    )
    _assert_sound(compiled, tmp_path, math_budget=160 if config.math_warpgroups == 3 else 240)


@pytest.mark.parametrize("name", ["WIDE", "SQUARE", "FEW_ROWS"])
@pytest.mark.parametrize("out", ["bfloat16", "float16"])
def test_bmm_kernel_compiles_for_sm90(name, out, tmp_path):
    from flashinfer.gemm.kernels import gluon_fp8_bmm as k

    config = getattr(k, name)
    compiled = _compile(
        k.fp8_bmm_ws_kernel,
        {
            "a_desc": _descriptor_type([config.block_m, 128], "float8_e4m3fn"),
            "b_desc": _descriptor_type([config.block_n, 128], "float8_e4m3fn"),
            "out_desc": _descriptor_type([1, 64, config.sub_n], out),
        },
        {"a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32"},
        {
            "BLOCK_M": config.block_m,
            "BLOCK_N": config.block_n,
            "SUB_N": config.sub_n,
            "GROUP_M": config.group_m,
            "STAGES": config.stages,
        },  # fmt: skip
        {"num_warps": 4, "maxnreg": 168},
    )
    _assert_sound(compiled, tmp_path, math_budget=240, tma_store=True)


def test_every_shipped_config_is_compiled_above():
    """The lists above cover each configuration the modules ship (a new one must be added)."""
    from flashinfer.gemm.kernels import gluon_fp8_blockwise as blockwise
    from flashinfer.gemm.kernels import gluon_fp8_bmm as bmm

    compiled = {variant[1] for variant in _blockwise_variants()}
    assert set(blockwise.CONFIGS) <= compiled
    assert set(bmm.CONFIGS) == {bmm.WIDE, bmm.SQUARE, bmm.FEW_ROWS}
