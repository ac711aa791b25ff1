"""The EAGLE-2 growth exercise's grader (specdec/grading/exercises/eagle_tree/): the worked
solution passes, the untouched skeleton fails on its NotImplementedError, and each broken
variant (tests/grader/broken_eagle_tree.py) is rejected by the check its mistake first shows
in, and by the round inside a real drafter where a real drafter can show it, each with the
hint that names it.

The grader's own expectations are tested too: on every case its rule grows the tree, and
asks the passes, that the reference's EagleTreeDrafter grows and runs (its own propose_tree,
driven by the case's toy drafter), the drafter whose growth the rule supplies is the
reference's drafter bit for bit in the seeded rounds, the skeleton's worked example is the
rule's answer, the random cases come from the grading's secret, and each catalogued mistake
differs from the contract on some case (so every hint can be reached)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

import reference.tree.eagle as reference_eagle
from reference.sampling import SamplingParams
from reference.tree.eagle import EagleTreeDrafter
from specdec.grading.engine.report import text_report
from specdec.grading.exercises import exercise
from specdec.grading.exercises.eagle_tree.cases import (
    GROUPS,
    all_cases,
    expected,
    random_cases,
    slipped,
)
from specdec.grading.exercises.eagle_tree.checks import eagle_tree_families
from specdec.grading.exercises.eagle_tree.mistakes import MISTAKES
from specdec.grading.exercises.eagle_tree.round import (
    CONFIG,
    ROUND_NAMES,
    SHAPE,
    GrownTree,
    eagle_pair,
    reference_run,
    round_cases,
    rule_growth,
    run_case,
    same_run,
)

from . import broken_eagle_tree as broken
from .exercise_tests import (
    REPO,
    grader_for,
    not_passed,
    rejected,
    shows_its_mistake,
    the_skeleton_fails,
    the_solution_passes,
)

EAGLE_TREE = exercise("eagle_tree")
SECRETS = (1, 2)  # two gradings' random cases


graded = grader_for("eagle_tree", eagle_tree_families)


def test_the_solution_passes_and_is_recognised_by_its_name():
    result = the_solution_passes("eagle_tree")
    assert result.seconds < 10  # ~2 s measured, the worker's callbacks included


def test_the_correct_variant_of_the_catalogue_passes():
    result = graded(broken.correct)
    assert result.passed, not_passed(result)


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = the_skeleton_fails("eagle_tree")
    assert result.crash.call.startswith("grow_eagle_tree(root=9, root_confidence [V = 4]")


# variant -> (the eagle-tree check that rejects it first, words of its hint); the round
# inside a real drafter (eagle-tree-round/greedy) rejects it too, with the same hint, unless
# a real drafter cannot show it (no ties, no zero in a softmax)
HINTS = {
    "best_first_until_budget": ("eagle-tree/example", "one node at a time"),
    "first_created_kept": ("eagle-tree/example", "you keep the first max_nodes candidates"),
    "own_probability_as_score": ("eagle-tree/example", "each node's own probability"),
    "whole_level_expanded": ("eagle-tree/ties", "you expand every node of a level"),
    "ties_to_the_later_node": ("eagle-tree/example", "a tie to the later node"),
    "root_counted_in_budget": ("eagle-tree/example", "you keep max_nodes - 1 candidates"),
    "no_pruning": ("eagle-tree/example", "none of whose children could be kept"),
    "zero_confidence_offered": ("eagle-tree/shallow", "tokens of confidence 0"),
    "one_pass_per_node": ("eagle-tree/example", "one pass per expanded node"),
}
NOT_IN_A_REAL_ROUND = {"ties_to_the_later_node", "zero_confidence_offered"}


def test_every_broken_variant_has_an_expected_hint():
    assert set(HINTS) == set(broken.VARIANTS)


@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_broken_variant_is_rejected_with_its_hint(name):
    result = graded(broken.VARIANTS[name])
    check, words = HINTS[name]
    failed = rejected(result)
    in_round = [] if name in NOT_IN_A_REAL_ROUND else ["eagle-tree-round/greedy"]
    assert [r.check.name for r in failed] == [check, *in_round]
    shows_its_mistake(failed[0].outcome, words, "grow_eagle_tree")
    story = "\n".join(failed[0].outcome.story)
    assert "expected passes:" in story and "your passes:" in story
    if in_round:
        assert words in failed[1].outcome.hint, failed[1].outcome.hint
        assert "the reference's tree" in "\n".join(failed[1].outcome.story)
    assert "FAIL  eagle-tree:" in text_report(result)


def test_a_pass_that_reaches_the_leaves_crashes_with_a_hint():
    def one_level_too_deep(root, row, confidence, top, depth, max_nodes):
        return broken.correct(root, row, confidence, top, depth + 1, max_nodes)

    result = graded(one_level_too_deep)
    assert isinstance(result.crash.error, ValueError)
    assert "are leaves" in str(result.crash.error)
    assert "never expanded, so no pass scores them" in result.crash.hint


def test_a_node_asked_before_its_parent_is_refused():
    def skips_a_level(root, row, confidence, top, depth, max_nodes):
        if depth >= 3:
            confidence(np.array([[0, 0]]))
        return broken.correct(root, row, confidence, top, depth, max_nodes)

    result = graded(skips_a_level)
    assert "before its parent" in str(result.crash.error)


@pytest.mark.parametrize(
    "paths, words",
    [
        ("0 1", "takes an int array [r, d]"),
        (np.array([[0.0]]), "takes an int array [r, d]"),
        (np.zeros((1, 0), dtype=np.int64), "the root's row is handed to you"),
        (np.array([[99]]), "paths hold token ids 0..3"),
        (np.zeros((0, 1), dtype=np.int64), "a pass scores 1 to"),
    ],
)
def test_what_confidence_refuses_is_said(paths, words):
    def asks(root, row, confidence, top, depth, max_nodes):
        confidence(paths)
        return broken.correct(root, row, confidence, top, depth, max_nodes)

    result = graded(asks)
    assert isinstance(result.crash.error, ValueError) and words in str(result.crash.error)


def test_an_answer_that_is_not_two_arrays_breaks_the_contract():
    def tokens_only(*args):
        return broken.correct(*args)[0]

    result = graded(tokens_only)
    assert "must return (tokens, parents)" in str(result.crash.error)
    assert result.crash.where == "the value your grow_eagle_tree returned"


def test_lists_and_other_int_types_are_accepted():
    def as_lists(*args):
        tokens, parents = broken.correct(*args)
        return tokens.astype(np.int32).tolist(), parents.tolist()

    result = graded(as_lists)
    assert result.passed, not_passed(result)


def test_grading_a_wrong_variant_is_quick():
    start = time.perf_counter()
    graded(broken.root_counted_in_budget)
    assert time.perf_counter() - start < 5


# --------------------------------------------------------------------------------------------
# The grader's expectations
# --------------------------------------------------------------------------------------------


class TableEagle:
    """Stands in for the EagleDrafter inside EagleTreeDrafter: a node's "feature" is the index
    of its path, and its confidence row the case's table row for that path."""

    def __init__(self, case) -> None:
        self.case, self.paths = case, [()]
        self.n_vocab = 16  # the context's ids: the roots of the shown cases reach 9
        self.cache = SimpleNamespace(pending=1, capacity=10_000)
        self.block_model = None
        self.passes: list[frozenset] = []

    def check_known(self, n: int) -> None:
        pass

    def start_proposal(self) -> None:
        pass

    def catch_up(self, context) -> np.ndarray:
        return np.array([0.0])  # the root's path

    def fuse(self, tokens, f) -> np.ndarray:
        for t, row in zip(tokens, f, strict=True):
            self.paths.append((*self.paths[int(row[0])], int(t)))
        return np.arange(len(self.paths) - len(tokens), len(self.paths), dtype=float)[:, None]

    def rows(self, model, g, parents, cache) -> np.ndarray:  # the block's pass: identity
        self.passes.append(frozenset(self.paths[int(r[0])] for r in g))
        return g

    def confidence(self, out) -> np.ndarray:
        return np.stack([self.case.row(self.paths[int(r[0])]) for r in out])


