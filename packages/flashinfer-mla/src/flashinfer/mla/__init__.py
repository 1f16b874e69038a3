"""MLA decode (filled in by the MLA work)."""
