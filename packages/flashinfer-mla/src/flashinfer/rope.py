"""RoPE + FP8 quantize (filled in by the MLA work)."""