def reference_growth(case, monkeypatch):
    eagle = TableEagle(case)
    monkeypatch.setattr(reference_eagle, "tree_forward_rows", eagle.rows)
    drafter = object.__new__(EagleTreeDrafter)  # its __init__ wants a real EagleDrafter
    drafter.eagle, drafter.confidence = eagle, eagle.confidence
    drafter.max_nodes, drafter.depth, drafter.top = case.max_nodes, case.depth, case.top
    context = np.array([0, case.root])
    tree = drafter.propose_tree(
        context, case.depth, case.max_nodes + 1, SamplingParams(), np.random.default_rng(0)
    )
    return tree, tuple(eagle.passes)


def test_the_rule_is_the_reference_growth_node_by_node(monkeypatch):
    compared = 0
    for secret in SECRETS:
        for case in all_cases(secret):
            tree, passes = reference_growth(case, monkeypatch)
            want = expected(case)
            assert tuple(tree.tokens.tolist()) == want.tokens, case
            assert tuple(tree.parents.tolist()) == want.parents, case
            assert passes == want.passes, case
            compared += 1
    assert compared >= 300


@pytest.mark.parametrize("secret", SECRETS)
def test_the_drafter_grown_by_the_rule_is_the_reference_drafter_bit_for_bit(secret):
    target, params = eagle_pair()
    for case in round_cases(secret):
        mine = run_case(case, GrownTree(target, params, rule_growth()))
        theirs = reference_run(case)
        assert not mine.error and same_run(mine, theirs), case.name


