"""Registration of the ``flashinfer::`` custom ops and the keys of non-tensor arguments.

Imported by the op packages' ``_compile`` modules, which are imported only while Dynamo traces a
public call (:mod:`flashinfer._core.compile` describes the scheme); importing this module
imports Dynamo.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Iterable, Mapping

import torch

__all__ = ["NAMESPACE", "custom_op", "public_op", "recall", "remember"]

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


def public_op(
    fn: Callable, types: Mapping[str, str], outputs: Collection[str], allocated: Collection[str]
) -> tuple[Callable, tuple[str, ...]]:
    """Register the public function ``fn`` as ``flashinfer::<fn.__name__>``, its schema read from
    ``fn``'s own parameters.

    Parameters
    ----------
    fn : callable
        The public function; the op runs it with the op's arguments in order, its one
        keyword-only parameter (FlashInfer's ``skip_check``) by keyword.
    types : mapping of str to str
        The schema type (``"ScalarType"``, ``"SymInt[]"``) of each parameter that is not a
        tensor; any other parameter is a ``Tensor``. A parameter whose default is None is
        optional (``?``) unless it is in ``allocated``.
    outputs : collection of str
        The parameters the op writes, where ``fn`` has them: every output buffer.
    allocated : collection of str
        The outputs the caller allocates when None, so that the op always receives a tensor.

    Returns
    -------
    tuple
        The op, and ``fn``'s parameter names in the order of the op's arguments.
    """
    # the parameters of the function under the decorators, read from its code: `gated` hides
    # skip_check from the signature that inspect reports
    function = inspect.unwrap(fn)
    code = function.__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    positional_defaults = function.__defaults__ or ()
    defaults = dict(zip(names[code.co_argcount - len(positional_defaults) :], positional_defaults))
    defaults.update(function.__kwdefaults__ or {})
    keyword_only = names[code.co_argcount :]
    if keyword_only == ("skip_check",):

        def implementation(*args) -> None:
            fn(*args[:-1], skip_check=args[-1])

    elif not keyword_only:

        def implementation(*args) -> None:
            fn(*args)

    else:
        raise ValueError(f"`{fn.__name__}` has keyword-only {keyword_only}; an op takes skip_check only")
    arguments = []
    for index, name in enumerate(names):
        kind = types.get(name, "Tensor")
        if name in outputs:
            kind += f"(a{index}!)"
        if name not in allocated and name in defaults and defaults[name] is None:
            kind += "?"
        arguments.append(f"{kind} {name}")
    op = torch.library.custom_op(
        f"{NAMESPACE}::{fn.__name__}",
        implementation,
        mutates_args=tuple(name for name in names if name in outputs),
        schema=f"({', '.join(arguments)}) -> ()",
    )
    op.register_fake(_no_outputs)
    return op, names


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
