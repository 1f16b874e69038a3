"""FlashInfer GEMM APIs (filled in by the GEMM work)."""
