"""``flashinfer.decode``: the MLA decode (same object as in ``flashinfer.mla``) and its metadata.

``get_batch_decode_metadata_mla`` and ``DecodeMetadata`` are extensions (no upstream
counterpart): the reusable schedule a MUSA caller prepares once per step and passes as
``metadata=``.
"""

from .mla._decode import trtllm_batch_decode_with_kv_cache_mla
from .mla._metadata import DecodeMetadata, get_batch_decode_metadata_mla

__all__ = ["DecodeMetadata", "get_batch_decode_metadata_mla", "trtllm_batch_decode_with_kv_cache_mla"]
