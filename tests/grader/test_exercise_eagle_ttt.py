"""The training-time-test exercise's grader (specdec/grading/exercises/eagle_ttt/): the worked
solution passes, the untouched skeleton fails on its NotImplementedError, and each broken
variant (tests/grader/broken_eagle_ttt.py) is rejected by the families its mistake shows in,
each with the hint that names it.

The grader's own answers are tested too: its hand-written gradients (of the contract and of
every catalogued slip) equal central finite differences of its own loss, and equal torch's
autograd on a torch forward written here (the detached slip with torch's `detach`); a float32
computation meets its tolerances, and every slip misses them by far; the skeleton's worked
example is the solution's output."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from specdec.grading.engine.report import text_report
from specdec.grading.exercises import exercise
from specdec.grading.exercises.eagle_ttt.cases import EXAMPLE, SHOWN, fresh_cases
from specdec.grading.exercises.eagle_ttt.checks import eagle_ttt_families
from specdec.grading.exercises.eagle_ttt.mistakes import MISTAKES, SAME
from specdec.grading.exercises.eagle_ttt.model import (
    FED_TOL,
    GRAD_TOL,
    LOSS_TOL,
    PARAMS,
    Answer,
    Variant,
    grad_error,
    rule,
    same_grads,
    same_inputs,
    same_loss,
    unrolled,
)

from . import broken_eagle_ttt as broken
from .exercise_tests import (
    REPO,
    grader_for,
    not_passed,
    rejected,
    shows_its_mistake,
    the_skeleton_fails,
    the_solution_passes,
)

EAGLE_TTT = exercise("eagle_ttt")
CASES = SHOWN + fresh_cases(2026)  # the grader's cases under one secret
SOME = SHOWN + fresh_cases(2026)[:4]  # where a check is costly


graded = grader_for("eagle_ttt", eagle_ttt_families)


def test_the_solution_passes_and_is_recognised_by_its_name():
    the_solution_passes("eagle_ttt")


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = the_skeleton_fails("eagle_ttt")
    assert result.crash.call.startswith("training_time_test_step(C = 2, H = 2, V = 3, N = 4")


def test_the_catalogues_correct_variant_passes():
    result = graded(broken.correct)
    assert result.passed, not_passed(result)


# variant -> {family: words of its hint}; the other families pass
HINTS = {
    "teacher_forced": dict.fromkeys(
        ("ttt-inputs", "ttt-loss", "ttt-gradients"), "that is teacher forcing"
    ),
    "own_output_detached": {"ttt-gradients": "your gradients stop at the fed-back features"},
    "feature_regression_added": dict.fromkeys(("ttt-loss", "ttt-gradients"), "feature term"),
    "target_not_shifted": dict.fromkeys(("ttt-loss", "ttt-gradients"), "against p(t)"),
    "own_output_same_position": dict.fromkeys(
        ("ttt-inputs", "ttt-loss", "ttt-gradients"), "at the SAME position"
    ),
    "step_one_output_fed": dict.fromkeys(
        ("ttt-inputs", "ttt-loss", "ttt-gradients"), "every later step reads step 1's output"
    ),
    "loss_summed": dict.fromkeys(("ttt-loss", "ttt-gradients"), "a sum over rows and steps"),
    "one_pooled_mean": dict.fromkeys(("ttt-loss", "ttt-gradients"), "all (step, row) pairs"),
    "cross_entropy_loss": {"ttt-loss": "the cross-entropy"},
    # no catalogued slip fits: what differs, in words
    "tanh_slope_wrong": {"ttt-gradients": "wrong: grads of W, b, A; right: B"},
    "mean_forgotten_in_gradients": {"ttt-gradients": "the 1/s of the mean over steps"},
}


def test_every_broken_variant_has_an_expected_hint():
    made = {n for n, f in inspect.getmembers(broken, inspect.isfunction) if f.__doc__}
    assert set(HINTS) | {"grads_missing"} == made


@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_broken_variant_is_rejected_with_its_hint(name):
    result = graded(getattr(broken, name))
    rejected(result)
    for family in EAGLE_TTT.families:
        want = HINTS[name].get(family)
        assert result.family_status(family) == ("fail" if want else "pass"), family
        if want:
            (failed,) = [r for r in result.results if r.family == family and r.status == "fail"]
            assert failed.check.name == f"{family}/shown"  # the shown cases already show it
            shows_its_mistake(failed.outcome, want, "training_time_test_step")
    assert "FAIL  " in text_report(result)


def test_a_missing_part_fails_its_family_only_and_says_what_is_missing():
    result = graded(broken.grads_missing)
    assert [result.family_status(f) for f in EAGLE_TTT.families] == ["pass", "pass", "fail"]
    assert "has no key 'grads'" in str(result.crash.error)
    assert result.crash.where == "the value your training_time_test_step returned"


@pytest.mark.parametrize(
    "edit, words, family",
    [
        (lambda out: out | {"loss": float("nan")}, "loss holds non-finite", "ttt-loss"),
        (lambda out: out | {"fed": out["fed"][:, :-1]}, "fed has shape", "ttt-inputs"),
        (lambda out: out | {"sources": out["sources"] * 1.0}, "must hold integers", "ttt-inputs"),
        (
            lambda out: out | {"grads": {"W": out["grads"]["W"]}},
            "exactly the keys",
            "ttt-gradients",
        ),
        (lambda out: (out["loss"], out["grads"]), "must return a dict", "ttt-loss"),
    ],
)
def test_a_reply_that_breaks_the_contract_is_refused_with_why(edit, words, family):
    def edited(*args):
        return edit(broken.correct(*args))

    result = graded(edited)
    assert result.family_status(family) == "fail"
    assert words in str(result.crash.error), str(result.crash.error)


def test_lists_and_a_numpy_float_loss_are_accepted():
    def as_lists(*args):
        out = broken.correct(*args)
        return out | {"sources": out["sources"].tolist(), "loss": np.float64(out["loss"])}

    result = graded(as_lists)
    assert result.passed, not_passed(result)


def test_the_fresh_cases_are_drawn_from_the_secret():
    assert fresh_cases(1) == fresh_cases(1) and fresh_cases(1) != fresh_cases(2)
    assert all(1 <= c.steps <= c.N - 1 for c in CASES)
    assert sum(c.steps >= 2 for c in fresh_cases(1)) >= 8  # most unroll


# --------------------------------------------------------------------------------------------
# The grader's expectations
# --------------------------------------------------------------------------------------------


def loss_of(case, variant: Variant, params: dict) -> float:
    class Nudged:
        frozen, tokens, features, logp, steps = (
            case.frozen,
            case.tokens,
            case.features,
            case.logp,
            case.steps,
        )

    Nudged.params = params
    return unrolled(Nudged, variant).loss


def finite_differences(case, variant: Variant, eps: float = 1e-6) -> dict[str, np.ndarray]:
    out = {}
    for name in PARAMS:
        grad = np.zeros_like(case.params[name])
        for i in np.ndindex(grad.shape):
            up = {n: v.copy() for n, v in case.params.items()}
            down = {n: v.copy() for n, v in case.params.items()}
            up[name][i] += eps
            down[name][i] -= eps
            grad[i] = (loss_of(case, variant, up) - loss_of(case, variant, down)) / (2 * eps)
        out[name] = grad
    return out


DIFFERENTIABLE = [(n, v) for n, v, _ in MISTAKES if not v.detach] + [("contract", Variant())]


@pytest.mark.parametrize("name, variant", DIFFERENTIABLE, ids=[n for n, _ in DIFFERENTIABLE])
def test_the_graders_gradients_are_finite_differences_of_its_loss(name, variant):
    for case in (SHOWN[0], SHOWN[2], fresh_cases(2026)[0]):  # never at the smooth-L1 kink
        want = finite_differences(case, variant)
        got = unrolled(case, variant).grads
        for n in PARAMS:
            assert grad_error(got[n], want[n]) < 1e-6, (name, case, n)
            if name == "contract":  # what the skeleton tells students to expect
                assert np.abs(got[n] - want[n]).max() < 1e-9


def torch_answer(case, detach: bool = False, dtype=None) -> Answer:
    """The contract written in torch, differentiated by autograd (detach: the fed-back
    outputs detached, torch's way)."""
    torch = pytest.importorskip("torch")
    dtype = dtype or torch.float64
    P = {n: torch.tensor(case.params[n], dtype=dtype, requires_grad=True) for n in PARAMS}
    embed, head = (torch.tensor(case.frozen[n], dtype=dtype) for n in ("embed", "head"))
    f, logp = torch.tensor(case.features, dtype=dtype), torch.tensor(case.logp, dtype=dtype)
    x = torch.tensor(case.tokens)
    N, s = len(x), case.steps
    fed = torch.zeros(s, N - 1, f.shape[1], dtype=dtype)
    loss, h = 0, None
    for j in range(1, s + 1):
        t = torch.arange(j - 1, N - 1)
        u = f[t] if j == 1 else (h[:-1].detach() if detach else h[:-1])
        fed[j - 1, t] = u.detach()
        g = torch.cat([embed[x[t + 1]], u], 1) @ P["W"] + P["b"]
        h = g + torch.tanh(g @ P["A"]) @ P["B"]
        logq = torch.log_softmax(h @ head, -1)
        p = logp[t + 1]
        loss = loss + (p.exp() * (p - logq)).sum(-1).mean() / s
    loss.backward()
    grads = {n: P[n].grad.double().numpy() for n in PARAMS}
    return Answer(rule(case).sources, fed.double().numpy(), float(loss.detach()), grads)


@pytest.mark.parametrize("detach", [False, True], ids=["through", "detached"])
def test_the_graders_answers_are_torch_autograds(detach):
    for case in SOME:
        want = torch_answer(case, detach)
        got = unrolled(case, Variant(detach=detach))
        assert same_inputs(got, want) and abs(got.loss - want.loss) < 1e-12
        for n in PARAMS:
            assert grad_error(got.grads[n], want.grads[n]) < 1e-10, (case, n)


def test_a_float32_computation_meets_the_tolerances():
    torch = pytest.importorskip("torch")
    for case in SOME:
        got, want = torch_answer(case, dtype=torch.float32), rule(case)
        assert same_inputs(got, want) and same_loss(got, want) and same_grads(got, want), case
        worst = max(grad_error(got.grads[n], want.grads[n]) for n in PARAMS)
        assert worst < GRAD_TOL / 10 and abs(got.loss / want.loss - 1) < LOSS_TOL / 10


def distance(family: str, got: Answer, want: Answer) -> float:
    # how far a part is from the contract's, in units of its tolerance
    if family == "ttt-inputs":
        if not np.array_equal(got.sources, want.sources):
            return np.inf
        return np.abs(got.fed - want.fed).max() / max(1.0, np.abs(want.fed).max()) / FED_TOL
    if family == "ttt-loss":
        return abs(got.loss - want.loss) / abs(want.loss) / LOSS_TOL
    return max(grad_error(got.grads[n], want.grads[n]) for n in PARAMS) / GRAD_TOL


@pytest.mark.parametrize("name, variant", [(n, v) for n, v, _ in MISTAKES])
def test_every_slip_is_far_outside_the_tolerance_or_the_same(name, variant):
    # where a slip differs from the contract, it differs by far more than the tolerance (ten
    # times it, where a float32 computation errs by under a tenth of it: no near miss to blur),
    # and it differs on some shown case
    shown = []
    for case in CASES:
        got, want = unrolled(case, variant), rule(case)
        for family in SAME:
            d = distance(family, got, want)
            assert d < 1e-6 or d > 10, (name, family, case, d)
            shown.append(case.label == "shown" and d > 10)
    assert any(shown), name


def test_the_skeletons_worked_example_is_the_solutions_output():
    text = (REPO / EAGLE_TTT.skeleton_path).read_text()
    want = rule(EXAMPLE)
    assert f"loss = {want.loss:.6f}" in text
    assert f'grads["b"] = [{want.grads["b"][0]:.4f}, {want.grads["b"][1]:.4f}]' in text
    detached = unrolled(EXAMPLE, Variant(detach=True)).grads["b"]
    assert f"would be [{detached[0]:.4f}, {detached[1]:.4f}]" in text
    assert f"the loss would be {unrolled(EXAMPLE, Variant(feed='true')).loss:.6f}" in text
    rows = ", ".join(f"[{a:.4f}, {b:.4f}]" for a, b in want.outs[1])
    assert f"t = 0, 1, 2: {rows}" in re.sub(r"\s+", " ", text)
    for name, value in EXAMPLE.params.items():
        assert f"{name} = {value.tolist()}" in text
