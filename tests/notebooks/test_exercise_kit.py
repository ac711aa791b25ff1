"""The course kit as a whole: one exercise per idea (specdec/grading/exercises/), each with a
skeleton that states its contract and names its grade command, a solution, a link from the
notebook that teaches the idea, and instructions in both languages.

Each exercise's grading (its solution passes, its broken variants fail with their hints) is
tested in tests/grader/test_exercise_*.py and test_grade.py; this file checks the kit holds
together, in a second or two.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specdec.grading.engine.config import DEFAULT_WEIGHTS, FAMILIES
from specdec.grading.exercises import EXERCISE_DIR, EXERCISES, listing

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / EXERCISE_DIR
IDS = [e.kind for e in EXERCISES]


def defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_the_folder_holds_one_skeleton_per_exercise_and_nothing_else():
    skeletons = {p.name for p in KIT.glob("*.py")}
    assert skeletons == {e.skeleton for e in EXERCISES}
    solutions = {p.name for p in (KIT / "solutions").glob("*.py")}
    assert solutions == {e.solution for e in EXERCISES}


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_the_skeleton_states_its_contract_and_its_grade_command(exercise):
    skeleton = REPO / exercise.skeleton_path
    assert exercise.function in defined_names(skeleton)
    text = skeleton.read_text()
    # the docstring tells how to grade, and the body's NotImplementedError repeats it
    assert f"specdec grade {exercise.spec()}" in text
    assert "NotImplementedError" in text
    assert exercise.function in defined_names(REPO / exercise.solution_path)


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_the_notebook_that_teaches_the_idea_links_to_the_exercise(exercise):
    source = REPO / "notebooks" / f"{exercise.notebook}.py"
    assert source.is_file(), f"no notebook {exercise.notebook}"
    assert f"exercises/{exercise.skeleton}" in source.read_text()


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_the_instructions_exist_in_both_languages(readme):
    text = (KIT / readme).read_text()
    for exercise in EXERCISES:
        assert exercise.spec() in text, f"{readme} lacks the {exercise.kind} exercise"


def test_every_family_has_a_weight_and_the_listing_names_every_skeleton():
    assert {f for names in FAMILIES.values() for f in names} <= set(DEFAULT_WEIGHTS)
    shown = listing()
    assert all(e.spec() in shown for e in EXERCISES)
