"""The tree-mask exercise's grader (specdec/grading/exercises/tree_mask/checks.py): the worked
solution passes, the untouched skeleton fails on its NotImplementedError, and each broken
variant (tests/grader/broken_tree_masks.py) is rejected, under two secrets, by the check its
mistake first shows in, with the hint that names it.

The grader's own expectations are tested too: on every case it runs they are what the
reference's pass places (tree_placement on a real cache) and what its compaction moves
(compact on a real cache), the random cases are drawn afresh from each grading's secret (a
pinned one draws them again) and hold the kinds of trees and paths they claim, and each
catalogued mistake differs from the contract on some case the checks run (so every
hint can be reached)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from reference.kv_cache import KVCache
from reference.tree import compact, kept_slots, tree_placement
from specdec.grading.engine.report import text_report
from specdec.grading.engine.secret import SECRET_ENV
from specdec.grading.exercises.tree_mask.cases import GROUPS, N_RANDOM, expected, random_cases
from specdec.grading.exercises.tree_mask.checks import tree_mask_families
from specdec.grading.exercises.tree_mask.mistakes import (
    KEPT_MISTAKES,
    MASK_MISTAKES,
    MOVED_MISTAKES,
    POSITION_MISTAKES,
)

from . import broken_tree_masks as broken
from .exercise_tests import (
    grader_for,
    not_passed,
    rejected,
    shows_its_mistake,
    the_skeleton_fails,
    the_solution_passes,
)

graded = grader_for("tree_mask", tree_mask_families)
SECRETS = (1, 2)  # the random trees of two gradings
SHOWN = tuple(c for _, cases in GROUPS.values() for c in cases)  # the same in every grading


def all_cases() -> tuple:
    """The cases of two gradings: the shown ones, then each one's random trees."""
    return SHOWN + random_cases(SECRETS[0]) + random_cases(SECRETS[1])


def test_the_solution_passes_and_is_recognised_by_its_name():
    result = the_solution_passes("tree_mask")
    assert result.seconds < 10


def test_the_correct_variant_of_the_catalogue_passes():
    # the base every broken variant changes one part of: its mistakes are theirs alone
    result = graded(broken.correct)
    assert result.passed, not_passed(result)


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = the_skeleton_fails("tree_mask")
    assert result.crash.call == "tree_attention(parents=[-1], length=0, path=[])"


# variant -> (the check that rejects it first, words of its hint)
HINTS = {
    "sibling_sees_sibling": ("tree-mask/star", "siblings see each other"),
    "node_misses_itself": ("tree-mask/lone-root", "a node must see itself"),
    "sees_only_its_parent": ("tree-mask/chain", "not the ancestors above it"),
    "causal_mask": ("tree-mask/star", "this is a causal mask"),
    "committed_masked_out": ("tree-mask/lone-root", "masking the committed slots out"),
    "no_committed_columns": ("tree-mask/lone-root", "its shape is [n, length + n]"),
    "additive_mask": ("tree-mask/lone-root", "additive mask"),
    # no catalogued mistake fits: the first wrong entry, explained
    "root_unseen": ("tree-mask/chain", "node 1 must see slot 3, which holds node 0, its parent"),
    "positions_by_slot": ("tree-positions/star", "positions by slot"),
    "positions_one_high": ("tree-positions/lone-root", "one too high"),
    "root_dropped": ("tree-compaction/lone-root", "the root is kept too"),
    "kept_in_the_wrong_order": ("tree-compaction/chain", "kept is in the wrong order"),
    "kept_as_node_ids": ("tree-compaction/lone-root", "cache slots, not node ids"),
    "nothing_moves": ("tree-compaction/star", "nothing moves"),
    "moved_to_from_zero": ("tree-compaction/lone-root", "absolute cache slots"),
}
FAMILY_OF = {name: check.partition("/")[0] for name, (check, _) in HINTS.items()}


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_broken_variant_is_rejected_with_its_hint(name, secret):
    result = graded(getattr(broken, name), secret=secret)
    check, words = HINTS[name]
    failed = rejected(result)
    # one mistake, one family: the other two parts are the contract's
    assert [r.check.name for r in failed] == [check]
    shows_its_mistake(failed[0].outcome, words, "tree_attention")
    report = text_report(result)
    assert f"FAIL  {FAMILY_OF[name]}:" in report and "hint: " in report


def test_a_crash_on_the_lone_root_is_shown_at_its_line_with_a_hint():
    result = graded(broken.assumes_a_path)
    assert not result.passed
    assert "broken_tree_masks.py, line" in result.crash.where
    assert isinstance(result.crash.error, IndexError)
    assert result.crash.call == "tree_attention(parents=[-1], length=0, path=[])"
    assert "the path is empty" in result.crash.hint


def test_an_answer_that_is_not_four_arrays_breaks_the_contract():
    def three(parents, length, path):
        return broken.correct(parents, length, path)[:3]

    result = graded(three)
    assert not result.passed
    assert "must return (mask, positions, kept, moved_to)" in str(result.crash.error)
    assert "the value your tree_attention returned" in result.crash.where


def test_a_mask_of_ones_and_zeros_and_a_list_are_accepted():
    # the contract asks for arrays; ints 0/1 and plain lists of the right values are read alike
    def as_lists(parents, length, path):
        mask, positions, kept, moved_to = broken.correct(parents, length, path)
        return mask.astype(np.int8), positions.tolist(), list(kept), moved_to.astype(np.int32)

    result = graded(as_lists)
    assert result.passed, not_passed(result)


# --------------------------------------------------------------------------------------------
# The grader's expectations
# --------------------------------------------------------------------------------------------


def cache_with(length: int, room: int) -> KVCache:
    # one layer, one head, head size 1; slot s holds K = s, so a move shows where it came from
    cache = KVCache(1, 1, 1, length + room)
    slots = np.arange(length + room, dtype=np.float32)[None, :, None]
    cache.write(0, 0, slots, slots)
    cache.length = length
    return cache


def test_the_expected_mask_and_positions_are_the_reference_pass_placement():
    for case in all_cases():
        parents = np.array(case.parents, dtype=np.int64)
        placement = tree_placement(parents, case.n, cache_with(case.length, case.n))
        want = expected(case)
        assert np.array_equal(placement.mask, want.mask), case
        assert np.array_equal(placement.positions, want.positions), case
        assert placement.start[0] == case.length  # node i is written at slot length + i


def test_the_expected_moves_are_what_the_reference_compaction_does():
    for case in all_cases():
        cache = cache_with(case.length, case.n)
        cache.pending = case.n  # the pass wrote the n nodes, root first
        compact(cache, kept_slots(1, case.path))
        want = expected(case)
        moved = cache.k[0, 0, want.moved_to, 0]
        assert np.array_equal(moved, want.kept.astype(np.float32)), case


@pytest.mark.parametrize("secret", SECRETS)
def test_the_random_cases_hold_every_kind_of_tree_and_path(secret):
    cases = random_cases(secret)
    assert len(set(cases)) == len(cases) == N_RANDOM
    assert max(c.n for c in cases) <= 24 and {c.length for c in cases} == set(range(17))
    depth = [int(expected(c).positions.max()) - c.length for c in cases]
    children_of_root = [sum(p == 0 for p in c.parents) for c in cases]
    assert any(c.n == 1 for c in cases)  # a lone root
    assert any(c.n >= 8 and d == c.n - 1 for c, d in zip(cases, depth, strict=True))  # chains
    assert any(c.n >= 8 and k == c.n - 1 for c, k in zip(cases, children_of_root, strict=True))
    assert any(d >= 6 and k >= 2 for d, k in zip(depth, children_of_root, strict=True))  # deep
    assert any(k >= 6 and d >= 2 for d, k in zip(depth, children_of_root, strict=True))  # wide
    assert any(not c.path and c.n > 1 for c in cases)  # every candidate refused
    assert any(len(c.path) >= 4 for c in cases)
    assert any(c.path and c.path[-1] > c.path[0] + 1 for c in cases)  # a path with gaps


def trees_handed(secret: int | None) -> list[tuple]:
    """Every (parents, length, path) a grading hands a correct function, in order (`secret`
    None: SPECDEC_GRADING_SECRET's, as `specdec grade` would)."""
    seen = []

    def tree_attention(parents, length, path):
        seen.append((tuple(int(p) for p in parents), length, tuple(path)))
        return broken.correct(parents, length, path)

    result = graded(tree_attention, secret=secret)
    assert result.passed, not_passed(result)
    return seen


def test_the_random_trees_are_drawn_afresh_for_each_grading(monkeypatch):
    first, other = trees_handed(SECRETS[0]), trees_handed(SECRETS[1])
    monkeypatch.setenv(SECRET_ENV, str(SECRETS[0]))
    assert trees_handed(None) == first  # the secret pinned: the same trees, in order
    shown = [(c.parents, c.length, c.path) for c in SHOWN]
    assert first[: len(SHOWN)] == other[: len(SHOWN)] == shown  # the shown cases stay
    # then each grading's random trees, each asked once (a shown case drawn again is not)
    drawn = [[(c.parents, c.length, c.path) for c in random_cases(s)] for s in SECRETS]
    assert first[len(SHOWN) :] == [c for c in drawn[0] if c not in shown]
    assert other[len(SHOWN) :] == [c for c in drawn[1] if c not in shown]
    assert not set(drawn[1]) <= set(drawn[0])  # another secret: trees the first never saw


def test_a_table_of_the_shown_trees_fails_the_random_ones():
    table = {(c.parents, c.length, c.path) for c in SHOWN}

    def tree_attention(parents, length, path):
        if (tuple(int(p) for p in parents), length, tuple(path)) in table:
            return broken.correct(parents, length, path)
        n = len(parents)
        return np.eye(n, length + n, length, dtype=bool), np.zeros(n, int), [length], [length]

    for secret in SECRETS:
        failed = rejected(graded(tree_attention, secret=secret))
        assert {r.check.name.partition("/")[2] for r in failed} == {"random"}
        story = failed[0].outcome.story[0]  # the smallest wrong case is one of this grading's
        assert any(story.endswith(c.describe()) for c in random_cases(secret))


@pytest.mark.parametrize(
    "mistakes, part",
    [
        (MASK_MISTAKES, "mask"),
        (POSITION_MISTAKES, "positions"),
        (KEPT_MISTAKES, "kept"),
        (MOVED_MISTAKES, "moved_to"),
    ],
    ids=["mask", "positions", "kept", "moved_to"],
)
def test_every_catalogued_mistake_differs_from_the_contract_somewhere(mistakes, part):
    for name, rebuild, _ in mistakes:
        differs = False
        for case in all_cases():
            got, want = np.asarray(rebuild(case)), getattr(expected(case), part)
            if got.shape != want.shape or not np.array_equal(got, want):
                differs = True
                break
        assert differs, f"{name} is the contract on every case: its hint can never be given"


def test_grading_a_wrong_variant_is_quick():
    start = time.perf_counter()
    graded(broken.sibling_sees_sibling)
    assert time.perf_counter() - start < 5
