"""Registration of the ``flashinfer::`` custom ops and the keys of non-tensor arguments.

Imported by the op packages' ``_compile`` modules, which are imported only while Dynamo traces a
public call (:mod:`flashinfer._core.compile` describes the scheme); importing this module
imports Dynamo.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple

import torch

__all__ = ["NAMESPACE", "Travel", "public_op", "recall", "remember"]

NAMESPACE = "flashinfer"

# objects a compiled graph refers to by key (see `remember`); kept alive for the graph's sake
_REMEMBERED: dict[int, object] = {}


def _no_outputs(*args, **kwargs) -> None:
    """The fake implementation of every op: the outputs are mutated arguments, nothing is new."""
    return None


class Travel(NamedTuple):
    """How one public argument reaches a custom op when the op cannot take it as it is.

    A custom op takes tensors, numbers, strings, dtypes and lists of them, each of one type: a
    scale that may be a float or a tensor, or an object such as decode metadata, travels as other
    values and is joined back before the public function runs.
    """

    parameters: tuple[tuple[str, object], ...]  # the op's parameters for it: (name, type)
    split: Callable | None = None  # the argument -> the values of `parameters`; None: as is
    join: Callable | None = None  # the values of `parameters` -> the argument; None: as is


def public_op(
    fn: Callable,
    outputs: Collection[str],
    *,
    types: Mapping[str, object] | None = None,
    travels: Mapping[str, Travel] | None = None,
) -> Callable[[dict], None]:
    """Register the public function ``fn`` as ``flashinfer::<fn.__name__>``, its schema read from
    ``fn``'s own parameters.

    The op's parameters are ``fn``'s, in its order, typed by its annotations, except where
    ``travels`` says otherwise; its implementation joins the op's values back into ``fn``'s
    arguments and runs ``fn`` (keyword-only parameters, such as FlashInfer's ``skip_check``, by
    keyword).

    Parameters
    ----------
    fn : callable
        The public function.
    outputs : collection of str
        The op parameters the op writes, where it has them: every output buffer the caller can
        read.
    types : mapping of str to type, optional
        The type of each parameter that ``fn`` leaves unannotated and that is not a tensor
        (``torch.dtype``, ``int``, ``list[int]``, ...); any other unannotated parameter is a
        tensor. An unannotated parameter whose default is None is optional.
    travels : mapping of str to Travel, optional
        The public arguments that reach the op as other values, or as a narrower type (an output
        the caller allocates when None, so that the op always receives a tensor).

    Returns
    -------
    callable
        ``call(arguments)``: calls the op (while Dynamo traces) with the public function's
        arguments by name, every output among them set. Its ``parameters`` attribute holds the
        public function's parameter names in order: a public function hands its arguments over
        as a tuple in that order (Dynamo before torch 2.13 cannot trace ``locals()``).
    """
    types = types or {}
    travels = travels or {}
    # the parameters of the function under the decorators, read from its code: `gated` hides
    # skip_check from the signature that inspect reports
    function = inspect.unwrap(fn)
    code = function.__code__
    positional = code.co_argcount
    names = code.co_varnames[: positional + code.co_kwonlyargcount]
    keyword_only = names[positional:]
    positional_defaults = function.__defaults__ or ()
    defaults = dict(zip(names[positional - len(positional_defaults) : positional], positional_defaults))
    defaults.update(function.__kwdefaults__ or {})
    annotations = inspect.get_annotations(function, eval_str=True)

    def as_is(name: str) -> Travel:
        if name in annotations:
            return Travel(((name, annotations[name]),))
        kind = types.get(name, torch.Tensor)
        return Travel(((name, kind | None if name in defaults and defaults[name] is None else kind),))

    routes = tuple(travels[name] if name in travels else as_is(name) for name in names)

    def run(*values) -> None:  # the op's implementation: the public function, run eagerly
        arguments, start = [], 0
        for route in routes:
            end = start + len(route.parameters)
            arguments.append(values[start] if route.join is None else route.join(*values[start:end]))
            start = end
        fn(*arguments[:positional], **dict(zip(keyword_only, arguments[positional:])))

    parameters = [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kind)
        for route in routes
        for name, kind in route.parameters
    ]
    run.__signature__ = inspect.Signature(parameters, return_annotation=None)
    op = torch.library.custom_op(
        f"{NAMESPACE}::{fn.__name__}",
        run,
        mutates_args=tuple(parameter.name for parameter in parameters if parameter.name in outputs),
    )
    op.register_fake(_no_outputs)

    def call(arguments: dict) -> None:
        values = []
        for name, route in zip(names, routes):
            if route.split is None:
                values.append(arguments[name])
            else:
                values.extend(route.split(arguments[name]))
        op(*values)

    call.parameters = names
    return call


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
