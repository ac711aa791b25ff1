"""The EAGLE alignment exercise's grader (specdec/grading/exercises/eagle_align/): the worked
solution passes, the untouched skeleton fails on its NotImplementedError, and each broken
variant (tests/grader/broken_eagle_align.py) is rejected, under two secrets, by the pairs
check its mistake first shows in and by the round inside a real drafter, each with the hint
that names it.

The grader's own expectations are tested too: on every case its rule gives the pairs the
reference's EagleDrafter feeds (its prefill, and the catch-up at the start of a proposal,
spied on), the drafter that takes its pairs from a submission is the reference's drafter bit
for bit when they are the rule's, the rounds hold the catch-ups they claim, the random cases
and the rounds' prompts and generators are drawn afresh for each grading (a pinned secret
draws them again), and each catalogued mistake differs from the contract on some case (so
every hint can be reached)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from reference.config import GPTConfig
from reference.eagle import EagleDrafter, init_eagle_params
from reference.model import GPT, init_params
from reference.sampling import SamplingParams
from specdec.grading.engine.report import text_report
from specdec.grading.engine.secret import SECRET_ENV, secret_held
from specdec.grading.exercises import exercise
from specdec.grading.exercises.eagle_align.cases import (
    GROUPS,
    N_RANDOM,
    Answer,
    C,
    V,
    expected,
    random_cases,
    rule,
    same,
)
from specdec.grading.exercises.eagle_align.checks import eagle_align_families
from specdec.grading.exercises.eagle_align.mistakes import MISTAKES, rebuilt
from specdec.grading.exercises.eagle_align.round import (
    SHAPES,
    StudentEagle,
    eagle_pair,
    reference_run,
    round_cases,
    run_case,
)

from . import broken_eagle_align as broken
from .exercise_tests import (
    grader_for,
    not_passed,
    rejected,
    shows_its_mistake,
    the_skeleton_fails,
    the_solution_passes,
)

EAGLE_ALIGN = exercise("eagle_align")
graded = grader_for("eagle_align", eagle_align_families)
SECRETS = (1, 2)  # the random cases and rounds of two gradings
SHOWN = tuple(c for _, cases in GROUPS.values() for c in cases)  # the same in every grading


def all_cases() -> tuple:
    """The cases of two gradings: the shown ones, then each one's random contexts."""
    return SHOWN + random_cases(SECRETS[0]) + random_cases(SECRETS[1])


def rounds() -> list[tuple]:
    """(secret, round) of the two gradings, each to be run under its secret."""
    return [(secret, case) for secret in SECRETS for case in round_cases(secret)]


def test_the_solution_passes_and_is_recognised_by_its_name():
    result = the_solution_passes("eagle_align")
    assert result.seconds < 10  # ~0.2 s measured


def test_the_correct_variant_of_the_catalogue_passes():
    result = graded(broken.correct)
    assert result.passed, not_passed(result)


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = the_skeleton_fails("eagle_align")
    assert result.crash.call.startswith("catch_up_pairs(context=[")
    assert "(n = 1), features [0, C] (none), cached=0)" in result.crash.call


# variant -> (the pairs check that rejects it first, words of its hint); the round inside a
# real drafter (eagle-round/greedy, the family's first check) rejects it too, with the same
# hint unless given below
HINTS = {
    "feature_one_ahead_sliced": ("eagle-pairs/one", "your feature is one position ahead"),
    "feature_one_behind": ("eagle-pairs/one", "your feature is one position behind"),
    "tokens_not_shifted": ("eagle-pairs/one", "your tokens are not shifted"),
    "token_two_ahead": ("eagle-pairs/one", "your tokens are one too far"),
    "cached_pairs_fed_again": ("eagle-pairs/nothing", "the drafter's cache already holds"),
    "one_cached_pair_fed_again": ("eagle-pairs/nothing", "you start one pair early"),
    "first_new_pair_skipped": ("eagle-pairs/one", "you start one pair late"),
    "last_pair_dropped": ("eagle-pairs/one", "you drop the last pair"),
    "every_feature_paired": ("eagle-pairs/nothing", "one more feature than the tokens can pair"),
    "newest_first": ("eagle-pairs/full", "your pairs are in reverse order"),
    # no catalogued mistake fits: the first wrong row, explained
    "one_feature_for_every_pair": ("eagle-pairs/full", "row 1 is position t = cached + 1"),
    "fused_rows": ("eagle-pairs/nothing", "feats holds one feature row per pair"),
}
ROUND_WORDS = {
    "one_feature_for_every_pair": "row 1 is position t = cached + 1 = 1",  # at the prefill
}


