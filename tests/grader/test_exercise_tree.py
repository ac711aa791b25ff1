"""The tree exercise's grader (specdec/grading/exercises/tree/checks.py): the worked solution and
the project's own verify_tree pass, the skeleton fails naming NotImplementedError, each broken
variant is rejected with the hint that names its mistake (matched by a few words), and an exact rule
that keeps fewer candidates is rejected by the rule family only, as exact.

The grader's own expectations are tested too: its enumerated law of the contract's walk is
the target's law on every sampled case (so a correct submission cannot be failed by a wrong
expectation), and each catalogued mistake moves that law far enough for the sample sizes."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from specdec.grading.engine.report import text_report
from specdec.grading.engine.secret import SECRET_ENV
from specdec.grading.exercises import exercise
from specdec.grading.exercises.tree.cases import TREE_CASES, rule_laws, target_law
from specdec.grading.exercises.tree.checks import exact_cases, revise_tree_hints, tree_families
from specdec.grading.exercises.tree.walk import CONTRACT, MISTAKES, rule_law

from . import broken_exercises_drafting as broken
from .exercise_tests import graded_from_the_repo, grader_for, not_passed, the_skeleton_fails

SOLUTION = "notebooks/exercises/solutions/tree_solution.py:verify_tree"
SKELETON = "notebooks/exercises/my_tree.py:verify_tree"


@pytest.fixture(autouse=True)
def pinned_secret(monkeypatch):
    # every grading here draws the same fresh inputs (engine/secret.py), so that the verdicts
    # and hints held below are reproducible; set SPECDEC_GRADING_SECRET to run them on others
    # (tests/grader/test_fresh_inputs.py varies it)
    monkeypatch.setenv(SECRET_ENV, os.environ.get(SECRET_ENV) or "45")


graded = grader_for("tree", tree_families, revise_tree_hints)


def test_the_solution_passes():
    start = time.perf_counter()
    result = graded_from_the_repo(SOLUTION)
    assert result.passed, not_passed(result)
    assert result.submission.kind == "tree"
    assert tuple(dict.fromkeys(r.family for r in result.results)) == exercise("tree").families
    sampled = [r for r in result.results if r.check.sampled]
    assert sampled and all(r.outcome.p_value >= r.threshold for r in sampled)
    assert time.perf_counter() - start < 30  # ~3 s measured; generous for a loaded machine


def test_the_projects_own_verify_tree_passes():
    # reference.tree.rule.verify_tree returns TreeVerification(path, token): accepted as is
    from reference.tree.rule import verify_tree

    result = graded(verify_tree)
    assert result.passed, not_passed(result)
    assert result.verdicts["tree-rule"].startswith("the contract's rule")


def test_the_skeleton_fails_naming_not_implemented():
    result = the_skeleton_fails("tree")
    assert SKELETON in str(result.crash.error)
    assert result.crash.call.startswith("verify_tree(p_rows [5, 5] float64, tree with parents")
    assert result.seconds < 5


@pytest.mark.parametrize("case", TREE_CASES, ids=lambda c: c.name)
def test_the_contracts_enumerated_law_is_the_targets(case):
    # every tree the drafter can build, each walked by the grader's statement of the rule,
    # completed by the target: the target's own law (to rounding), and a mistake moves it
    expected = target_law(case)
    law, _ = rule_laws(case, CONTRACT)
    assert max(abs(law.get(o, 0.0) - w) for o, w in expected.items()) < 1e-12
    assert set(law) <= set(expected)


def test_the_exact_cases_are_possible_under_the_contract():
    for case in exact_cases().values():
        for path, token in rule_law(case.P, case.tree):
            tokens = tuple(int(case.tree.tokens[i]) for i in path) + (token,)
            if case.greedy:
                assert tokens == case.greedy[: len(tokens)]
            rows = [0, *path]
            assert all(case.P[r][t] > 0 for r, t in zip(rows, tokens, strict=True))


def test_each_mistake_moves_some_sampled_law_by_far_more_than_the_noise():
    # noncentrality per run, sum (law - target)^2 / target; with n runs at the quick look
    # (a fifth) a chi-square with ~60 cells at the family's threshold needs ~100 in all
    for rule, hint in MISTAKES:
        if rule.last != "current" or not rule.reread:
            continue  # the exact cases catch these with certainty
        best = 0.0
        for case in TREE_CASES:
            law, _ = rule_laws(case, rule)
            expected = target_law(case)
            shift = sum((law.get(o, 0.0) - w) ** 2 / w for o, w in expected.items())
            best = max(best, shift * case.n / 5)
        assert best > 150, hint


TREE_HINTS = {
    "residual_not_updated": ("tree/sampled", "each sibling is judged against the original p"),
    "abs_residual": ("tree/greedy-refuse-below", "|p - q_j| gives those tokens mass"),
    "without_replacement_not_renormalised": ("tree/without-replacement", "AND renormalised"),
    "descends_without_new_row": ("tree/greedy-descend", "descend means p <- p_rows[c]"),
    "final_token_from_q": ("tree/greedy-descend", "drawn from a draft row"),
    "final_token_from_root_row": ("tree/greedy-descend", "the root's row p_rows[0]"),
    "leaf_token_from_parent_row": ("tree/greedy-descend", "the leaf's parent, one row too early"),
}


def test_every_tree_variant_has_an_expected_hint():
    assert set(TREE_HINTS) == set(broken.TREE_VARIANTS)


@pytest.mark.parametrize("name", sorted(TREE_HINTS))
def test_a_broken_verify_tree_is_rejected_with_its_hint(name):
    start = time.perf_counter()
    result = graded(broken.TREE_VARIANTS[name], name)
    check, words = TREE_HINTS[name]
    failed = [r for r in result.results if r.status == "fail"]
    assert result.family_status("tree-law") == "fail" and result.crash is None
    assert failed[0].check.name == check
    assert words in failed[0].outcome.hint, failed[0].outcome.hint
    assert "tree-rule" not in result.verdicts  # not told "exact": it is not
    assert time.perf_counter() - start < 20  # ~0.1 to 2 s measured


EXACT_BUT_SLOWER = {
    "keep_with_p_resample_without_x": ("tree-rule/sampled-acceptance", "keeping x with p(x)"),
    "first_child_only": ("tree-rule/greedy-walk", "trying only the first child"),
}


@pytest.mark.parametrize("name", sorted(EXACT_BUT_SLOWER))
def test_an_exact_rule_that_keeps_fewer_is_reported_as_exact(name):
    result = graded(broken.EXACT_BUT_SLOWER[name], name)
    assert result.family_status("tree-law") == "pass"
    assert result.family_status("tree-rule") == "fail" and not result.passed
    check, words = EXACT_BUT_SLOWER[name]
    failed = next(r for r in result.results if r.status == "fail")
    assert failed.check.name == check
    assert words in failed.outcome.hint, failed.outcome.hint
    verdict = result.verdicts["tree-rule"]
    assert verdict.startswith("exact, but not the contract's rule")
    assert "FAIL  tree-rule: exact, but not" in text_report(result)


def test_a_path_that_includes_the_root_is_a_clear_contract_breach():
    def path_with_root(p_rows, tree, rng):
        return (0,), int(np.argmax(p_rows[0]))

    result = graded(path_with_root)
    assert "the root (node 0) excluded" in str(result.crash.error)
    assert result.crash.where == "the value your verify_tree returned"
