"""``flashinfer.tllm_enums``: enums that upstream test utilities import."""

import enum

__all__ = ["SfLayout"]


class SfLayout(enum.Enum):
    """Layouts of block scale factors (FP4/MXFP8 APIs; listed for import compatibility)."""

    layout_128x4 = 0
    layout_8x4 = 1
    layout_linear = 2
