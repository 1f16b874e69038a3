"""Say which distribution to install when a part of the ``flashinfer`` namespace is missing.

The ``flashinfer`` namespace is split over four distributions (``docs/internals.md``). On a
partial install, say ``flashinfer-core`` + ``flashinfer-gemm``, ``import flashinfer.mla`` would
fail with only ``No module named 'flashinfer.mla'``. ``_flashinfer_parts.pth``, which
``flashinfer-core`` installs beside this module, appends :class:`MissingPartFinder` to
``sys.meta_path`` when the interpreter starts: being last, it is asked only after every other
finder has found nothing, and it turns that failure into a ``ModuleNotFoundError`` naming the
distribution that ships the module. It imports nothing but ``sys``, so the start-up cost is the
import of this file; a probe (``importlib.util.find_spec``) still gets None, as without it.
"""

from __future__ import annotations

import sys

# the modules of the namespace each distribution other than flashinfer-core ships
PROVIDERS = {
    "flashinfer.gemm": "flashinfer-gemm",
    "flashinfer.mla": "flashinfer-mla",
    "flashinfer.rope": "flashinfer-mla",
    "flashinfer.decode": "flashinfer-mla",
    "flashinfer.prefill": "flashinfer-mla",
}


class MissingPartFinder:
    """The last meta path finder: names the distribution of a missing ``flashinfer`` part."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        distribution = PROVIDERS.get(name)
        # only an import statement gets the error (importlib's _find_and_load_unlocked called
        # _find_spec, which called this); a probe such as importlib.util.find_spec gets None
        if distribution is None or sys._getframe(2).f_code.co_name != "_find_and_load_unlocked":
            return None
        from importlib import metadata  # the failure path only

        try:  # every distribution of this build has flashinfer-core's version
            pin = f"=={metadata.version('flashinfer-core')}"
        except metadata.PackageNotFoundError:
            pin = ""
        raise ModuleNotFoundError(
            f"No module named {name!r}: it is shipped by the {distribution} distribution, which is not "
            f"installed here (install {distribution}{pin} from this build's wheels or checkout, or "
            f"flashinfer-python{pin} for the whole API)",
            name=name,
        )


def install() -> None:
    """Append the finder to ``sys.meta_path`` once (the ``.pth`` file calls this)."""
    if not any(isinstance(finder, MissingPartFinder) for finder in sys.meta_path):
        sys.meta_path.append(MissingPartFinder())
