"""The statistical oracle: `pytest -m distribution` (see docs/oracle.md)."""
