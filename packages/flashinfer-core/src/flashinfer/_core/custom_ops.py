"""Registration of the ``flashinfer::`` custom ops and the keys of non-tensor arguments.

Imported by the op packages' ``_compile`` modules, which are imported only while Dynamo traces a
public call (:mod:`flashinfer._core.compile` describes the scheme).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple

import torch

__all__ = ["NAMESPACE", "Travel", "public_op"]

NAMESPACE = "flashinfer"


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
        arguments by name, every output among them set. Its ``bind(args, kwargs)`` turns a call
        as made into those arguments, defaults filled in, with Python's errors for a call that
        does not fit the signature.
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

    def bind(args: tuple, kwargs: dict) -> dict:
        if len(args) > positional:
            raise TypeError(
                f"{fn.__name__}() takes {positional} positional arguments but {len(args)} were given"
            )
        arguments = dict(defaults)
        arguments.update(zip(names, args))
        for name in kwargs:
            if name not in names:
                raise TypeError(f"{fn.__name__}() got an unexpected keyword argument '{name}'")
            if name in names[: len(args)]:
                raise TypeError(f"{fn.__name__}() got multiple values for argument '{name}'")
        arguments.update(kwargs)
        for name in names:
            if name not in arguments:
                raise TypeError(f"{fn.__name__}() missing required argument: '{name}'")
        return arguments

    call.bind = bind
    return call
