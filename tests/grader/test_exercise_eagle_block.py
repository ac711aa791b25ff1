"""The EAGLE block exercise's grader (specdec/grading/exercises/eagle_block/): the worked
solution passes, the untouched skeleton fails on its NotImplementedError, and each broken
variant (tests/grader/broken_eagle_block.py) is rejected by the check its mistake first shows
in and by the round inside a real drafter, each with the hint that names it.

The grader's own expectations are tested too: its float64 rule is the reference's
EagleDrafter (fuse, then the block from an empty cache) on every case, to far less than the
tolerance; at every step of a real drafter's run the rule over the drafter's history gives the
rows its block computed from its cache; every catalogued mistake is at least ten tolerances
away from the rule on some shown case (so each hint can be reached, and no correct float32
forward is mistaken for one); the fresh cases come from the grading's secret; and the
skeleton's worked example is the rule's answer."""

from __future__ import annotations

import importlib.util
import time
from dataclasses import replace

import numpy as np
import pytest

from reference.config import GPTConfig
from reference.eagle import EagleDrafter
from reference.model import GPT, init_params
from specdec.grading.engine.report import text_report
from specdec.grading.engine.secret import secret_held
from specdec.grading.exercises import exercise
from specdec.grading.exercises.eagle_block.cases import (
    GROUPS,
    all_cases,
    fresh_cases,
    param_shapes,
)
from specdec.grading.exercises.eagle_block.checks import eagle_block_families
from specdec.grading.exercises.eagle_block.mistakes import MISTAKES, fitting
from specdec.grading.exercises.eagle_block.round import reference_run, round_cases
from specdec.grading.exercises.eagle_block.rule import (
    TARGET,
    TOL,
    Slip,
    forward,
    gap,
    rule,
)

from . import broken_eagle_block as broken
from .exercise_tests import (
    REPO,
    grader_for,
    not_passed,
    rejected,
    shows_its_mistake,
    the_skeleton_fails,
    the_solution_passes,
)

EAGLE_BLOCK = exercise("eagle_block")
SECRETS = (1, 2)  # the fresh cases and runs of two gradings
graded_in_process = grader_for("eagle_block", eagle_block_families)


def graded(function, secret: int = 1):
    with secret_held(secret):
        return graded_in_process(function)


def test_the_solution_passes_and_is_recognised_by_its_name():
    result = the_solution_passes("eagle_block")
    assert result.seconds < 10  # ~0.3 s measured


def test_the_correct_variant_of_the_catalogue_passes():
    result = graded(broken.correct, SECRETS[1])
    assert result.passed, not_passed(result)


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = the_skeleton_fails("eagle_block")
    assert result.crash.call.startswith("eagle_block_forward(tokens=[")


# variant -> (the eagle-block check that rejects it first, words of its hint, whether the
# round inside a real drafter rejects it too, with the same hint)
HINTS = {
    "fusion_swapped": ("eagle-block/one", "your fused row reads the feature first", True),
    "position_embedding_added": ("eagle-block/one", "you add position embeddings (wpe)", True),
    "feature_normed": ("eagle-block/one", "through the target's ln_f before the fusion", True),
    "output_normed": ("eagle-block/one", "ln_f to the block's output", True),
    "no_causal_mask": ("eagle-block/causal", "every row attends to all T positions", True),
    "mask_zeroed": ("eagle-block/causal", "exp(0) = 1 still gives them weight", True),
    "heads_reshaped": ("eagle-block/heads", "your heads mix positions", True),
    "scaled_by_width": ("eagle-block/heads", "you scale the scores by 1/sqrt(C)", True),
    "attention_residual_forgotten": ("eagle-block/one", "the attention's output replaces", True),
    "mlp_residual_forgotten": ("eagle-block/one", "the MLP's output replaces", True),
    "post_norm": ("eagle-block/one", "you normalise after each residual add", True),
    "relu_for_gelu": ("eagle-block/one", "your MLP's activation is ReLU", True),
    # rows of a normal spread hide epsilon: only the quiet rows show it
    "eps_outside_sqrt": ("eagle-block/quiet", "adds epsilon outside the square root", False),
    "eps_missing": ("eagle-block/quiet", "your LayerNorm has no epsilon", False),
    # no catalogued mistake fits: where the first wrong answer differs
    "two_slips": ("eagle-block/one", "even a single position differs", True),
    "rows_transposed": ("eagle-block/one", "shape [T, C] = [1, 4], not [4, 1]", True),
}
ROUND_WORDS = {
    "two_slips": "row 0 already differs",
    "rows_transposed": "one output row per position, shape [T, C] = [",  # T: the prefill's
}


