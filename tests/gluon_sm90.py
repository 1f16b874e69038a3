"""Compile Gluon kernels for sm_90 on a machine without a GPU and read back what the cubin holds.

Triton (3.6 to 3.9) compiles for a target no GPU is present for; its package carries ``ptxas`` and
``cuobjdump``. The compile tests (``tests/gemm/test_gluon_compile.py``,
``tests/mla/test_gluon_decode_compile.py``) compile in a subprocess without ``TRITON_INTERPRET``
(the CPU test folders switch the interpreter on, and Gluon's compiler cannot take interpreted
helpers): :func:`report_from_subprocess` runs the test file as a script, which writes one report
per variant with :func:`cubin_report`. Triton is imported only in that subprocess: importing it at
collection would fix its own helpers in compiled mode before the interpreter is switched on.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flashinfer._core.kernel_tier import GLUON_TRITON_VERSIONS

TRITON = importlib.metadata.version("triton")
requires_gluon_triton = pytest.mark.skipif(
    tuple(int(part) for part in TRITON.split(".")[:2]) not in GLUON_TRITON_VERSIONS,
    reason=f"the Gluon tier does not run under Triton {TRITON} (kernel_tier.GLUON_TRITON_VERSIONS: "
    f"{GLUON_TRITON_VERSIONS}): nothing compiled here ships",
)
SHARED_MEMORY_LIMIT = 227 * 1024  # what one block may use on an H100/H200


def compile_for_sm90(kernel, typed: dict, constexprs: dict, options: dict, attrs: dict | None = None):
    """``triton.compile`` of a Gluon kernel for sm_90: the parameters in ``typed`` have those
    types, those in ``constexprs`` these values, every other one is an int32 size or stride;
    ``attrs`` maps parameter names to their specialization (``tt.divisibility`` 16)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental import gluon

    signature = {param: "i32" for param in kernel.arg_names}
    signature.update(typed)
    signature.update({param: "constexpr" for param in constexprs})
    names = list(kernel.arg_names)
    specialization = {(names.index(name),): value for name, value in (attrs or {}).items()}
    source = gluon._runtime.GluonASTSource(
        kernel, signature=signature, constexprs=constexprs, attrs=specialization
    )
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def cubin_report(compiled, workdir: str, instructions: tuple, ptxas_warnings: bool = False) -> dict:
    """What a compiled kernel holds: shared memory, ``REG``/``STACK``/``LOCAL`` resources, the count
    of each SASS instruction in ``instructions``, the partitions' register budgets
    (``setmaxnreg``) and, with ``ptxas_warnings``, ptxas's wgmma serialization warnings
    (C7510-C7519), which Triton's compile keeps to itself (ptxas is asked again)."""
    import triton

    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    cubin, ptx = os.path.join(workdir, "kernel.cubin"), os.path.join(workdir, "kernel.ptx")
    with open(cubin, "wb") as file:
        file.write(compiled.asm["cubin"])
    with open(ptx, "w") as file:
        file.write(compiled.asm["ptx"])

    def run(*command):
        return subprocess.run(command, capture_output=True, text=True, check=True)

    usage = run(os.path.join(tools, "cuobjdump"), "--dump-resource-usage", cubin).stdout
    sass = run(os.path.join(tools, "cuobjdump"), "--dump-sass", cubin).stdout
    budgets = re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", compiled.asm["ptx"])
    report = {
        "shared": compiled.metadata.shared,
        "resources": {key: int(value) for key, value in re.findall(r"(REG|STACK|LOCAL):(\d+)", usage)},
        "count": {op: len(re.findall(rf"\b{op}\b", sass)) for op in instructions},
        "budgets": sorted({int(value) for value in budgets}),
    }
    if ptxas_warnings:
        from triton.backends.nvidia.compiler import get_ptxas

        # the ptxas Triton itself compiles sm_90 with (3.9 takes its newer, "blackwell" one)
        ptxas = run(get_ptxas(90).path, "-arch=sm_90a", "-v", ptx, "-o", cubin + ".again").stderr
        report["serialized"] = re.findall(r"\(C751\d\)[^\n]*", ptxas)
    return report


def report_from_subprocess(test_file: str, folder: Path, timeout: int, fresh_cache: bool = False) -> dict:
    """Run ``test_file`` as a script (``python test_file REPORT``) without the interpreter and
    load the report it writes (``fresh_cache``: an empty Triton cache, for probes that report
    while compiling)."""
    path = folder / "compiled.json"
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(Path(__file__).parent), env.get("PYTHONPATH"))))
    if fresh_cache:
        env["TRITON_CACHE_DIR"] = str(folder / "triton_cache")
    subprocess.run([sys.executable, test_file, str(path)], env=env, check=True, timeout=timeout)
    return json.loads(path.read_text())
