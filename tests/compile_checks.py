"""Running a public call compiled (``torch.compile(fullgraph=True)``) beside the same call eager.

Shared by ``tests/integration/test_torch_compile.py`` (reference and MATE stand-in), the
interpreted Triton tables (``tests/{gemm,mla}/triton``) and ``tests/gpu``: :func:`run_both` calls
a function on two copies of one call, eager and compiled, :class:`Graphs` keeps what Dynamo
captured, :func:`assert_identical` compares the results bit for bit.
"""

from __future__ import annotations

import torch
from oracles import poison
from torch._inductor.compile_fx import compile_fx


class Graphs:
    """A ``torch.compile`` backend that keeps every graph Dynamo hands over, then runs Inductor."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return compile_fx(gm, example_inputs)

    def flashinfer_nodes(self) -> list:
        return [
            node.target
            for gm in self.graphs
            for node in gm.graph.nodes
            if node.op == "call_function" and getattr(node.target, "namespace", None) == "flashinfer"
        ]

    def other_calls(self) -> list:
        """Calls besides the op and the allocation of outputs (``torch.empty``)."""
        return [
            node.target
            for gm in self.graphs
            for node in gm.graph.nodes
            if node.op in ("call_function", "call_method")
            and getattr(node.target, "namespace", None) != "flashinfer"
            and node.target is not torch.empty
        ]


def copied(args, kwargs):
    """A deep copy of a call's arguments: every storage cloned once, so views keep their strides,
    offsets and aliasing (outputs that are slices of one merged buffer stay so)."""
    storages = {}

    def copy(value):
        if isinstance(value, (list, tuple)):
            return type(value)(copy(v) for v in value)
        if not isinstance(value, torch.Tensor):
            return value
        key = value.untyped_storage().data_ptr()
        if key not in storages:
            storages[key] = value.untyped_storage().clone()
        fresh = torch.empty(0, dtype=value.dtype, device=value.device)
        return fresh.set_(storages[key], value.storage_offset(), value.shape, value.stride())

    return copy(tuple(args)), {k: copy(v) for k, v in kwargs.items()}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes of ``tensor`` in logical order (NaN == NaN, -0 != 0)."""
    return tensor.contiguous().flatten().view(torch.uint8)


def flat(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def assert_identical(compiled, eager) -> None:
    compiled, eager = flat(compiled), flat(eager)
    assert len(compiled) == len(eager)
    for i, (c, e) in enumerate(zip(compiled, eager)):
        assert (c.shape, c.dtype, c.stride()) == (e.shape, e.dtype, e.stride()), i
        assert torch.equal(_bits(c), _bits(e)), f"result {i} differs from the eager call"


def run_both(fn, args, kwargs, outputs=(), itself=False):
    """``fn`` eagerly and compiled (fullgraph) on separate copies of the call, outputs poisoned
    alike; returns (compiled result, eager result, the compiled call's kwargs, the backend).
    Compiled is a function that calls ``fn``, as an engine's layer does, or with ``itself``
    ``torch.compile(fn)``."""
    backend = Graphs()
    for name in outputs:
        poison(kwargs[name])
    eager_args, eager_kwargs = copied(args, kwargs)
    eager = fn(*eager_args, **eager_kwargs)
    compiled_args, compiled_kwargs = copied(args, kwargs)
    traced = fn if itself else lambda *a, **k: fn(*a, **k)
    compiled_fn = torch.compile(traced, fullgraph=True, backend=backend)
    compiled = compiled_fn(*compiled_args, **compiled_kwargs)
    return compiled, eager, compiled_kwargs, backend


def check_sample(op, sample, itself=False) -> Graphs:
    """``op`` (an op-table entry) on ``sample`` compiled (called from a compiled function, or with
    ``itself`` compiled itself): one graph, one ``flashinfer::`` node and nothing else but output
    allocations, results bit-identical to the eager call, caller buffers returned as the same
    objects. Returns the captured graphs."""
    compiled, eager, compiled_kwargs, graphs = run_both(
        op.fn, sample.args, sample.kwargs, sample.outputs, itself
    )
    assert len(graphs.graphs) == 1, "a graph break"
    assert len(graphs.flashinfer_nodes()) == 1, graphs.flashinfer_nodes()
    assert graphs.other_calls() == []
    assert_identical(compiled, eager)
    returned = flat(compiled)
    for output in sample.outputs:
        assert any(r is compiled_kwargs[output] for r in returned), f"`{output}` is not returned as given"
    return graphs
