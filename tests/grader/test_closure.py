"""The Gradescope zip's file list and requirements.txt, computed from what grading imports
(specdec/grading/engine/closure.py, specdec/grading/delivery/gradescope.py); the zips themselves are
run in a clean venv by test_gradescope_zips*.py."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest

from specdec.grading.delivery.gradescope import graded_kinds, requirements, source_files
from specdec.grading.engine.closure import distributions, import_closure
from specdec.grading.engine.config import GradingConfig
from specdec.grading.exercises import KINDS

REPO = Path(__file__).resolve().parents[2]


def files_of(kind: str) -> set[str]:
    return {p.as_posix() for p in source_files(replace(GradingConfig(), kind=kind))}


def test_the_speedup_zip_holds_what_its_checks_import_inside_a_function():
    # speedup_checks imports specdec.costs inside a function: the hand-written list missed it,
    # and every submission scored 0 with "No module named ..."
    files = files_of("speedup")
    checks = "specdec/grading/exercises/speedup/checks.py"
    assert {"specdec/costs.py", checks, "reference/model.py"} <= files
    assert {"specdec/__init__.py", "reference/__init__.py"} <= files  # packages run first
    assert "specdec/grading/grading.toml" in files


def test_each_zip_holds_its_exercise_only_and_what_exists():
    cache = files_of("cache")
    assert "specdec/grading/exercises/cache/checks.py" in cache
    assert not any(f.startswith("reference/") or "verify" in f for f in cache)
    assert requirements(replace(GradingConfig(), kind="cache")).split() == [
        f"numpy=={metadata.version('numpy')}",
        f"scipy=={metadata.version('scipy')}",
        f"threadpoolctl=={metadata.version('threadpoolctl')}",
    ]
    for kind in KINDS:
        files = files_of(kind)
        assert all((REPO / f).is_file() for f in files)
        assert not any(f.startswith(("tests/", "notebooks/")) for f in files)
        assert not any(f.startswith("specdec/cli/") for f in files)  # nor is the CLI


def test_a_config_that_names_no_exercise_ships_every_exercises_checks():
    # kind auto and a function no exercise defines: the kind is read from the signature at
    # grading time, so any exercise's checks may run
    assert graded_kinds(replace(GradingConfig(), function="my_own_verify")) == KINDS
    assert graded_kinds(GradingConfig()) == ("verify",)  # function = "verify"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def test_imports_inside_functions_and_relative_ones_are_followed(tmp_path):
    write(
        tmp_path,
        {
            "specdec/__init__.py": "",
            "specdec/grading/__init__.py": "from specdec.grading.core import run\n",
            "specdec/grading/core.py": "def run():\n    from . import late\n",
            "specdec/grading/checks.py": """
                import json

                def check():
                    import numpy as np
                    from specdec.costs import predicted_speedup

                    class Inner:
                        def method(self):
                            import reference.model
            """,
            "specdec/grading/late.py": "",
            "specdec/costs.py": "from reference.model import GPT, init_params\n",
            "specdec/unused.py": "import torch\n",
            "reference/__init__.py": "",
            "reference/model.py": "def GPT():\n    import scipy.stats\n",
            "course/my_exercise.py": "from specdec.grading import checks\n",
        },
    )
    closure = import_closure(
        [tmp_path / "specdec/grading/checks.py"], tmp_path, (tmp_path / "course/my_exercise.py",)
    )
    assert [p.as_posix() for p in closure.files] == [
        "reference/__init__.py",
        "reference/model.py",
        "specdec/__init__.py",
        "specdec/costs.py",
        "specdec/grading/__init__.py",
        "specdec/grading/checks.py",
        "specdec/grading/core.py",
        "specdec/grading/late.py",
    ]  # not specdec/unused.py, nor the handed-in file, which only lends its imports
    assert closure.third_party == ("numpy", "scipy")  # json is the standard library's


def test_an_import_of_a_module_that_does_not_exist_is_refused(tmp_path):
    write(tmp_path, {"specdec/__init__.py": "", "specdec/a.py": "def f():\n    import specdec.b\n"})
    with pytest.raises(ValueError, match=r"a.py: imports specdec.b, which is no module under"):
        import_closure([tmp_path / "specdec/a.py"], tmp_path)


def test_requirements_are_pinned_and_an_uninstalled_module_is_named():
    assert distributions(("numpy",)) == {"numpy": f"numpy=={metadata.version('numpy')}"}
    with pytest.raises(ValueError, match="'no_such_module_here', which no installed package"):
        distributions(("no_such_module_here",))