def test_every_broken_variant_has_an_expected_hint():
    assert set(HINTS) | {"feature_one_ahead"} == set(broken.VARIANTS)


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_broken_variant_is_rejected_with_its_hint(name, secret):
    result = graded(broken.VARIANTS[name], secret=secret)
    check, words = HINTS[name]
    failed = rejected(result)
    assert [r.check.name for r in failed] == [check, "eagle-round/greedy"]
    pairs, in_round = failed
    shows_its_mistake(pairs.outcome, words, "catch_up_pairs")
    assert ROUND_WORDS.get(name, words) in in_round.outcome.hint, in_round.outcome.hint
    story = "\n".join(in_round.outcome.story)
    assert "the reference drafter fed" in story and "yours fed" in story
    report = text_report(result)
    assert "FAIL  eagle-pairs:" in report and "FAIL  eagle-round:" in report


@pytest.mark.parametrize("secret", SECRETS)
def test_a_misaligned_drafter_still_emits_the_targets_text_and_the_story_says_so(secret):
    result = graded(broken.tokens_not_shifted, secret=secret)
    (in_round,) = [r for r in result.results if r.check.name == "eagle-round/greedy"]
    story = "\n".join(in_round.outcome.story)
    assert "the text is still the target's own" in story
    # from the first pair whose token is not its successor's (a prompt may repeat a token)
    assert "on they differ from the reference's (a fresh prefill's)" in story


@pytest.mark.parametrize("secret", SECRETS)
def test_feeding_cached_pairs_again_shows_the_cache_growing_past_a_fresh_prefill(secret):
    result = graded(broken.cached_pairs_fed_again, secret=secret)
    (in_round,) = [r for r in result.results if r.check.name == "eagle-round/greedy"]
    story = "\n".join(in_round.outcome.story)
    with secret_held(secret):  # after round 1 the reference holds a slot per known pair
        k, _ = reference_run(round_cases(secret)[0]).steps[1].cached_after
    assert f"committed slots; the reference's holds {k.shape[2]}" in story
    assert in_round.outcome.story[1].startswith("round 1: catch_up_pairs(")


def test_a_crash_past_the_last_feature_is_shown_at_its_line_with_a_hint():
    result = graded(broken.feature_one_ahead)
    assert not result.passed
    assert "broken_eagle_align.py, line" in result.crash.where
    assert isinstance(result.crash.error, IndexError)
    assert "(n = 2), features [1, C] (f(0..0)), cached=0)" in result.crash.call
    assert "Reading f(t + 1) or x(t + 2) runs past them" in result.crash.hint
    assert {result.family_status(f) for f in EAGLE_ALIGN.families} == {"fail"}


def test_an_answer_that_is_not_two_arrays_breaks_the_contract():
    def tokens_only(context, features, cached):
        return broken.correct(context, features, cached)[0]

    result = graded(tokens_only)
    assert not result.passed
    assert "must return (tokens, feats)" in str(result.crash.error)
    assert result.crash.where == "the value your catch_up_pairs returned"


def test_lists_float64_rows_and_other_int_types_are_accepted():
    # the answer is judged by value: float64 copies of the float32 rows are the same rows
    def as_lists(context, features, cached):
        tokens, feats = broken.correct(context, features, cached)
        return tokens.astype(np.int32).tolist(), feats.astype(np.float64)

    result = graded(as_lists)
    assert result.passed, not_passed(result)


def test_a_row_that_differs_in_its_last_bit_is_wrong():
    def nudged(context, features, cached):
        tokens, feats = broken.correct(context, features, cached)
        return tokens, np.nextafter(feats, np.float32(np.inf))

    result = graded(nudged)
    failed = [r.check.name for r in result.results if r.status == "fail"]
    assert failed == ["eagle-pairs/one", "eagle-round/greedy"]


