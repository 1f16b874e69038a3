"""Every public op as one opaque node under ``torch.compile``: the shared pieces.

Each op package has a ``_compile`` module that registers its public functions as
``torch.library`` custom ops in the ``flashinfer`` namespace. A public function asks
:func:`is_compiling` first; only while Dynamo traces it does it call its ``_compile`` wrapper,
which allocates the outputs the caller left to the function (the shapes and dtypes of the
contract, contiguous as the eager path allocates them) and calls the op with every output as a
mutated argument. When the compiled graph runs, the op's implementation is the eager public
function itself (:func:`is_compiling` is False then), so results are bit-identical to eager calls,
errors keep their types and messages, and Inductor neither traces nor re-lowers the launch path.

Why every op mutates and returns nothing: a custom op may not return an alias of an input, but
the contract returns the caller's ``out=`` buffers themselves (often slices of one merged
buffer); declaring every output as mutated covers both the given and the allocated case with one
op, and the fake implementation has nothing to allocate.

The ``_compile`` modules, and :mod:`flashinfer._core.custom_ops` that registers their ops, are
imported from the compiling branch only (Dynamo performs the import while tracing): an eager
program never imports Dynamo or registers an op, and pays one :func:`is_compiling` call per
public call.
"""

from __future__ import annotations

import torch

__all__ = ["is_compiling"]

# torch.compiler.is_dynamo_compiling: a bare `return False` eagerly, where
# torch.compiler.is_compiling also asks torch.jit.is_scripting, a cost benchmarks/host_overhead.py
# sees in a GEMM's API layer (benchmarks/RESULTS.md, "Host time"); Dynamo replaces the call by
# True while it traces, which is when the op must be used. Bound once, so a call is one global
# read; Dynamo knows the function object itself.
is_compiling = torch.compiler.is_dynamo_compiling
