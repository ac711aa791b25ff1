"""Each exercise's Gradescope zip, run as Gradescope runs it: outside the repository, by a
Python that holds the zip's requirements.txt and nothing else (no project, no checkout on the
path), so that a file the zip forgot fails here, not on a student's submission.

Shared by tests/grader/test_gradescope_zips*.py (two files, so that `make test`'s two workers
share the load: xdist's loadfile keeps a file on one worker) and the session's venvs in
tests/grader/conftest.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from specdec.grading.delivery.gradescope import build
from specdec.grading.exercises import exercise

REPO = Path(__file__).resolve().parents[2]


def make_venv(folder: Path, requirements: str) -> Path:
    """A fresh venv in `folder` holding `requirements` only; its python.

    Made with uv (the dev extra), as tests/install makes its venv: under a second from uv's
    cache, where `python -m venv` and pip took ~9 s each (ensurepip, then pip's install). Like
    pip's --no-compile, uv compiles nothing: Python compiles what the grader imports, once."""
    uv = [sys.executable, "-m", "uv"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requirements.txt").write_text(requirements)
    venv, python = folder / "venv", folder / "venv" / "bin" / "python"
    for command in (
        [*uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        [*uv, "pip", "install", "--quiet", "--python", str(python), "-r", "requirements.txt"],
    ):
        done = subprocess.run(command, cwd=folder, env=clean_env(), capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}{done.stderr}"
    # the point of it: this Python cannot see the project
    probe = [str(python), "-c", "import importlib.util as u; print(u.find_spec('specdec'))"]
    seen = subprocess.run(probe, cwd=folder, env=clean_env(), capture_output=True, text=True)
    assert seen.stdout.strip() == "None", seen.stdout + seen.stderr
    return python


def clean_env() -> dict[str, str]:
    """This process's environment without what would put the checkout on a child's path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def build_zip(folder: Path, kind: str, toml: str = "") -> Path:
    """`gradescope build --exercise KIND [--config]` into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    config = None
    if toml:
        config = folder / "grading.toml"
        config.write_text(toml)
    return build(folder / f"{kind}.zip", config, kind)


def requirements_of(zip_path: Path) -> str:
    with zipfile.ZipFile(zip_path) as archive:
        return archive.read("requirements.txt").decode()


def autograde(
    zip_path: Path,
    python: Path,
    root: Path,
    files: dict[str, str | Path],
    env: dict[str, str] | None = None,
    preexec_fn=None,
) -> dict:
    """Unzip into ROOT/source, hand `files` in as ROOT/submission, run run_autograder with
    `python`, from ROOT (outside the repository); results.json, with its run's seconds.

    A file given as a Path is handed in as a symbolic link to it (a hostile upload); `env` is
    added to the run's environment (a TMPDIR of the test's), `preexec_fn` runs before it starts
    (capabilities.without_sys_admin: a container without CAP_SYS_ADMIN)."""
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    for name, content in files.items():
        if isinstance(content, Path):
            (root / "submission" / name).symlink_to(content)
        else:
            (root / "submission" / name).write_text(content)
    env = (
        clean_env() | {"AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": str(python)} | (env or {})
    )
    done = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")],
        cwd=root,
        env=env,
        preexec_fn=preexec_fn,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((root / "results" / "results.json").read_text())


def solution_and_skeleton(kind: str) -> tuple[dict[str, str], dict[str, str]]:
    """The worked solution and the untouched skeleton, each as the file students hand in."""
    chosen = exercise(kind)
    solution = (REPO / chosen.solution_path).read_text()
    skeleton = (REPO / chosen.skeleton_path).read_text()
    return {chosen.skeleton: solution}, {chosen.skeleton: skeleton}


def check_full_marks_and_zero(kind: str, zip_path: Path, python: Path, tmp: Path) -> None:
    """The solution scores full marks; the untouched skeleton 0, saying why."""
    solution, skeleton = solution_and_skeleton(kind)
    results = autograde(zip_path, python, tmp / "solution", solution)
    full = sum(t["max_score"] for t in results["tests"])
    assert full > 0 and results["score"] == full, results["output"]
    assert all(t["status"] == "passed" for t in results["tests"]), results["output"]
    assert results["extra_data"]["grader"].startswith(str(tmp / "solution" / "source"))
    results = autograde(zip_path, python, tmp / "skeleton", skeleton)
    assert results["score"] == 0
    assert "NotImplementedError" in json.dumps(results), results  # the skeleton's own message
