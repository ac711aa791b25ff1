"""Fixtures for the twin's tests; they run on CuPy where a device exists, else on NumPy."""

from __future__ import annotations

import pytest

from gpu.device import kernels
from gpu.device.backend import ON_DEVICE, backend_name
from gpu.device.kernels import KernelMode, Plan
from tests.twin.cuda_emulator import Emulator


def pytest_report_header(config) -> list[str]:
    return [f"gpu twin backend: {backend_name()}"]


@pytest.fixture(scope="session")
def pair():
    """The bundled trained pair (reference models; the twin copies them to the device)."""
    from specdec.bundled import load_bundled_pair

    return load_bundled_pair()


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """The CUDA emulator (tests/twin/cuda_emulator.py), kernels.cu compiled once per module."""
    if ON_DEVICE:  # xp makes device arrays, which a host emulator cannot read
        pytest.skip("on a device the kernels run for real: the preflight and tests/twin check them")
    return Emulator(tmp_path_factory.mktemp("kernels"))


@pytest.fixture
def kernels_in_the_emulator(emulator, monkeypatch):
    """Every fused call of the twin goes to the emulator, as it would go to the device."""

    class Module:
        def get_function(self, name):
            return lambda grid, block, args: emulator.launch(Plan(name, grid, block, args, None))

    monkeypatch.setattr(kernels, "mode", KernelMode(on=True, why_off=""))
    monkeypatch.setattr(kernels, "compiled_module", lambda: Module())