# --------------------------------------------------------------------------------------------
# The grader's expectations
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wide_vocab_pair():
    # a target the cases' token ids (< V) and features (C wide) fit, and its drafter's weights
    cfg = GPTConfig(n_vocab=V, n_ctx=32, n_embd=C, n_head=1, n_layer=1)
    target = GPT(cfg, init_params(cfg, np.random.default_rng(0)))
    return target, init_eagle_params(cfg, np.random.default_rng(1))


def spied(drafter: EagleDrafter) -> list[tuple[np.ndarray, np.ndarray]]:
    # every fuse call's (tokens, features), in order: the first of a proposal is its catch-up
    calls, fuse = [], drafter.fuse

    def spy(tokens, f):
        calls.append((np.array(tokens), np.array(f)))
        return fuse(tokens, f)

    drafter.fuse = spy
    return calls


def test_the_rule_is_what_the_reference_eagle_drafter_feeds(wide_vocab_pair):
    target, params = wide_vocab_pair
    compared = 0
    for case in all_cases():
        context, features, cached = case.arguments()
        want = expected(case)
        drafter = EagleDrafter(target, params)
        drafter.observe_features(features)
        if case.m == case.n:  # a prefill: the prompt less its last token, one feature more
            calls = spied(drafter)
            drafter.prefill(context)
        elif len(want.tokens):  # a round: a cache of `cached` pairs, then a proposal
            drafter.prefill(context[: cached + 1])
            assert drafter.cache.length == cached
            calls = spied(drafter)
            drafter.propose(context, 1, SamplingParams(0.0), np.random.default_rng(0))
        else:  # nothing to feed: a proposal the reference never makes (no pair is new)
            continue
        fed = Answer(*calls[0]) if calls else rule(context[:0], features[:0], 0)
        assert same(fed, want), case
        compared += 1
    assert compared >= 280


def test_the_drafter_driven_by_the_rule_is_the_reference_drafter_bit_for_bit():
    target, params = eagle_pair()
    for secret, case in rounds():
        calls: list[tuple] = []

        def counted(call, calls=calls):
            calls.append(call)
            return rule(*call)

        with secret_held(secret):
            mine = run_case(case, StudentEagle(target, params, counted))
            theirs = reference_run(case)
        assert not mine.error and (mine.tokens, mine.kept) == (theirs.tokens, theirs.kept)
        # asked at prefill and at every proposal of a draft: the reference's catch-up is
        # replaced, not run beside it
        assert len(calls) == 1 + sum(len(s.draft.tokens) > 0 for s in mine.steps[1:])
        for a, b in zip(mine.steps, theirs.steps, strict=True):
            assert same(a.fed, b.fed) and same(a.fed, a.want)
            assert np.array_equal(a.draft.q, b.draft.q) if a.draft else b.draft is None
            pairs = zip(a.cached_after, b.cached_after, strict=True)
            assert all(np.array_equal(x, y) for x, y in pairs)


def test_the_reference_drafters_cache_equals_a_fresh_prefill_after_the_run():
    # what the round's story says of the reference's cache
    target, params = eagle_pair()
    for secret, case in rounds():
        with secret_held(secret):
            run = reference_run(case)
        context = np.array([*case.prompt, *run.tokens])
        fresh = EagleDrafter(target, params)  # given the history as the loop gives it
        fresh.observe_features(target.residual(context[:-1]))
        fresh.prefill(context[:-1])
        k, _ = run.steps[-1].cached_after
        length = k.shape[2]
        np.testing.assert_allclose(k, fresh.cache.committed()[0][:, :, :length], atol=1e-5)


def test_the_rounds_hold_every_kind_of_catch_up():
    for secret, case in rounds():
        with secret_held(secret):
            run = reference_run(case)
        assert case.k in run.kept and 0 in run.kept, (case.name, run.kept)  # all and none kept
        fed = [len(s.fed.tokens) for s in run.steps]  # the prefill's, then each round's
        assert fed[0] >= 2 and case.k + 1 in fed[1:] and 1 in fed[1:], (case.name, fed)
        assert 4 <= len(case.prompt) <= 8
        assert len(case.prompt) + case.new_tokens + case.k <= eagle_pair()[0].config.n_ctx
    assert {c.temperature == 0 for c in SHAPES} == {True, False}


