"""FlashInfer-compatible kernels for MUSA (through MATE) and every other PyTorch device.

This metapackage's ``flashinfer/__init__.py`` is the only one: ``flashinfer-core``,
``flashinfer-gemm`` and ``flashinfer-mla`` ship portions of the same namespace, which
``pkgutil.extend_path`` below makes visible wherever they are installed (editable installs
included).
"""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)

__version__ = "0.6.17+musa"
try:  # written into the wheel by its build (hatch_build.py); absent in a source checkout
    from ._build_info import GIT_COMMIT as __git_commit__
except ImportError:
    __git_commit__ = "unknown"
__git_version__ = __git_commit__

from . import autotuner, decode, gemm, jit, mla, prefill, rope, utils  # noqa: E402
from .autotuner import autotune  # noqa: E402
from .gemm import bmm_bf16, bmm_fp8  # noqa: E402
from .tllm_enums import SfLayout  # noqa: E402
from .utils import next_positive_power_of_2  # noqa: E402

__all__ = [
    "SfLayout",
    "autotune",
    "autotuner",
    "bmm_bf16",
    "bmm_fp8",
    "decode",
    "gemm",
    "jit",
    "mla",
    "next_positive_power_of_2",
    "prefill",
    "rope",
    "utils",
]