def test_every_broken_variant_has_an_expected_hint():
    assert set(HINTS) == set(broken.VARIANTS)


@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_broken_variant_is_rejected_with_its_hint(name):
    result = graded(broken.VARIANTS[name])
    check, words, in_round = HINTS[name]
    failed = rejected(result)
    assert [r.check.name for r in failed] == [check] + ["eagle-block-round/greedy"] * in_round
    shows_its_mistake(failed[0].outcome, words, "eagle_block_forward")
    report = text_report(result)
    assert "FAIL  eagle-block:" in report
    if in_round:
        round_words = ROUND_WORDS.get(name, words)
        assert round_words in failed[1].outcome.hint, failed[1].outcome.hint
        assert "FAIL  eagle-block-round:" in report
    else:
        assert result.family_status("eagle-block-round") == "pass"


def test_the_rounds_story_shows_the_step_and_the_drafts_it_would_change():
    def wrong_on_long_histories(tokens, features, params, n_head):
        # right on up to 6 rows (every case of the first groups, and a run's prefill), wrong
        # beyond: the run first shows it at a step of a proposal
        out = broken.correct(tokens, features, params, n_head)
        return out if len(tokens) <= 6 else -out

    result = graded(wrong_on_long_histories)
    (in_round,) = [r for r in result.results if r.check.name == "eagle-block-round/greedy"]
    story = "\n".join(in_round.outcome.story)
    assert "against the block's (run from its cache)" in story
    assert "the drafter drafted" in story and "their likeliest tokens" in story


def test_a_submission_that_answers_the_shown_cases_from_a_table_fails_the_fresh_ones():
    table = {
        case.arguments()[0].tobytes() + case.arguments()[1].tobytes(): rule(*case.arguments())
        for group in GROUPS.values()
        for case in group[1]
    }

    def from_table(tokens, features, params, n_head):
        key = tokens.tobytes() + features.tobytes()
        return table.get(key, np.zeros_like(features))

    result = graded(from_table)
    failed = [r.check.name for r in result.results if r.status == "fail"]
    assert failed == ["eagle-block/fresh", "eagle-block-round/greedy"]


def test_an_answer_that_is_not_numbers_breaks_the_contract():
    def words(tokens, features, params, n_head):
        return "the next feature"

    result = graded(words)
    assert not result.passed
    assert "must return numbers" in str(result.crash.error)
    assert result.crash.where == "the value your eagle_block_forward returned"


def test_lists_and_float64_rows_are_accepted_and_nan_rows_are_wrong():
    def as_lists(tokens, features, params, n_head):
        return broken.correct(tokens, features, params, n_head).astype(np.float64).tolist()

    assert graded(as_lists).passed

    def with_nan(tokens, features, params, n_head):
        out = broken.correct(tokens, features, params, n_head)
        out[-1, 0] = np.nan
        return out

    result = graded(with_nan)
    (first,) = [r for r in result.results if r.check.name == "eagle-block/one"]
    assert first.status == "fail" and "not finite" in first.outcome.hint


def test_grading_a_wrong_variant_is_quick():
    start = time.perf_counter()
    graded(broken.no_causal_mask)
    assert time.perf_counter() - start < 5


# --------------------------------------------------------------------------------------------
# The grader's expectations
# --------------------------------------------------------------------------------------------


def reference_rows(tokens, features, params, n_head) -> np.ndarray:
    # the reference's EagleDrafter on these params: fuse, then its block from an empty cache
    V, C = params["wte.weight"].shape
    n_ctx = params["wpe.weight"].shape[0]
    cfg = GPTConfig(n_vocab=V, n_ctx=n_ctx, n_embd=C, n_head=n_head, n_layer=1)
    target_params = init_params(cfg, np.random.default_rng(0)) | {n: params[n] for n in TARGET}
    drafter = EagleDrafter(
        GPT(cfg, target_params), {n: v for n, v in params.items() if n not in TARGET}
    )
    return drafter.step(drafter.fuse(tokens, features))


