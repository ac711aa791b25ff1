"""The tiny EAGLE drafter of the training-time-test exercise, unrolled, with its loss and its
gradients written out by hand: the contract's answer, and the answers of the usual slips.

The drafter (notebooks/exercises/my_eagle_ttt.py states it for the student):

    g = [e(x(t + 1)); u] W + b        u: the feature the step reads at position t
    h = g + tanh(g A) B               position-wise (no attention): one row in, one row out
    log q = log_softmax(h H)          H, e: frozen (the head and the embedding)

Step 1 at position t (t = 0..N-2) reads the true feature u = f(t); step j >= 2 at position t
(t = j-1..N-2) reads u = h_{j-1}(t - 1), its own output of step j - 1 one position back, which
stands where f(t) would. Every step's row at t is scored against p(t + 1), the target's
distribution of x(t + 2). The loss is the mean over steps of the mean over that step's rows of
KL(p || q); no feature regression (EAGLE-3), and gradients flow through the fed-back outputs
(specdec/training/train_eagle.py's `unroll` does not detach them, nor does EAGLE-3's released
training, SafeAILab/EAGLE eagle/traineagle3/: its cnets.py feeds each step's output back as it
is; it minimises the cross-entropy, with the same gradients, and its main.py weights step j by
0.8^(j-1): both catalogued as slips here, the contract being train_eagle.py's).

`Variant` describes one way to compute it; `Variant()` is the contract, the others are the
slips that mistakes.py names. Every number is float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

PARAMS = ("W", "b", "A", "B")  # the trained parameters, in the order the reports list them
FROZEN = ("embed", "head")


@dataclass(frozen=True)
class Variant:
    feed: str = "own"  # step j >= 2 reads: "own" h_{j-1}(t-1); "true" f(t) (teacher forcing);
    # "same" h_{j-1}(t) (no shift); "first" h_1(t-1) (step 1's output at every step)
    detach: bool = False  # the fed-back outputs treated as constants (stop-gradient)
    shift: int = 1  # the row at t is scored against p(t + shift)
    reduce: str = "mean"  # "mean": mean over steps of each step's mean; "sum": everything
    # summed; "pooled": one mean over all (step, row) pairs; "sum-steps": steps' means summed;
    # "decay": step j's mean weighted 0.8^(j-1), summed (EAGLE-3's released training)
    divergence: str = "kl"  # "kl": KL(p || q); "ce": cross-entropy -sum p log q; "reverse":
    # KL(q || p)
    regression: str = ""  # "", or a feature loss added: "smooth-l1", "mse", "half-mse" of
    # h_j(t) against f(t + 1), each a mean over steps of the mean over rows and entries


@dataclass
class Answer:
    sources: np.ndarray  # [s, N-1] int: -1 no row, 0 the true feature, i >= 1 step i's output
    fed: np.ndarray  # [s, N-1, C] the feature each row read (zeros where no row)
    loss: float
    grads: dict[str, np.ndarray]  # PARAMS -> arrays of the parameters' shapes
    outs: list | None = None  # outs[j][t] = h_j(t), the step outputs (the grader's own only)


def rows_of(j: int, N: int) -> np.ndarray:
    # the positions step j scores: t = j - 1 .. N - 2 (step j >= 2 needs a step j - 1 row at t - 1)
    return np.arange(j - 1, N - 1)


def source_of(j: int, t: np.ndarray, feed: str) -> tuple[int, np.ndarray]:
    # (the step whose output the rows read, 0 = the true features; at which positions)
    if j == 1 or feed == "true":
        return 0, t
    if feed == "same":
        return j - 1, t
    if feed == "first":
        return 1, t - 1
    return j - 1, t - 1


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def row_weights(n_rows: list[int], reduce: str) -> list[float]:
    # the weight of one row's divergence in the loss, per step
    s = len(n_rows)
    if reduce == "sum":
        return [1.0] * s
    if reduce == "pooled":
        return [1.0 / sum(n_rows)] * s
    if reduce == "sum-steps":
        return [1.0 / n for n in n_rows]
    if reduce == "decay":  # EAGLE-3's released training: step j's mean weighted 0.8^(j-1), summed
        return [0.8**j / n for j, n in enumerate(n_rows)]
    return [1.0 / (s * n) for n in n_rows]


def divergence(logp: np.ndarray, logq: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    # [r, V] x2 -> (the divergence of each row [r], its gradient in the logits [r, V])
    p, q = np.exp(logp), np.exp(logq)
    if kind == "reverse":
        d = q * (logq - logp)
        value = d.sum(axis=1)
        return value, d - q * value[:, None]
    value = -(p * logq).sum(axis=1)
    if kind == "kl":
        value = value + (p * logp).sum(axis=1)
    return value, q - p


def regression(h: np.ndarray, f: np.ndarray, kind: str) -> tuple[float, np.ndarray]:
    # the feature loss of rows h against the true next features f: (mean, its gradient in h)
    d = h - f
    if kind == "smooth-l1":
        small = np.abs(d) < 1.0
        value = np.where(small, 0.5 * d * d, np.abs(d) - 0.5)
        return float(value.mean()), np.where(small, d, np.sign(d)) / d.size
    scale = 0.5 if kind == "half-mse" else 1.0
    return float(scale * (d * d).mean()), 2 * scale * d / d.size


def unrolled(case, variant: Variant = Variant()) -> Answer:
    """The answer `variant` gives on `case` (cases.Case: params, frozen, tokens, features,
    logp, steps), the forward step by step and then back through every step."""
    P = {n: np.asarray(case.params[n], dtype=np.float64) for n in PARAMS}
    E, head = case.frozen["embed"], case.frozen["head"]
    f, logp, x, s = case.features, case.logp, case.tokens, case.steps
    N, C = f.shape
    sources = np.full((s, N - 1), -1, dtype=np.int64)
    fed = np.zeros((s, N - 1, C))
    outs = [np.zeros((N - 1, C)) for _ in range(s + 1)]  # outs[j][t] = h_j(t) where it runs
    saved, n_rows = [], [len(rows_of(j, N)) for j in range(1, s + 1)]
    weights = row_weights(n_rows, variant.reduce)
    loss = 0.0
    for j in range(1, s + 1):
        t = rows_of(j, N)
        src, at = source_of(j, t, variant.feed)
        u = f[at] if src == 0 else outs[src][at]
        sources[j - 1, t], fed[j - 1, t] = src, u
        inp = np.concatenate([E[x[t + 1]], u], axis=1)
        g = inp @ P["W"] + P["b"]
        z = np.tanh(g @ P["A"])
        h = g + z @ P["B"]
        outs[j][t] = h
        value, dlogits = divergence(
            logp[t + variant.shift], log_softmax(h @ head), variant.divergence
        )
        loss += weights[j - 1] * float(value.sum())
        dh = weights[j - 1] * dlogits @ head.T
        if variant.regression:
            r, dr = regression(h, f[t + 1], variant.regression)
            loss, dh = loss + r / s, dh + dr / s
        saved.append((t, src, at, inp, g, z, dh))
    grads = {n: np.zeros_like(v) for n, v in P.items()}
    dout = [np.zeros((N - 1, C)) for _ in range(s + 1)]  # d loss / d h_j(t), from later steps
    for j in range(s, 0, -1):
        t, src, at, inp, g, z, dh = saved[j - 1]
        dh = dh + dout[j][t]
        grads["B"] += z.T @ dh
        da = (dh @ P["B"].T) * (1.0 - z * z)
        grads["A"] += g.T @ da
        dg = dh + da @ P["A"].T
        grads["W"] += inp.T @ dg
        grads["b"] += dg.sum(axis=0)
        if src > 0 and not variant.detach:
            np.add.at(dout[src], at, (dg @ P["W"].T)[:, C:])
    return Answer(sources, fed, loss, grads, outs)


@cache
def rule(case) -> Answer:
    """The contract's answer (cached: the cases are frozen; nothing changes an Answer)."""
    return unrolled(case)


# what counts as the same answer: float64 here, a float32 computation passes (the tests hold
# it), the smallest catalogued slip differs by far more (the tests hold that too)
FED_TOL = 1e-5  # |fed - want| <= FED_TOL * max(1, max |want|)
LOSS_TOL = 1e-5  # |loss - want| <= LOSS_TOL * |want|
GRAD_TOL = 1e-4  # per parameter, max |grad - want| <= GRAD_TOL * max |want|


def same_inputs(got: Answer, want: Answer) -> bool:
    if got.sources is None or got.fed is None:
        return False
    scale = max(1.0, float(np.abs(want.fed).max()))
    return bool(
        np.array_equal(got.sources, want.sources)
        and np.abs(got.fed - want.fed).max() <= FED_TOL * scale
    )


def same_loss(got: Answer, want: Answer) -> bool:
    return got.loss is not None and abs(got.loss - want.loss) <= LOSS_TOL * abs(want.loss)


def grad_error(got: np.ndarray, want: np.ndarray) -> float:
    # max |got - want| relative to the largest entry of want
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-300))


def same_grads(got: Answer, want: Answer) -> bool:
    return got.grads is not None and all(
        grad_error(got.grads[n], want.grads[n]) <= GRAD_TOL for n in PARAMS
    )
