"""``flashinfer.mla``: MLA decode (``trtllm_batch_decode_with_kv_cache_mla``) and MLA dimensions.

The decode is defined in :mod:`flashinfer.mla._decode` (upstream: ``flashinfer.mla._core``, a
name that here would collide with the shared runtime ``flashinfer._core``); ``flashinfer.decode``
re-exports the same object.
"""

from ._decode import trtllm_batch_decode_with_kv_cache_mla
from ._dimensions import (
    MLAHeadDimensions,
    MLALayerDimensions,
    deepseek_mla_dimensions,
    nope_mla_dimensions,
    smaller_mla_dimensions,
    supported_mla_layer_dimensions,
)

__all__ = [
    "MLAHeadDimensions",
    "MLALayerDimensions",
    "deepseek_mla_dimensions",
    "nope_mla_dimensions",
    "smaller_mla_dimensions",
    "supported_mla_layer_dimensions",
    "trtllm_batch_decode_with_kv_cache_mla",
]