def every_case() -> list:
    cases = list(all_cases())
    for secret in SECRETS:
        cases += fresh_cases(secret)
    return cases


def test_the_rule_is_the_reference_eagle_drafters_block():
    worst = max(gap(reference_rows(*c.arguments()), rule(*c.arguments())) for c in every_case())
    assert worst < TOL / 100, worst


def test_at_every_step_of_a_run_the_rule_over_the_history_is_the_cached_block():
    for secret in SECRETS:
        catch_ups = []
        for case in round_cases(secret):
            replay = reference_run(case, secret)
            steps = replay.run.steps
            for call, step in zip(replay.calls(), steps, strict=True):
                assert gap(rule(*call)[step.start :], step.rows) < TOL / 100, step.label
            # each run holds a prefill, catch-ups after cached slots, and draft steps fed
            # the drafter's own features
            assert steps[0].label == "prefill" and steps[0].start == 0
            catch_ups += [len(s.tokens) - s.start for s in steps if "catch-up" in s.label]
            assert any(s.own for s in steps) and len(replay.run.proposals) >= 4
        # catch-ups of one row (no draft kept) and of several (drafts kept)
        assert 1 in catch_ups and max(catch_ups) > 1, catch_ups


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_every_catalogued_mistake_is_far_from_the_rule_on_a_shown_case(mistake):
    name, slip, _ = mistake
    shown = [c for _, cases in GROUPS.values() for c in cases]
    far = max(gap(forward(*c.arguments(), slip=slip), rule(*c.arguments())) for c in shown)
    assert far > 10 * TOL, f"{name} is within {far:.1e} of the rule on every shown case"


def test_each_catalogued_mistake_names_itself():
    # on every case it is wrong, a mistake's own answers are named by its own hint
    for name, slip, hint in MISTAKES:
        wrong = [
            (c.arguments(), got)
            for c in all_cases()
            if gap(got := forward(*c.arguments(), slip=slip), rule(*c.arguments())) > TOL
        ]
        assert fitting(wrong) == hint, name


def test_the_exact_gelu_is_within_the_tolerance():
    erf = Slip(gelu="erf")
    worst = max(gap(forward(*c.arguments(), slip=erf), rule(*c.arguments())) for c in every_case())
    assert worst < TOL / 2, worst


def test_the_fresh_cases_come_from_the_secret_and_cover_the_shapes():
    a, b = (fresh_cases(s) for s in SECRETS)
    assert a == fresh_cases(SECRETS[0]) and a != b
    for cases in (a, b):
        assert {c.T for c in cases} > {1, 2} and max(c.T for c in cases) >= 8
        assert {c.n_head for c in cases} > {1} and any(c.quiet for c in cases)
        assert all(c.C % c.n_head == 0 for c in cases)
    assert round_cases(SECRETS[0]) != round_cases(SECRETS[1])


def load_skeleton():
    path = REPO / EAGLE_BLOCK.skeleton_path
    spec = importlib.util.spec_from_file_location("skeleton_eagle_block", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_skeletons_worked_example_is_the_rules_answer():
    skeleton = load_skeleton()
    tokens, features, params, n_head = skeleton.example()
    V, C = params["wte.weight"].shape
    want = param_shapes(V, C, len(params["wpe.weight"]))
    assert {n: v.shape for n, v in params.items()} == want
    rows = rule(tokens, features, params, n_head)
    assert np.abs(rows - np.array(skeleton.EXAMPLE_ROWS)).max() < 1e-4
    text = (REPO / EAGLE_BLOCK.skeleton_path).read_text()
    for row in skeleton.EXAMPLE_ROWS:  # the docstring shows the same rows
        assert str(row) in text
    # the example shows what it claims: several heads, rows that read earlier ones
    one_row = rule(tokens[:1], features[:1], params, n_head)
    assert n_head > 1 and np.allclose(one_row, rows[:1])
    no_mask = forward(tokens, features, params, n_head, replace(Slip(), mask="none"))
    assert gap(no_mask, rows) > 10 * TOL
