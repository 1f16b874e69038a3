"""Every public op as one opaque node under ``torch.compile``: the hand-off, written once.

Each op package has a ``_compile`` module that registers its public functions as
``torch.library`` custom ops in the ``flashinfer`` namespace. A public function is marked with
:func:`one_node`; when Dynamo meets a call of it (inside a compiled function, or as the function
given to ``torch.compile`` itself) it traces the marker's hand-off instead of the function's body.
The hand-off imports the package's ``_compile`` module, which binds the arguments by name,
allocates the outputs the caller left to the function (the shapes and dtypes of the contract,
contiguous as the eager path allocates them) and calls the op with every output as a mutated
argument. When the compiled graph runs, the op's implementation is the eager public function
itself, so results are bit-identical to eager calls, errors keep their types and messages, and
Inductor neither traces nor re-lowers the launch path.

Why every op mutates and returns nothing: a custom op may not return an alias of an input, but
the contract returns the caller's ``out=`` buffers themselves (often slices of one merged
buffer); declaring every output as mutated covers both the given and the allocated case with one
op, and the fake implementation has nothing to allocate.

Why a marker and not a wrapper: a Python wrapper costs 0.2-0.3 us per eager call on the CI
machine's CPU, 7-10 % of a GEMM's whole API layer (``benchmarks/host_time.py --section
api-layer``), where the marker costs nothing: the public function is returned unchanged, with three attributes Dynamo
itself reads on the wrappers it makes (``_torchdynamo_inline``: trace this instead of the body;
``_torchdynamo_orig_callable`` with ``_torchdynamo_wrapper_id``: compile this instead, for
``torch.compile(fn)``). They are Dynamo's private protocol: ``tests/integration/test_torch_compile.py``
(CPU, the CI's torch) and ``tests/gpu/test_optable_cuda.py`` (the GPU machine's torch) fail if a
torch release stops honouring them.

The ``_compile`` modules, and :mod:`flashinfer._core.custom_ops` that registers their ops, are
imported from the hand-off only (Dynamo performs the import while tracing): an eager program
never imports Dynamo or registers an op.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from types import ModuleType

import torch

__all__ = ["PUBLIC", "is_compiling", "keep", "kept", "one_node"]

# torch.compiler.is_dynamo_compiling: a bare `return False` eagerly, where
# torch.compiler.is_compiling also asks torch.jit.is_scripting; Dynamo replaces the call by True
# while it traces. Bound once, so a call is one global read; Dynamo knows the function object.
is_compiling = torch.compiler.is_dynamo_compiling

# name -> the public function marked by `one_node`: what a `_compile` module registers as the op
PUBLIC: dict[str, Callable] = {}

# objects a compiled graph refers to by id (`keep`); weak, so that a caller's object lives as
# long as the caller keeps it (an id reused by a later object maps to that object)
_KEPT: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_NOT_KEPT = object()


def one_node(layer: Callable[[], ModuleType]) -> Callable[[Callable], Callable]:
    """Mark a public function (outermost decorator): under ``torch.compile`` a call of it is one
    ``flashinfer::<name>`` node.

    Parameters
    ----------
    layer : callable
        Returns the package's ``_compile`` module (a function that imports it, so that the import
        happens only while Dynamo traces). Its ``call(name, args, kwargs)`` receives the public
        call as made.

    Returns
    -------
    callable
        The decorator; it returns the function unchanged, marked and recorded in :data:`PUBLIC`.
    """

    def mark(fn: Callable) -> Callable:
        name = fn.__name__

        def hand_off(*args, **kwargs):
            return layer().call(name, args, kwargs)

        hand_off.__name__ = hand_off.__qualname__ = name
        fn._torchdynamo_inline = hand_off  # a call of `fn` met while tracing
        fn._torchdynamo_orig_callable = hand_off  # torch.compile(fn) itself
        fn._torchdynamo_wrapper_id = id(fn)
        PUBLIC[name] = fn
        return fn

    return mark


def keep(obj: object) -> None:
    """Let a compiled graph refer to ``obj`` by ``id(obj)`` (:func:`kept`) for as long as it lives."""
    _KEPT[id(obj)] = obj


def kept(key: int) -> object:
    """The living object :func:`keep` was given with ``id`` ``key``; a plain ``object()`` if none
    (the op's public function then rejects it by its type)."""
    return _KEPT.get(key, _NOT_KEPT)
