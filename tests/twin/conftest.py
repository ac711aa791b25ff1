"""Fixtures for the twin's tests; they run on CuPy where a device exists, else on NumPy."""

from __future__ import annotations

import pytest

from gpu.device.backend import backend_name


def pytest_report_header(config) -> list[str]:
    return [f"gpu twin backend: {backend_name()}"]


@pytest.fixture(scope="session")
def pair():
    """The bundled trained pair (reference models; the twin copies them to the device)."""
    from specdec.bundled import load_bundled_pair

    return load_bundled_pair()
