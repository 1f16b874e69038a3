"""Registration of the ``flashinfer::`` custom ops and the keys of non-tensor arguments.

Imported by the op packages' ``_compile`` modules, which are imported only while Dynamo traces a
public call (:mod:`flashinfer._core.compile` describes the scheme); importing this module
imports Dynamo.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

__all__ = ["NAMESPACE", "custom_op", "recall", "remember"]

NAMESPACE = "flashinfer"

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
        The parameters the op writes: every output buffer the caller can read.

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
