"""Every exercise's skeleton asks for reasoning: it must not hold its answer's defining
expressions.

For each exercise of the registry, tests/notebooks/skeleton_answers/<kind>.txt lists the
expressions that define its worked solution (one per line; `#` starts a comment). Each must
occur in the solution (so the list names what the answer really is, and a renamed solution
cannot leave the check empty) and must not occur in the skeleton, docstring included, nor in
the exercises' README (English and Chinese), which describes every exercise. Both
texts are compared with every blank removed, so `context[t + 1]` and `context[t+1]` are one
expression; a line `re: PATTERN` is a regular expression, matched against the same blank-free
text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specdec.grading.exercises import EXERCISES

ROOT = Path(__file__).resolve().parents[2]
ANSWERS = Path(__file__).resolve().parent / "skeleton_answers"


def blank_free(text: str) -> str:
    return re.sub(r"\s+", "", text)


def expressions(kind: str) -> list[str]:
    # -> the lines of skeleton_answers/<kind>.txt, comments and blank lines dropped
    path = ANSWERS / f"{kind}.txt"
    assert path.is_file(), f"exercise {kind!r} has no list of its answer's expressions: {path}"
    lines = [line.split(" #")[0].strip() for line in path.read_text().splitlines()]
    found = [line for line in lines if line and not line.startswith("#")]
    assert found, f"{path} lists no expression"
    return found


def occurs(expression: str, text: str) -> bool:
    if expression.startswith("re:"):
        return re.search(expression[3:].strip(), text) is not None
    return blank_free(expression) in text


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.kind)
def test_the_solution_holds_its_defining_expressions(exercise):
    solution = blank_free((ROOT / exercise.solution_path).read_text())
    missing = [e for e in expressions(exercise.kind) if not occurs(e, solution)]
    assert not missing, f"{exercise.solution_path} no longer holds {missing}: update the list"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.kind)
def test_the_skeleton_does_not_hold_the_answer(exercise):
    skeleton = blank_free((ROOT / exercise.skeleton_path).read_text())
    given = [e for e in expressions(exercise.kind) if occurs(e, skeleton)]
    assert not given, f"{exercise.skeleton_path} gives the answer away: {given}"


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_the_exercises_readme_does_not_hold_the_answers(readme):
    # the list of exercises beside the skeletons describes each one: no answer there either
    text = blank_free((ROOT / "notebooks" / "exercises" / readme).read_text())
    given = {
        e.kind: found
        for e in EXERCISES
        if (found := [x for x in expressions(e.kind) if occurs(x, text)])
    }
    assert not given, f"notebooks/exercises/{readme} gives answers away: {given}"


def test_the_check_catches_a_skeleton_that_copies_its_solution(tmp_path):
    # the check itself can fail: a skeleton that quotes its solution's line is caught
    eagle = next(e for e in EXERCISES if e.kind == "eagle_align")
    quoted = blank_free((ROOT / eagle.solution_path).read_text())
    assert any(occurs(e, quoted) for e in expressions(eagle.kind))
