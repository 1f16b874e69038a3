"""Lazy loading of MATE (MUSA AI Tensor Engine), with errors that say what to install.

MATE is never imported at ``import flashinfer``: the MATE adapters call these helpers only
when a MUSA tensor is seen. Three failures are told apart:

- MATE missing: no module ``mate`` at all;
- an unrelated package named ``mate`` (PyPI's ``mate`` is a unittest matcher library): a
  module ``mate`` exists but has none of MATE's submodules;
- MATE too old for an op: MATE is there but lacks the function the op needs;

and a fourth, a MATE module that is there but fails to import (one of its own dependencies
missing), is said with its import error.

Each raises :class:`flashinfer.utils.LibraryError`. Capabilities are detected by looking for
functions, never by comparing version strings.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

from .errors import LibraryError

INSTALL_HINT = (
    "MATE ships with the Moore Threads MUSA software stack (install torch_musa, then the "
    "`mate` and `mate-mubin` wheels from Moore Threads with --no-deps); it is not the PyPI "
    "project named `mate`"
)

_MATE_SUBMODULES = ("mate.gemm", "mate.sparse_mla_interface", "mate.deep_gemm", "mate.flashmla")

_cache: dict[tuple[str, str], object] = {}


def reset_cache() -> None:
    """Forget every module and function found so far (tests swap MATE stand-ins)."""
    _cache.clear()


def mate_version() -> str | None:
    """MATE's version string, or None when no real MATE is installed."""
    if importlib.util.find_spec("mate") is None or not _is_real_mate():
        return None
    try:
        return importlib.metadata.version("mate")
    except importlib.metadata.PackageNotFoundError:
        mate = importlib.import_module("mate")
        return str(getattr(mate, "__version__", "unknown"))


def _is_real_mate() -> bool:
    for name in _MATE_SUBMODULES:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def _check_installed(op: str) -> None:
    if importlib.util.find_spec("mate") is None:
        raise LibraryError(f"{op} on a MUSA device needs MATE, which is not installed; {INSTALL_HINT}.")
    if not _is_real_mate():
        raise LibraryError(
            f"{op} on a MUSA device needs MATE, but the installed package named `mate` is an "
            f"unrelated project (it has none of MATE's modules); uninstall it "
            f"(pip uninstall mate) and install MATE: {INSTALL_HINT}."
        )


def find_function(module: str, name: str):
    """Return ``module.name`` from MATE, or None if MATE, that module or that function is absent.

    Raises
    ------
    LibraryError
        The module is installed but fails to import (a dependency of MATE's missing or broken):
        said with the import error, never taken for an older MATE.
    """
    key = (module, name)
    if key in _cache:
        return _cache[key]
    fn = None
    if importlib.util.find_spec("mate") is not None and _is_real_mate():
        try:
            fn = getattr(importlib.import_module(module), name, None)
        except ModuleNotFoundError as error:
            missing = error.name or ""
            if module != missing and not module.startswith(missing + "."):  # not `module` itself
                raise _broken(module, error) from error
        except ImportError as error:
            raise _broken(module, error) from error
    _cache[key] = fn
    return fn


def _broken(module: str, error: ImportError) -> LibraryError:
    return LibraryError(
        f"MATE's {module} is installed but fails to import ({type(error).__name__}: {error}); "
        f"repair the MATE installation. {INSTALL_HINT}."
    )


def require_function(module: str, name: str, op: str, since: str = "0.2.6"):
    """Return ``module.name`` from MATE or raise :class:`LibraryError` saying why it is absent."""
    fn = find_function(module, name)
    if fn is not None:
        return fn
    _check_installed(op)
    version = mate_version() or "unknown"
    raise LibraryError(
        f"{op} on a MUSA device needs {module}.{name}, which the installed MATE ({version}) "
        f"does not have; install MATE {since} or newer. {INSTALL_HINT}."
    )