def contexts_handed(secret: int | None) -> list[tuple]:
    """Every context a grading hands the rule, in order, the rounds' last (`secret` None:
    SPECDEC_GRADING_SECRET's, as `specdec grade` would)."""
    seen = []

    def catch_up_pairs(context, features, cached):
        seen.append(tuple(int(x) for x in context))
        return broken.correct(context, features, cached)

    with secret_held(secret):
        result = graded(catch_up_pairs)
    assert result.passed, not_passed(result)
    return seen


def test_the_rounds_are_drawn_afresh_for_each_grading(monkeypatch):
    first, other = contexts_handed(SECRETS[0]), contexts_handed(SECRETS[1])
    monkeypatch.setenv(SECRET_ENV, str(SECRETS[0]))
    assert contexts_handed(None) == first  # the secret pinned: the same prompts, the same runs
    for secret, handed in zip(SECRETS, (first, other), strict=True):
        for case in round_cases(secret):  # each round of a grading runs on its prompt
            n = len(case.prompt)
            assert any(c[:n] == case.prompt and len(c) > n for c in handed), case
    assert round_cases(SECRETS[0]) != round_cases(SECRETS[1])
    # the sampled round's generator is the grading's: the same prompt, another run
    case = round_cases(SECRETS[0])[1]
    runs = []
    for secret in SECRETS:
        with secret_held(secret):
            runs.append(reference_run(case).tokens)
    assert runs[0] != runs[1]


def test_the_random_contexts_are_drawn_afresh_for_each_grading():
    a, b = random_cases(SECRETS[0]), random_cases(SECRETS[1])
    assert a == random_cases(SECRETS[0]) and not set(b) <= set(a)

    def handed(secret: int) -> list:
        seen = []

        def catch_up_pairs(context, features, cached):
            seen.append((tuple(int(x) for x in context), len(features), cached))
            return broken.correct(context, features, cached)

        assert graded(catch_up_pairs, secret=secret).passed
        return seen

    for secret, cases in zip(SECRETS, (a, b), strict=True):
        assert {(c.context, c.m, c.cached) for c in cases} <= set(handed(secret))


def test_a_table_of_the_shown_cases_fails_the_random_ones_and_the_rounds():
    table = {(c.context, c.m, c.cached) for c in SHOWN}

    def catch_up_pairs(context, features, cached):
        if (tuple(int(x) for x in context), len(features), cached) in table:
            return broken.correct(context, features, cached)
        return np.zeros(0, dtype=np.int64), np.zeros((0, C), dtype=np.float32)

    for secret in SECRETS:
        failed = rejected(graded(catch_up_pairs, secret=secret))
        assert [r.check.name for r in failed] == ["eagle-pairs/random", "eagle-round/greedy"]
        story = failed[0].outcome.story[0]  # the smallest wrong case is one of this grading's
        assert any(story.endswith(c.describe()) for c in random_cases(secret))


@pytest.mark.parametrize("secret", SECRETS)
def test_the_random_cases_hold_every_kind_of_call(secret):
    cases = random_cases(secret)
    assert len(set(cases)) == len(cases) == N_RANDOM
    assert max(c.n for c in cases) <= 24
    r = [c.ready - c.cached for c in cases]
    assert any(c.n == 1 for c in cases)
    assert sum(c.m == c.n for c in cases) >= 50  # prefills
    assert any(c.m == c.n - 1 and c.cached == c.n - 1 and c.n > 1 for c in cases)  # nothing new
    assert any(x == 1 for x in r) and any(x >= 8 for x in r)
    assert any(c.m == c.n - 1 and c.cached == 0 and c.n > 2 for c in cases)
    for case in all_cases():  # the features name their positions: no two rows alike
        features = case.features()
        assert len({row.tobytes() for row in features}) == case.m
        assert features.dtype == np.float32 and len(set(case.context)) == case.n


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_every_catalogued_mistake_differs_from_the_contract_somewhere(mistake):
    name, rebuild, _ = mistake
    differs = False
    for case in all_cases():
        got = rebuilt(rebuild, case.arguments())
        if got is not None and not same(got, expected(case)):
            differs = True
            break
    assert differs, f"{name} is the contract on every case: its hint can never be given"


def test_grading_a_wrong_variant_is_quick():
    start = time.perf_counter()
    graded(broken.feature_one_behind)
    assert time.perf_counter() - start < 5
