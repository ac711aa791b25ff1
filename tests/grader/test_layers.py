"""The grader's layers (specdec/grading/__init__.py maps them), read from its import statements
with `ast`: what each layer may import, the one file that imports the rest of the project, and
one folder per exercise of the registry."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from specdec.grading.engine.closure import imported_modules, package_of
from specdec.grading.exercises import EXERCISES, load

ROOT = Path(__file__).resolve().parents[2]
GRADING = ROOT / "specdec" / "grading"
PROJECT = GRADING / "project.py"  # the one door to reference/ and the rest of specdec/
FOLDERS = sorted(p.name for p in (GRADING / "exercises").iterdir() if (p / "__init__.py").is_file())

# the imports left inside functions, each for a reason (the rest are at the top of a module)
LATE_IMPORTS = {
    # both modules also run as `python -m ...`, after the package's __init__.py has imported
    # cli.py: imported there at the top, each would run twice (runpy warns of it)
    ("delivery/cli.py", "specdec.grading.delivery.classroom"),
    ("delivery/cli.py", "specdec.grading.delivery.gradescope"),
}


def files(under: str = "") -> list[Path]:
    return sorted((GRADING / under).rglob("*.py"))


def imports(path: Path) -> set[str]:
    """Every module an import statement of the file names, at any depth, absolute; `from x
    import y` names x and x.y (a submodule or not)."""
    return {name for name, _ in imported_modules(path, package_of(path, ROOT))}


def name(path: Path) -> str:
    return path.relative_to(GRADING).as_posix()


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_only_project_py_imports_the_rest_of_the_project():
    outside = {}
    for path in files():
        found = sorted(
            m
            for m in imports(path)
            if inside(m, "reference")
            or inside(m, "gpu")
            or (inside(m, "specdec") and not inside(m, "specdec.grading"))
        )
        if found and path != PROJECT:
            outside[name(path)] = found
    assert not outside, f"import these through specdec/grading/project.py instead: {outside}"
    assert not any(inside(m, "specdec.grading") for m in imports(PROJECT))


def test_the_engine_knows_no_exercise_no_delivery_and_no_project_code():
    # the registry (exercises/__init__.py) is the engine's only way to an exercise: by names
    # in strings. project.py stays out too, so that the cache's zip ships no model code
    forbidden = [
        "specdec.grading.delivery",
        "specdec.grading.project",
        *(f"specdec.grading.exercises.{folder}" for folder in FOLDERS),
    ]
    for path in files("engine"):
        found = [m for m in imports(path) if any(inside(m, f) for f in forbidden)]
        found += [m for m in imports(path) if m == "specdec.grading"]  # its re-exports: delivery
        assert not found, f"{name(path)} imports {sorted(found)}"


def test_an_exercises_folder_imports_no_delivery():
    for path in files("exercises"):
        found = [
            m
            for m in imports(path)
            if inside(m, "specdec.grading.delivery") or m == "specdec.grading"
        ]
        assert not found, f"{name(path)} imports {sorted(found)}"


def test_the_registry_imports_the_standard_library_only():
    # the config and the command line read it without loading a grader
    for module in imports(GRADING / "exercises" / "__init__.py"):
        assert module.partition(".")[0] in sys.stdlib_module_names, module


def test_the_workers_files_import_each_other_numpy_and_the_standard_library_only():
    # sandbox.py copies these three, alone, into the worker's scratch folder
    worker = GRADING / "engine" / "worker"
    assert {p.name for p in worker.glob("*.py")} == {
        "__init__.py",
        "worker.py",
        "wire.py",
        "confinement.py",
    }
    for path in worker.glob("*.py"):
        for module in imports(path):
            top = module.partition(".")[0]
            ok = top in sys.stdlib_module_names or top == "numpy"
            assert ok or inside(module, "specdec.grading.engine.worker"), (path.name, module)


def test_project_modules_are_imported_at_the_top_of_a_module():
    late = set()
    for path in files():
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    late |= {(name(path), a.name) for a in node.names}
                elif isinstance(node, ast.ImportFrom) and (node.level or node.module):
                    late.add((name(path), node.module or "."))
    ours = {(f, m) for f, m in late if m.partition(".")[0] in ("reference", "gpu", "specdec", ".")}
    assert ours == LATE_IMPORTS


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.kind)
def test_each_exercise_of_the_registry_has_its_folder(exercise):
    folder = GRADING / "exercises" / exercise.kind
    assert (folder / "__init__.py").is_file()
    for target in filter(None, (exercise.checks, exercise.revise)):
        module = target.partition(":")[0]
        assert inside(module, f"specdec.grading.exercises.{exercise.kind}"), target
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), target
        assert callable(load(target))


def test_every_folder_of_exercises_is_an_exercise_of_the_registry():
    assert FOLDERS == sorted(e.kind for e in EXERCISES)
    loose = {p.name for p in (GRADING / "exercises").glob("*.py")}
    assert loose == {"__init__.py"}, "an exercise's files go in its folder"
