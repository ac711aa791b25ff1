"""Unit, property and bad-input tests of the NumPy reference (not statistical)."""
