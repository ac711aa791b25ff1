"""The training-time-test exercise's known mistakes: each is a `Variant` of the contract's
computation (model.py) that a usual slip gives (every step fed the true feature, the own output
fed at the wrong position or from the wrong step, the fed-back outputs detached, a feature
regression added, the target one position off, a sum for a mean, ...), with the hint that names
it in the student's terms. A mistake is named for a family only when its rebuilt answer gives
the submission's part (inputs, loss or gradients) on every case the submission gets wrong."""

from __future__ import annotations

import numpy as np

from specdec.grading.exercises.eagle_ttt.model import (
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

SAME = {"ttt-inputs": same_inputs, "ttt-loss": same_loss, "ttt-gradients": same_grads}

TEACHER = (
    "every step reads the true feature f(t): that is teacher forcing (EAGLE-1's training), not "
    "a training-time test. When it drafts, the drafter has no true feature for the positions "
    "it guesses: from the second draft on it reads its own output. Step j >= 2 must read what "
    "step j - 1 produced, so that training sees (and closes) the gap between the true features "
    "and its own"
)
SAME_POSITION = (
    "step j at position t reads h_(j-1)(t), the previous step's output at the SAME position. "
    "That output is the drafter's guess of f(t + 1) (it was scored against p(t + 1)); the row "
    "at position t needs a stand-in for f(t), which is the previous step's output one position "
    "back, at t - 1 (step 1 there read f(t - 1) and x(t) and guessed f(t))"
)
FIRST_STEP = (
    "every later step reads step 1's output: step 3 must read step 2's output (at t - 1), not "
    "step 1's. Unrolling feeds each step what the step just before produced, as drafting does: "
    "the third draft is made from the second draft's feature"
)
DETACHED = (
    "your inputs and loss are right but your gradients stop at the fed-back features: you "
    "treat the outputs that step j reads from step j - 1 as constants (a detach, a "
    "stop-gradient). The contract lets the gradient flow through them (as "
    "specdec/training/train_eagle.py does): the loss of step j also depends on the parameters "
    "through the feature step j - 1 made, and that dependence is what training-time test "
    "trains. Carry d loss / d u of each row back to the row of step j - 1 that produced u"
)
REGRESSION = (
    "your loss has a feature term: you also pull the block's output towards the true next "
    "feature f(t + 1). That is EAGLE-1's regression; EAGLE-3 drops it (its output is a hidden "
    "state the next step reads, free to be whatever predicts tokens best). The loss is the "
    "token divergence only, KL(p || q)"
)
NOT_SHIFTED = (
    "you score the row at position t against p(t) = target_logp[t]. That row read x(t + 1), the "
    "token p(t) is the distribution of: it is already known. The block's output at t guesses "
    "f(t + 1), whose head predicts x(t + 2): score it against p(t + 1) = target_logp[t + 1]"
)
SUMMED = (
    "your loss is a sum over rows and steps, not the mean the contract asks for: average the "
    "KL over each step's rows, then average the steps' means"
)
POOLED = (
    "your loss averages all (step, row) pairs at once; the contract averages each step's rows "
    "first, then the steps. They differ because step j scores fewer rows (N - j) than step 1 "
    "(N - 1): the contract gives every step the same weight, whatever its number of rows"
)
STEPS_SUMMED = (
    "your loss sums the steps' means instead of averaging them: divide by the number of steps"
)
DECAYED = (
    "your loss weights step j by 0.8^(j - 1) and sums the steps, as EAGLE-3's released training "
    "does; this contract (like specdec/training/train_eagle.py) averages the steps' means, each "
    "step weighing the same"
)
CROSS_ENTROPY = (
    "your loss is the cross-entropy -sum p log q, not KL(p || q) = sum p (log p - log q): they "
    "differ by the entropy of p, a constant (so your gradients are right; EAGLE-3's released "
    "code minimises the cross-entropy for that reason). The contract's loss is the KL, as "
    "specdec/training/train_eagle.py reports it: 0 when q = p"
)
REVERSE = (
    "your loss is KL(q || p), the divergence the other way round; the contract's is "
    "KL(p || q) = sum p (log p - log q), p the target's distribution (the one that weights)"
)

# (name, variant, hint)
MISTAKES: list[tuple[str, Variant, str]] = [
    ("teacher-forced", Variant(feed="true"), TEACHER),
    ("same-position", Variant(feed="same"), SAME_POSITION),
    ("first-step-output", Variant(feed="first"), FIRST_STEP),
    ("detached", Variant(detach=True), DETACHED),
    ("smooth-l1-regression", Variant(regression="smooth-l1"), REGRESSION),
    ("mse-regression", Variant(regression="mse"), REGRESSION),
    ("half-mse-regression", Variant(regression="half-mse"), REGRESSION),
    ("target-not-shifted", Variant(shift=0), NOT_SHIFTED),
    ("summed", Variant(reduce="sum"), SUMMED),
    ("pooled-mean", Variant(reduce="pooled"), POOLED),
    ("steps-summed", Variant(reduce="sum-steps"), STEPS_SUMMED),
    ("released-step-weights", Variant(reduce="decay"), DECAYED),
    ("cross-entropy", Variant(divergence="ce"), CROSS_ENTROPY),
    ("reverse-kl", Variant(divergence="reverse"), REVERSE),
]


def rebuilt(case, variant: Variant) -> Answer | None:
    # the mistake's answer on this case, or None where the slip itself would fail (its
    # target index runs past the window)
    try:
        return unrolled(case, variant)
    except IndexError:
        return None


def fitting(family: str, wrong: list[tuple]) -> str:
    """The hint of the first mistake that gives the submission's part of `family` on every
    wrong case [(case, Answer)], or ''."""
    for _, variant, hint in MISTAKES:
        if all(fits(family, got, rebuilt(c, variant)) for c, got in wrong):
            return hint
    return ""


def fits(family: str, got: Answer, mistake: Answer | None) -> bool:
    # the mistake gives the submission's part; for the gradients, its loss too where the
    # submission returned one (gradients that are a slip's, beside a loss that is not, are
    # no sign of that slip: a scale lost in the backward pass only looks like a summed loss)
    if mistake is None or not SAME[family](got, mistake):
        return False
    return family != "ttt-gradients" or got.loss is None or same_loss(got, mistake)


# --------------------------------------------------------------------------------------------
# When no catalogued mistake fits: what differs, in words
# --------------------------------------------------------------------------------------------


def row_name(case, want: Answer, row: np.ndarray) -> str:
    """What a fed row is: f(t'), the contract's h_i(t'), zeros, or none of them."""
    if not np.any(row):
        return "zeros"
    scale = max(1.0, float(np.abs(row).max()))
    for t in range(case.N):
        if np.abs(case.features[t] - row).max() <= 1e-5 * scale:
            return f"the true feature f({t})"
    for i in range(1, case.steps + 1):
        for t in range(i - 1, case.N - 1):
            if np.abs(want.outs[i][t] - row).max() <= 1e-5 * scale:
                return f"step {i}'s output at position {t}"
    return "a row that is none of the true features nor the contract's step outputs"


def source_words(case, j: int, t: int, source: int) -> str:
    if source == -1:
        return "no row (step j does not run there)"
    return "the true feature f(t)" if source == 0 else f"step {source}'s output"


def inputs_hint(case, got: Answer) -> str:
    want = rule(case)
    if not np.array_equal(got.sources, want.sources):
        j, t = (int(v) for v in np.argwhere(got.sources != want.sources)[0])
        return (
            f"sources[{j}, {t}] (step {j + 1}, position {t}) should say "
            f"{source_words(case, j + 1, t, int(want.sources[j, t]))} ({want.sources[j, t]}), "
            f"yours says {int(got.sources[j, t])}. Step 1 runs at every position t = 0..N-2 "
            f"and reads the truth; step j reads its own step j - 1 and runs where that step has "
            f"a row to hand it; -1 marks the positions a step does not reach"
        )
    scale = max(1.0, float(np.abs(want.fed).max()))
    bad = np.argwhere(np.abs(got.fed - want.fed).max(axis=2) > 1e-5 * scale)
    j, t = (int(v) for v in bad[0])
    return (
        f"step {j + 1} at position {t} should read {row_name(case, want, want.fed[j, t])}; "
        f"yours read {row_name(case, want, got.fed[j, t])}"
    )


def loss_hint(case, got: Answer) -> str:
    want = rule(case)
    ratio = got.loss / want.loss
    for k, words in ((case.steps, "the number of steps"), (case.N - 1, "N - 1")):
        if k > 1 and abs(ratio - k) < 1e-4 * k:
            return f"your loss is the contract's times {k}, {words}: a sum where a mean is due"
    return (
        "the loss is the mean over the s steps of each step's mean over its rows of "
        "KL(p(t + 1) || q_j(t)), nothing added; check each step's rows and which p each is "
        "scored against"
    )


def gradients_hint(case, got: Answer) -> str:
    want = rule(case)
    a = np.concatenate([got.grads[n].ravel() for n in PARAMS])
    b = np.concatenate([want.grads[n].ravel() for n in PARAMS])
    c = float(a @ b / (b @ b))
    if abs(c - 1) > 1e-3 and np.abs(a - c * b).max() <= 1e-4 * np.abs(b).max():
        if abs(c - case.steps) < 1e-3 * case.steps or abs(c * case.steps - 1) < 1e-3:
            return (
                f"your gradients are the contract's times {c:.4g}, here s = {case.steps} steps: "
                f"the 1/s of the mean over steps is handled differently in your loss and in "
                f"your gradients (the loss is right; a mean's gradient carries its 1/count)"
            )
        return (
            f"your gradients are the contract's times {c:.4g}: a scale is missing or doubled "
            f"(the loss averages over the steps and over each step's rows; the gradient of a "
            f"mean carries the same 1/count)"
        )
    wrong = [n for n in PARAMS if grad_error(got.grads[n], want.grads[n]) > 1e-4]
    return (
        f"wrong: grads of {', '.join(wrong)}; right: "
        f"{', '.join(n for n in PARAMS if n not in wrong) or 'none'}. Check each against finite "
        f"differences of your own loss ((L(theta + eps) - L(theta - eps)) / 2 eps, one entry at "
        f"a time, eps about 1e-6): a gradient that disagrees with its own loss is a slip in the "
        f"backward pass"
    )


GENERIC = {"ttt-inputs": inputs_hint, "ttt-loss": loss_hint, "ttt-gradients": gradients_hint}
