"""Every public op as one opaque node under ``torch.compile``: the shared pieces.

Each op package has a ``_compile`` module that registers its public functions as
``torch.library`` custom ops in the ``flashinfer`` namespace. A public function asks
:func:`is_compiling` first; only while Dynamo traces it does it call its ``_compile`` wrapper,
which allocates the outputs the caller left to the function (the shapes and dtypes of the
contract, contiguous as the eager path allocates them) and calls the op with every output as a
mutated argument. When the compiled graph runs, the op's implementation is the eager public
function itself (``is_compiling()`` is False then), so results are bit-identical to eager calls,
errors keep their types and messages, and Inductor neither traces nor re-lowers the launch path.

Why every op mutates and returns nothing: a custom op may not return an alias of an input, but
the contract returns the caller's ``out=`` buffers themselves (often slices of one merged
buffer); declaring every output as mutated covers both the given and the allocated case with one
op, and the fake implementation has nothing to allocate.

The ``_compile`` modules are imported from the compiling branch only (Dynamo performs the import
while tracing), so an eager program never registers the ops and pays one
:func:`is_compiling` call per public call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

__all__ = ["NAMESPACE", "custom_op", "is_compiling", "recall", "remember"]

NAMESPACE = "flashinfer"

# bound once: a module attribute read and a call instead of two attribute reads; Dynamo knows
# the function itself, so the alias folds to True while tracing
is_compiling = torch.compiler.is_compiling

# objects a compiled graph refers to by key (see `remember`); kept alive for the graph's sake
_REMEMBERED: dict[int, object] = {}


def _no_outputs(*args, **kwargs) -> None:
    """The fake implementation of every op: the outputs are mutated arguments, nothing is new."""
    return None


def custom_op(name: str, mutates_args: Iterable[str]) -> Callable:
    """Register ``fn`` as the custom op ``flashinfer::<name>`` that writes ``mutates_args``.

    Parameters
    ----------
    name : str
        The op's name in the ``flashinfer`` namespace (the public function's name).
    mutates_args : iterable of str
        The parameters the op writes: every output buffer, and scratch it may write.

    Returns
    -------
    callable
        A decorator: ``fn`` (annotated, returning None) becomes the op's implementation, with a
        fake implementation that returns None.
    """

    def register(fn: Callable) -> Callable:
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=tuple(mutates_args))(fn)
        op.register_fake(_no_outputs)
        return op

    return register


@torch.compiler.assume_constant_result
def remember(obj: object) -> int:
    """A key for ``obj`` that a compiled graph can carry as a constant.

    Runs (not traced) while Dynamo traces the caller, so the key exists before the graph first
    runs; Dynamo guards the compiled code on the identity of ``obj``, so another object compiles
    again rather than reusing this key. The object stays referenced as long as the process: a
    compiled graph may run it any time later.
    """
    key = id(obj)
    _REMEMBERED[key] = obj
    return key


def recall(key: int) -> object:
    """The object :func:`remember` gave ``key`` for."""
    return _REMEMBERED[key]
