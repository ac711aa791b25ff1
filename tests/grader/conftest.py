"""The venvs that run the Gradescope zips (tests/grader/zips.py), made once a session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .zips import make_venv


@pytest.fixture(scope="session")
def zip_python(tmp_path_factory) -> Callable[[str], Path]:
    """requirements.txt's text -> the python of a fresh venv holding exactly that.

    One venv per distinct requirements.txt, shared by every zip that asks for the same (most
    zips need numpy, scipy and threadpoolctl; cache, sampling and speedup no scipy). Left in
    pytest's temp tree, which keeps only the last three sessions' (removing them here took
    longer than making them)."""
    venvs: dict[str, Path] = {}

    def python(requirements: str) -> Path:
        if requirements not in venvs:
            folder = tmp_path_factory.mktemp("zip-venv")
            venvs[requirements] = make_venv(folder, requirements)
        return venvs[requirements]

    return python
