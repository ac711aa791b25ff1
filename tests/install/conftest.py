"""One wheel of this checkout, installed once per test run into a fresh venv outside the
repository, with the extras the README tells a student to install (`notebook`: the course
notebooks' `lab` extra and JupyterLab).

pytest-xdist's workers share it: the first to arrive builds it under a lock, in the run's
shared temporary folder, and the others wait and reuse it. Every command of the installed
package runs with PYTHONPATH cleared and outside the checkout (`run`), so nothing can come
from here.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = "notebook"  # README's Installing section: the lab extra, and JupyterLab with it
KERNEL = "specdec-wheel"  # the venv's own Jupyter kernel, so a notebook runs in that venv
# uv (the dev extra) builds the wheel in an isolated environment as pip would, and fills the
# venv from its cache: seconds, where pip, whose downloads this machine does not cache, took
# 95 s for the same venv
UV = [sys.executable, "-m", "uv"]


def run(command: list, cwd: Path, timeout: float = 600, **env: str):
    """One command of the installed package; a failure shows everything it printed."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )
    return done


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    course: Path  # `specdec course DIR --solutions`, unpacked by the installed command
    kernels: Path  # a JUPYTER_PATH whose python3-like kernel is the venv's

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name


def shared_folder(tmp_path_factory) -> Path:
    # xdist's workers each get basetemp/popen-gwN; their parent belongs to this run alone
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_installed(folder: Path) -> Installed:
    out = folder / "wheel"
    out.mkdir()
    run(UV + ["build", "--quiet", "--wheel", "--out-dir", out, ROOT], cwd=out)
    (wheel,) = out.glob("specdec_lab-*.whl")
    venv = folder / "venv"
    run(UV + ["venv", "--quiet", "--python", sys.executable, venv], cwd=folder)
    run(UV + ["pip", "install", "--quiet", "--python", venv / "bin/python", f"{wheel}[{EXTRAS}]"],
        cwd=folder)
    kernels = folder / "jupyter"
    spec = kernels / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(venv / "bin/python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "specdec-lab wheel",
        "language": "python",
    }))
    home = folder / "home"
    home.mkdir()
    run([venv / "bin/specdec", "course", "course", "--solutions"], cwd=home)
    return Installed(wheel, venv, home / "course", kernels)


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Installed:
    folder = shared_folder(tmp_path_factory) / "installed-wheel"
    folder.mkdir(exist_ok=True)
    with open(folder.parent / "installed-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder; the others wait here
        done = folder / "done.json"
        if not done.is_file():
            built = build_installed(folder)
            done.write_text(json.dumps({k: str(v) for k, v in built.__dict__.items()}))
        fields = json.loads(done.read_text())
    return Installed(**{k: Path(v) for k, v in fields.items()})


@pytest.fixture
def empty(tmp_path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder
