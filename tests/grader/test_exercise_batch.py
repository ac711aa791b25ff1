"""The ragged-batch exercise's grader (specdec/grading/exercises/batch/checks.py): the worked
solution and the project's own `batch_placement` pass, the grader's rule is the reference's,
the skeleton fails naming NotImplementedError, the random batches are drawn afresh from each
grading's secret (a pinned one draws them again), and each broken variant is rejected, under
two secrets, by the family of the array it gets wrong, with the hint that names its mistake
(matched by a few words), while the other families pass."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from specdec.grading.engine.secret import SECRET_ENV
from specdec.grading.exercises.batch.checks import (
    FIXED,
    N_RANDOM,
    batch_families,
    expected,
    random_cases,
)

from . import broken_batch as broken
from .exercise_tests import (
    grader_for,
    not_passed,
    rejected,
    the_skeleton_fails,
    the_solution_passes,
)


def reference_ragged_pass(start, n_new, T):
    """The project's placement and the slots its cache writes, in the exercise's signature."""
    from reference.batch import BatchKVCache, batch_placement

    at = batch_placement(np.asarray(start), np.asarray(n_new), T)
    B, S = len(start), at.stop
    cache = BatchKVCache(B, 1, 1, 1, capacity=S + T + 1)
    ones = np.ones((B, 1, T, 1), dtype=np.float32)
    cache.write(0, at.start, at.n_new, ones, ones)
    writes = cache.k[:, 0, 0, :S, 0] == 1  # [B, S]: the slots the write touched
    return at.positions, at.mask[:, 0], writes


graded = grader_for("batch", batch_families)
SECRETS = (1, 2)  # the random batches of two gradings


def test_the_solution_passes_in_about_a_second():
    result = the_solution_passes("batch")
    assert result.seconds < 10  # ~0.1 s measured


def test_the_graders_rule_is_the_references():
    # the grader writes the rule on its own; on every batch it agrees with reference/batch.py
    for case in FIXED + random_cases(SECRETS[0]) + random_cases(SECRETS[1]):
        start, n_new = case.arrays()
        for mine, theirs in zip(
            expected(case), reference_ragged_pass(start, n_new, case.T), strict=True
        ):
            assert mine.shape == theirs.shape and np.array_equal(mine, theirs), case


def test_the_projects_own_placement_passes():
    result = graded(reference_ragged_pass)
    assert result.passed, not_passed(result)


def test_the_batches_hold_idle_rows_padding_and_wide_passes():
    for cases in map(random_cases, SECRETS):
        assert len(set(cases)) == len(cases) == N_RANDOM
        assert {c.B for c in cases} == set(range(1, 6))
        assert max(max(c.start) for c in cases) == 10 and max(max(c.n_new) for c in cases) == 4
        assert sum(0 in c.n_new for c in cases) >= 50  # an idle row
        assert sum(any(n < c.T for n in c.n_new) for c in cases) >= 150  # padding
        assert sum(c.T > max(c.n_new) for c in cases) >= 50  # columns wider than every row
    assert (
        sum(
            c.S > max(s + n for s, n in zip(c.start, c.n_new, strict=True) if n)
            for c in FIXED
            if any(c.n_new)
        )
        >= 1
    )  # an idle row sets S


def test_the_skeleton_fails_naming_not_implemented():
    result = the_skeleton_fails("batch")
    assert result.crash.call == "ragged_pass(start=[0], n_new=[3], T=3)"


# variant -> (the failing check, words of its hint); the other families must pass
BATCH_HINTS = {
    "positions_not_offset": ("batch-positions/fixed", "not offset by start"),
    "positions_from_one_past_start": ("batch-positions/fixed", "not start[b] + 1"),
    "padding_continues_positions": ("batch-positions/fixed", "runs past n_ctx"),
    "mask_not_offset": ("batch-mask/fixed", "your mask ignores start"),
    "mask_strictly_causal": ("batch-mask/fixed", "a token does not see itself"),
    "padding_sees_past_the_row": ("batch-mask/fixed", "did not write in this pass"),
    "padding_sees_nothing": ("batch-mask/fixed", "your padding masks every slot"),
    "idle_row_writes": ("batch-writes/fixed", "an idle row"),
    "padding_written": ("batch-writes/fixed", "padding is never written"),
}


def test_every_batch_variant_has_an_expected_hint():
    assert set(BATCH_HINTS) | {"s_without_idle_rows"} == set(broken.BATCH_VARIANTS)


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("name", sorted(BATCH_HINTS))
def test_a_broken_pass_is_rejected_with_its_hint(name, secret):
    result = graded(broken.BATCH_VARIANTS[name], name, secret)
    failed = rejected(result)
    check, words = BATCH_HINTS[name]
    assert [r.check.name for r in failed] == [check]  # one family, the others pass
    assert words in failed[0].outcome.hint, failed[0].outcome.hint
    story = "\n".join(failed[0].outcome.story)
    assert story.startswith("ragged_pass(start=") and ("expected" in story)
    assert result.seconds < 10  # ~0.1 s measured


def batches_handed(secret: int | None) -> list[tuple]:
    """Every (start, n_new, T) a grading hands a correct pass, in order (`secret` None:
    SPECDEC_GRADING_SECRET's, as `specdec grade` would)."""
    seen = []

    def ragged_pass(start, n_new, T):
        seen.append((tuple(int(s) for s in start), tuple(int(n) for n in n_new), T))
        return reference_ragged_pass(start, n_new, T)

    result = graded(ragged_pass, secret=secret)
    assert result.passed, not_passed(result)
    return seen


def test_the_random_batches_are_drawn_afresh_for_each_grading(monkeypatch):
    first, other = batches_handed(SECRETS[0]), batches_handed(SECRETS[1])
    monkeypatch.setenv(SECRET_ENV, str(SECRETS[0]))
    assert batches_handed(None) == first  # the secret pinned: the same batches, in order
    shown = [(c.start, c.n_new, c.T) for c in FIXED]
    assert first[: len(FIXED)] == other[: len(FIXED)] == shown  # the shown batches stay
    # then each grading's random batches, each asked once (a shown batch drawn again is not)
    drawn = [[(c.start, c.n_new, c.T) for c in random_cases(s)] for s in SECRETS]
    assert first[len(FIXED) :] == [c for c in drawn[0] if c not in shown]
    assert other[len(FIXED) :] == [c for c in drawn[1] if c not in shown]
    assert not set(drawn[1]) <= set(drawn[0])  # another secret: batches the first never saw


def test_a_table_of_the_shown_batches_fails_the_random_ones():
    table = {(c.start, c.n_new, c.T) for c in FIXED}

    def ragged_pass(start, n_new, T):
        if (tuple(int(s) for s in start), tuple(int(n) for n in n_new), T) in table:
            return reference_ragged_pass(start, n_new, T)
        B = len(start)
        return np.zeros((B, T), dtype=np.int64), np.zeros((B, T, 1), bool), np.zeros((B, 1), bool)

    for secret in SECRETS:
        failed = rejected(graded(ragged_pass, secret=secret))
        assert [r.check.name for r in failed] == [f"{p}/random" for p in PREFIXES]
        story = failed[0].outcome.story[0]  # the smallest batch is one of this grading's
        assert any(story.startswith(c.describe()) for c in random_cases(secret))


PREFIXES = ("batch-positions", "batch-mask", "batch-writes")


def test_an_s_that_forgets_an_idle_row_fails_the_mask_and_the_writes_on_their_shape():
    result = graded(broken.s_without_idle_rows)
    failed = {r.check.name: r.outcome for r in result.results if r.status == "fail"}
    assert set(failed) == {"batch-mask/fixed", "batch-writes/fixed"}  # positions: [B, T], fine
    for outcome in failed.values():
        assert (
            "the contract's S is max(start + n_new) = 7" in outcome.hint
        )  # the batch where the idle row
        assert "leaving out an idle row's history" in outcome.hint  # holds the longest row


def test_a_pass_that_returns_another_thing_is_a_clear_contract_breach():
    def positions_only(start, n_new, T):
        return np.asarray(start)[:, None] + np.arange(T)

    result = graded(positions_only)
    assert "must return (positions, mask, writes)" in str(result.crash.error)
    assert result.crash.where == "the value your ragged_pass returned"
    assert result.crash.call == "ragged_pass(start=[0], n_new=[3], T=3)"


def test_a_mask_in_another_layout_is_named_by_its_shape():
    def slots_first(start, n_new, T):  # mask [B, S, T]: keys before queries
        positions, mask, writes = reference_ragged_pass(start, n_new, T)
        return positions, mask.transpose(0, 2, 1), writes

    result = graded(slots_first)
    (failed,) = [r for r in result.results if r.status == "fail"]
    assert failed.check.name == "batch-mask/fixed"
    assert "your mask is [B, S, T] = [1, 6, 2], keys before queries" in failed.outcome.hint


def test_a_crash_is_shown_at_the_students_line():
    def crashes_on_an_idle_row(start, n_new, T):
        if 0 in list(n_new):
            raise IndexError("no token in this row")
        return reference_ragged_pass(start, n_new, T)

    result = graded(crashes_on_an_idle_row)
    line = inspect.getsourcelines(crashes_on_an_idle_row)[1] + 2
    assert f"test_exercise_batch.py, line {line}" in result.crash.where
    assert result.crash.call == "ragged_pass(start=[4, 2, 6], n_new=[2, 0, 3], T=3)"
