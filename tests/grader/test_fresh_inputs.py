"""Scores come only from checks whose inputs the student cannot see in advance (issue 45).

The shown examples' inputs are fixed, and a failing run prints them with the expected outcome,
so a verify can answer them from a table. Every scored family therefore also holds checks on
inputs drawn fresh for each grading from a secret (engine/secret.py), and no family credits a
rule-less answer: a verify that never keeps a draft fails the law family at its gate
(verify/keeps-drafts), a tree walk that never keeps a child fails tree-law at its gate, and
the randomness and in-loop families run only once the law family passed.

Each test here failed on the code before, but the two that hold the table's and the worker's
premises: the table scored 10/10, random garbage 1/10 (randomness), a never-keeping tree walk
8/10 (tree-law); a never-keeping verify scored 0 but was told "every call decides alike", an
always-keeping one that its ratio was upside down; and every grading drew the same inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdec.grading import grade
from specdec.grading.engine.config import GradingConfig
from specdec.grading.engine.core import Family, run_families
from specdec.grading.engine.report import gradescope_results
from specdec.grading.engine.secret import SECRET_ENV, grading_secret, secret_held
from specdec.grading.engine.submission import Submission
from specdec.grading.engine.worker_setup import worker_environment
from specdec.grading.exercises.tree.checks import revise_tree_hints
from specdec.grading.exercises.tree.fresh import fresh_rule_checks, keeps_children_check
from specdec.grading.exercises.verify.checks import revise_verify_hints, verify_families
from specdec.grading.exercises.verify.fresh import fresh_checks, keeps_drafts_check

HOSTILE = Path(__file__).resolve().parent / "hostile"


def score(result) -> float:
    return gradescope_results(result, GradingConfig())["score"]


def graded_verify(function):
    submission = Submission(function.__name__, function, "verify", "test", None)
    return run_families(submission, verify_families(), revise_verify_hints)


def failure(result, family: str):
    return next(r for r in result.results if r.family == family and r.status == "fail")


def pick(weights, rng) -> int:
    return int(rng.choice(len(weights), p=weights / weights.sum()))


def never_keeps(p_target, q_draft, draft_tokens, rng):
    # exact (the token follows p_target[0]), but never keeps a draft
    return 0, pick(p_target[0], rng)


def always_keeps(p_target, q_draft, draft_tokens, rng):
    k = len(draft_tokens)
    return k, pick(p_target[k], rng)


def garbage(p_target, q_draft, draft_tokens, rng):
    # random, from rng (so two runs with one seed agree), and wrong
    return int(rng.integers(len(draft_tokens) + 1)), int(rng.integers(p_target.shape[1]))


def test_a_table_of_the_shown_examples_scores_0():
    # through the worker, as a student's file is graded
    result = grade(f"{HOSTILE / 'table_rule.py'}:verify")
    assert score(result) == 0
    assert failure(result, "law").check.name == "verify/keeps-drafts"
    rule = failure(result, "rule")
    assert rule.check.name == "verify/fresh-accepted"
    assert "never keeps a draft" in rule.outcome.hint
    assert "drawn for this grading only" in rule.outcome.story[0]
    assert result.family_status("randomness") == result.family_status("in-loop") == "not run"


def test_the_table_passes_every_shown_example_of_the_rule():
    # what made it score 10/10 before: the rule family's shown examples, alone, pass
    from .hostile.table_rule import verify

    shown = [c for c in verify_families()[1].checks if "fresh" not in c.name]
    assert len(shown) == 4
    submission = Submission("table", verify, "verify", "test", None)
    assert run_families(submission, [Family("shown", "", shown)]).passed


def test_a_verify_that_never_keeps_a_draft_scores_0():
    # (it scored 0 before too, but was told "every call decides alike": its uniform is fine)
    result = graded_verify(never_keeps)
    assert score(result) == 0
    law = failure(result, "law")
    assert law.check.name == "verify/greedy-match"  # p = q = 1 there: keeping is certain
    assert "never keeps a draft, even where p = q makes keeping free" in law.outcome.hint
    assert "never keeps a draft, not even B" in failure(result, "rule").outcome.hint
    assert result.family_status("randomness") == "not run"
    assert "rule" not in result.verdicts  # not told "exact, but not the contract's rule"


def test_a_verify_that_always_keeps_scores_0_and_is_told_so():
    result = graded_verify(always_keeps)
    assert score(result) == 0
    for family in ("law", "rule"):
        assert "keeps every draft" in failure(result, family).outcome.hint, family


def test_random_garbage_scores_0():
    result = graded_verify(garbage)
    assert score(result) == 0
    assert result.family_status("randomness") == "not run"  # it is random, but not credited


def test_a_tree_walk_that_never_keeps_a_child_scores_0():
    result = grade(f"{HOSTILE / 'never_keeps_tree.py'}:verify_tree")
    assert score(result) == 0
    law = failure(result, "tree-law")
    assert law.check.name == "tree/keeps-children"
    assert "never keeps a child" in law.outcome.hint
    assert result.family_status("tree-rule") == "fail"


def test_a_tree_walk_that_never_keeps_fails_the_fresh_trees_with_its_hint():
    def never_keeps_tree(p_rows, tree, rng):
        return (), pick(np.asarray(p_rows[0]), rng)

    submission = Submission("never", never_keeps_tree, "tree", "test", None)
    family = Family("fresh", "", fresh_rule_checks())
    result = run_families(submission, [family], revise_tree_hints)
    failed = failure(result, "fresh")
    assert failed.check.name == "tree-rule/fresh-paths"
    assert "never keeps a child" in failed.outcome.hint


# --------------------------------------------------------------------------------------------
# Each grading draws its own inputs
# --------------------------------------------------------------------------------------------


def inputs_seen(checks, kind: str, secret: str, monkeypatch) -> list[bytes]:
    """Every input a correct submission is handed by `checks`, graded with SECRET_ENV =
    secret (as `SPECDEC_GRADING_SECRET=... specdec grade` would)."""
    from reference.tree.rule import verify_tree
    from reference.verification import verify

    monkeypatch.setenv(SECRET_ENV, secret)
    seen: list[bytes] = []

    def recording(*args):
        if kind == "verify":
            P, Q, drafts, rng = args
            seen.append(P.tobytes() + Q.tobytes() + np.asarray(drafts).tobytes())
            return verify(P, Q, drafts, rng)
        P, tree, rng = args
        seen.append(P.tobytes() + tree.tokens.tobytes() + tree.q.tobytes())
        return verify_tree(P, tree, rng)

    submission = Submission("recording", recording, kind, "test", None)
    result = run_families(submission, [Family("fresh", "", checks())])
    assert result.passed
    return seen


@pytest.mark.parametrize(
    "kind, checks",
    [
        ("verify", lambda: [keeps_drafts_check(), *fresh_checks()]),
        ("tree", lambda: [keeps_children_check(), *fresh_rule_checks()]),
    ],
    ids=["verify", "tree"],
)
def test_two_gradings_draw_different_inputs_and_one_secret_the_same(kind, checks, monkeypatch):
    first = inputs_seen(checks, kind, "11", monkeypatch)
    again = inputs_seen(checks, kind, "11", monkeypatch)
    other = inputs_seen(checks, kind, "0x2a", monkeypatch)
    assert first == again  # a regrading with the secret pinned: the same inputs, in order
    assert not set(first) & set(other)  # another secret: not one call's input in common


def test_grade_draws_a_new_secret_each_time_unless_pinned(monkeypatch):
    monkeypatch.delenv(SECRET_ENV, raising=False)
    with secret_held() as one, secret_held() as two:
        assert one != two and grading_secret() == two
    monkeypatch.setenv(SECRET_ENV, "12345")
    with secret_held() as pinned:
        assert pinned == 12345 == grading_secret()
    monkeypatch.setenv(SECRET_ENV, "twelve")
    with pytest.raises(ValueError, match=SECRET_ENV), secret_held():
        pass


def test_the_worker_is_never_handed_the_secret(tmp_path, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, "12345")
    assert SECRET_ENV not in worker_environment(tmp_path, 1)
