"""FlashInfer's MLA dimension records (``flashinfer.mla.MLAHeadDimensions`` and friends)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MLAHeadDimensions:
    """Per-head MLA dimensions."""

    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    kv_lora_rank: int


@dataclass(frozen=True)
class MLALayerDimensions:
    """An MLA layer: its head dimensions and number of query heads."""

    head_dimensions: MLAHeadDimensions
    num_heads: int


deepseek_mla_dimensions = MLAHeadDimensions(128, 64, 128, 512)
smaller_mla_dimensions = MLAHeadDimensions(64, 64, 128, 256)
nope_mla_dimensions = MLAHeadDimensions(256, 0, 256, 512)

# DeepSeek-R1 (128 heads), GLM-5 (64 heads), and the smaller test configuration (32 heads).
supported_mla_layer_dimensions = [
    MLALayerDimensions(deepseek_mla_dimensions, 128),
    MLALayerDimensions(deepseek_mla_dimensions, 64),
    MLALayerDimensions(smaller_mla_dimensions, 32),
]
