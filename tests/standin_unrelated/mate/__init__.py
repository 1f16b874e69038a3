"""Stands for the unrelated PyPI project named ``mate`` ("Matchers for unittest")."""

__version__ = "0.2.0"
