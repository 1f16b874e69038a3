"""Decode APIs (filled in by the MLA work)."""