def test_each_grading_draws_its_own_rounds():
    # the same secret, the same runs; other secrets, other prompts (a student cannot know them)
    assert round_cases(1) == round_cases(1)
    prompts = {c.prompt for secret in range(1, 21) for c in round_cases(secret)}
    assert len(prompts) >= 35
    assert [c.name for c in round_cases(1)] == list(ROUND_NAMES)
    assert [c.temperature for c in round_cases(1)] == [0.0, 1.0]


def test_the_drawn_rounds_hold_pruned_and_full_levels():
    # over 20 gradings' runs: full and pruned passes, trees that change shape round to round
    full = pruned = changing = 0
    for secret in range(1, 21):
        for case in round_cases(secret):
            steps = reference_run(case).steps
            rows = [r for step in steps for r in step.rows]
            full += SHAPE["top"] in rows
            pruned += 1 in rows
            changing += len({step.parents for step in steps}) >= 3
            # the drafter's cache never runs short of rows for a level (the reference would
            # then expand fewer than `top`, which the contract does not say)
            assert len(case.prompt) + case.new_tokens + SHAPE["top"] * SHAPE["depth"] < (
                CONFIG.n_ctx
            )
    print(f"of 40 runs: {full} with a full pass, {pruned} with a pruned one, {changing} changing")
    assert full >= 36 and pruned >= 30 and changing >= 36


def test_the_skeletons_worked_example_is_the_rules_answer():
    (case,) = GROUPS["example"][1]
    want = expected(case)
    text = (REPO / EAGLE_TREE.skeleton_path).read_text()
    assert f"tokens = {list(want.tokens)}, parents = {list(want.parents)}" in text
    assert [sorted(p) for p in want.passes] == [[(0,), (2,)], [(0, 1)]]  # as the text says


def test_the_random_cases_come_from_the_grading_secret():
    a, b = random_cases(SECRETS[0]), random_cases(SECRETS[1])
    assert a == random_cases(SECRETS[0]) and set(a) != set(b)
    cases = a + b
    assert {c.depth for c in cases} == {1, 2, 3, 4} and {c.style for c in cases} == {
        "grid",
        "smooth",
    }
    assert any(c.max_nodes < c.top for c in cases) and any(c.max_nodes >= 10 for c in cases)
    pruned = [c for c in cases if slipped(c, "no-pruning") != expected(c)]
    assert len(pruned) >= 10  # worth_expanding's pruning matters on many


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_every_catalogued_mistake_differs_from_the_contract_somewhere(mistake):
    slip, _ = mistake
    shown = [c for _, cases in GROUPS.values() for c in cases]
    assert any(slipped(c, slip) != expected(c) for c in shown), slip
