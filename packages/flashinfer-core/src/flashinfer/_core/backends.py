"""Declarative backend tables and FlashInfer's public hooks on gated functions.

Upstream wraps its GEMMs in ``@backend_requirement``, which adds a hidden ``skip_check``
keyword and the attributes ``is_backend_supported(backend, cc=None)``,
``is_compute_capability_supported(cc)``, ``has_backend(backend)`` and
``has_backend_choices()``, and fills ``suitable_auto_backends`` on every ``backend="auto"``
call; upstream tests call them to decide what to skip. We keep those hooks but not the
wrapper: the public function takes ``skip_check`` itself (no extra call layer on the hot path)
and refills ``suitable_auto_backends`` (:meth:`BackendTable.fill_suitable`); :func:`gated`
only attaches the attributes and hides ``skip_check`` from ``inspect.signature``, so
introspection shows upstream's signature.

Every name in a table runs on every device: the tensor's device picks the implementation
(``ROUTES`` in each package's ``_dispatch.py``), the name only keeps FlashInfer's name-specific
rules (``rules``). The answers of the hooks are therefore the same for every compute
capability; problem-specific refusals (a known name that cannot run one particular call) raise
:class:`BackendSupportedError` from the op itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from .checks import describe, fail

_SUITABLE_ENTRIES = 256


@dataclass(frozen=True)
class Rule:
    """A requirement one backend name keeps, e.g. ``tgv``: bf16 output only.

    Parameters
    ----------
    arg : str
        The argument the rule constrains (named in the error).
    expected : str
        What it must be, for the error and the README's table.
    holds : callable
        ``holds(*context) -> bool`` over the table's ``context`` values.
    got : callable
        ``got(*context) -> str``: what came, for the error.
    exc : type
        The exception upstream raises for it (default ``ValueError``).
    """

    arg: str
    expected: str
    holds: Callable[..., bool]
    got: Callable[..., str]
    exc: type = ValueError


@dataclass(frozen=True)
class BackendTable:
    """The backend names one public function accepts, and the rules names keep.

    Parameters
    ----------
    function : str
        The public function's name, used in messages.
    upstream : tuple of str
        FlashInfer v0.6.17's literals for this function (empty when it has no ``backend``).
    mate : tuple of str
        MATE's own names, accepted as well.
    context : tuple of str
        What the op passes to :meth:`enforce`, in order: the values the rules read.
    rules : dict
        ``{name: (Rule, ...)}`` for the names with FlashInfer rules of their own.
    auto_order : tuple of str, optional
        The names ``suitable_auto_backends`` lists, in upstream's heuristic order where the
        contract gives one (default: every name but ``auto``, in table order).
    """

    function: str
    upstream: tuple[str, ...] = ()
    mate: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    rules: dict = field(default_factory=dict)
    auto_order: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return self.upstream + tuple(n for n in self.mate if n not in self.upstream)

    def check(self, backend) -> None:
        """Raise ``ValueError`` listing the accepted names if ``backend`` is unknown."""
        if backend not in self.names:
            fail(ValueError, "backend", f"one of {list(self.names)} ({self.function})", describe(backend))

    def enforce(self, backend: str, *context) -> None:
        """Raise the first broken rule of ``backend`` (a known name) for these context values."""
        for rule in self.rules.get(backend, ()):
            if not rule.holds(*context):
                fail(rule.exc, rule.arg, f"{rule.expected} (backend={backend!r})", rule.got(*context))

    @cached_property
    def holds(self) -> dict:
        """``{name: holds(*context) -> bool}``, True when every rule of the name holds: the hot
        path's guard (one call where the rules pass), :meth:`enforce` then says which one broke."""
        return {name: _every(rules) for name, rules in self.rules.items()}

    @cached_property
    def suitable_auto_backends(self) -> list:
        """The public function's ``suitable_auto_backends``: one list, refilled in place by
        :meth:`fill_suitable` (so a logging wrapper that copied the attribute sees it too)."""
        return []

    def fill_suitable(self, *context) -> None:
        """Set ``suitable_auto_backends`` for an ``auto`` call with these context values: the
        names whose rules hold, in :attr:`auto_order` (every name runs this device's
        implementation, so the list is never empty). Memoized per context (hashable values, at
        most ``_SUITABLE_ENTRIES``): a dict lookup and, when the context changed since the last
        call, a list copy."""
        memo = self._suitable
        names = memo.get(context)
        if names is None:
            order = self.auto_order or tuple(n for n in self.names if n != "auto")
            holds = self.holds
            if len(memo) >= _SUITABLE_ENTRIES:
                memo.clear()
            names = memo[context] = [n for n in order if n not in holds or holds[n](*context)]
        target = self.suitable_auto_backends
        if target != names:
            target[:] = names

    @cached_property
    def _suitable(self) -> dict:
        return {}

    @property
    def notes(self) -> dict:
        """``{name: its rules in words}`` for the README and ``show-config``."""
        return {
            name: "; ".join(f"`{rule.arg}` {rule.expected}" for rule in rules)
            for name, rules in self.rules.items()
        }


def _every(rules: tuple) -> Callable[..., bool]:
    """One function that tells whether every rule of ``rules`` holds (a lone rule's own test)."""
    if len(rules) == 1:
        return rules[0].holds
    tests = tuple(rule.holds for rule in rules)

    def every(*context) -> bool:
        for holds in tests:
            if not holds(*context):
                return False
        return True

    return every


def gated(table: BackendTable):
    """Attach FlashInfer's backend hooks to a public function (which it returns unchanged)."""

    def attach(fn):
        names = table.names

        def is_backend_supported(backend: str, cc: int | None = None) -> bool:
            return backend in names

        def is_compute_capability_supported(cc: int) -> bool:
            return True

        def has_backend(backend: str) -> bool:
            return backend in names

        def has_backend_choices() -> bool:
            return bool(names)

        fn.is_backend_supported = is_backend_supported
        fn.is_compute_capability_supported = is_compute_capability_supported
        fn.has_backend = has_backend
        fn.has_backend_choices = has_backend_choices
        fn.backend_table = table
        if names:
            fn.suitable_auto_backends = table.suitable_auto_backends
        sig = inspect.signature(fn)
        fn.__signature__ = sig.replace(
            parameters=[p for p in sig.parameters.values() if p.name != "skip_check"]
        )
        return fn

    return attach
