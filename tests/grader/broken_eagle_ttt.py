"""Broken submissions of the training-time-test exercise,
`training_time_test_step(params, frozen, tokens, features, target_logp, steps) -> dict`
(notebooks/exercises/my_eagle_ttt.py), each one small mistake a student makes on top of a
correct function, to test that the grader rejects it and that its hint names the mistake.

`ttt` is the worked solution written out again with a switch per slip (independently of the
grader's model.py, which rebuilds the slips its own way); each broken function turns one on."""

from __future__ import annotations

import numpy as np


def ttt(
    params,
    frozen,
    tokens,
    features,
    target_logp,
    steps,
    feed="own",  # "own", "true" (teacher forcing), "same" (no shift), "first" (step 1's)
    detach=False,
    shift=1,
    reduce="mean",  # "mean", "sum", "pooled"
    cross_entropy=False,
    regression=False,  # smooth-L1 of h against f(t + 1) added
    tanh_slope=False,  # the tanh's derivative written 1 - z
    grad_scale=1.0,
):
    W, b, A, B = (np.asarray(params[n], dtype=np.float64) for n in ("W", "b", "A", "B"))
    embed, head = frozen["embed"], frozen["head"]
    N, C = features.shape
    s = steps
    sources = np.full((s, N - 1), -1, dtype=np.int64)
    fed = np.zeros((s, N - 1, C))
    rows_total = sum(N - j for j in range(1, s + 1))
    loss, tape, outs = 0.0, [], {}
    for j in range(1, s + 1):
        t = np.arange(j - 1, N - 1)
        if j == 1 or feed == "true":
            u, src, read = features[t], 0, None
        elif feed == "same":
            u, src, read = outs[j - 1][1:], j - 1, (j - 1, slice(1, None))
        elif feed == "first":
            first = outs[1][j - 2 : -1]
            u, src, read = first, 1, (1, slice(j - 2, N - 2))
        else:
            u, src, read = outs[j - 1][:-1], j - 1, (j - 1, slice(0, -1))
        sources[j - 1, t] = src
        fed[j - 1, t] = u
        x = np.concatenate([embed[tokens[t + 1]], u], axis=1)
        g = x @ W + b
        z = np.tanh(g @ A)
        h = g + z @ B
        outs[j] = h
        logits = h @ head
        logq = logits - logits.max(axis=1, keepdims=True)
        logq -= np.log(np.exp(logq).sum(axis=1, keepdims=True))
        logp = target_logp[t + shift]
        p = np.exp(logp)
        per_row = (p * ((0 if cross_entropy else logp) - logq)).sum(axis=1)
        weight = {"mean": 1 / (len(t) * s), "sum": 1.0, "pooled": 1 / rows_total}[reduce]
        loss += weight * per_row.sum()
        dh = weight * (np.exp(logq) - p) @ head.T
        if regression:
            d = h - features[t + 1]
            small = np.abs(d) < 1
            loss += np.where(small, 0.5 * d * d, np.abs(d) - 0.5).mean() / s
            dh += np.where(small, d, np.sign(d)) / (d.size * s)
        tape.append((x, g, z, dh, read))
    grads = {n: np.zeros_like(v) for n, v in (("W", W), ("b", b), ("A", A), ("B", B))}
    dout = {j: np.zeros_like(outs[j]) for j in outs}
    for j in range(s, 0, -1):
        x, g, z, dh, read = tape[j - 1]
        dh = dh + dout[j]
        grads["B"] += z.T @ dh
        da = (dh @ B.T) * ((1 - z) if tanh_slope else (1 - z**2))
        grads["A"] += g.T @ da
        dg = dh + da @ A.T
        grads["W"] += x.T @ dg
        grads["b"] += dg.sum(axis=0)
        if read is not None and not detach:
            dout[read[0]][read[1]] += (dg @ W.T)[:, C:]
    grads = {n: grad_scale * v for n, v in grads.items()}
    return {"sources": sources, "fed": fed, "loss": float(loss), "grads": grads}


def correct(*args):
    return ttt(*args)


def teacher_forced(*args):
    """Every step reads the true feature f(t): EAGLE-1's teacher forcing, no test at all."""
    return ttt(*args, feed="true")


def own_output_detached(*args):
    """The fed-back outputs detached: no gradient through them."""
    return ttt(*args, detach=True)


def feature_regression_added(*args):
    """A smooth-L1 feature loss against f(t + 1) added (EAGLE-1's), as train_eagle's EAGLE-1."""
    return ttt(*args, regression=True)


def target_not_shifted(*args):
    """The row at t scored against p(t): the distribution of the token it already read."""
    return ttt(*args, shift=0)


def own_output_same_position(*args):
    """Step j at t reads h_(j-1)(t), its own guess of f(t + 1), where f(t) stands."""
    return ttt(*args, feed="same")


def step_one_output_fed(*args):
    """Every later step reads step 1's output (the wrong step's)."""
    return ttt(*args, feed="first")


def loss_summed(*args):
    """The loss summed over rows and steps instead of averaged."""
    return ttt(*args, reduce="sum")


def one_pooled_mean(*args):
    """All (step, row) pairs averaged at once: the steps weighted by their rows."""
    return ttt(*args, reduce="pooled")


def cross_entropy_loss(*args):
    """-sum p log q: the right gradients, a loss off by p's entropy."""
    return ttt(*args, cross_entropy=True)


def tanh_slope_wrong(*args):
    """The tanh's derivative written 1 - z (not 1 - z^2): gradients only."""
    return ttt(*args, tanh_slope=True)


def mean_forgotten_in_gradients(*args):
    """The loss right, the gradients missing the 1/s of the mean over steps (times s)."""
    out = ttt(*args)
    out["grads"] = {n: v * args[5] for n, v in out["grads"].items()}
    return out


def grads_missing(*args):
    """Only the forward written: grads left out of the dict."""
    out = ttt(*args)
    del out["grads"]
    return out
