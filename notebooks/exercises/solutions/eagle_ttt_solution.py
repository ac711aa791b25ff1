"""A solution to notebooks/exercises/my_eagle_ttt.py, written from scratch with numpy only.

Grade it like your own:

    .venv/bin/specdec grade \
        notebooks/exercises/solutions/eagle_ttt_solution.py:training_time_test_step
"""

from __future__ import annotations

import numpy as np


def training_time_test_step(
    params: dict,
    frozen: dict,
    tokens: np.ndarray,
    features: np.ndarray,
    target_logp: np.ndarray,
    steps: int,
):
    # params {W [2C, C], b [C], A [C, H], B [H, C]}, frozen {embed [V, C], head [C, V]},
    # tokens [N], features [N, C], target_logp [N, V], steps s -> {sources, fed, loss, grads}
    W, b, A, B = (np.asarray(params[n], dtype=np.float64) for n in ("W", "b", "A", "B"))
    embed, head = frozen["embed"], frozen["head"]
    N, C = features.shape
    s = steps
    sources = np.full((s, N - 1), -1, dtype=np.int64)
    fed = np.zeros((s, N - 1, C))
    loss, tape, h = 0.0, [], None
    for j in range(1, s + 1):
        t = np.arange(j - 1, N - 1)  # step j needs its step j - 1 row one position back
        # step 1 reads the truth; step j reads ITS OWN step j - 1 output at t - 1, which
        # stands where f(t) stands (the previous step's rows sit at t - 1 = j - 2 .. N - 3)
        u = features[t] if j == 1 else h[:-1]  # h: the step before's rows
        sources[j - 1, t] = j - 1  # 0: the true feature; j - 1: the drafter's own step j - 1
        fed[j - 1, t] = u
        x = np.concatenate([embed[tokens[t + 1]], u], axis=1)
        g = x @ W + b
        z = np.tanh(g @ A)
        h = g + z @ B
        logits = h @ head
        logq = logits - logits.max(axis=1, keepdims=True)
        logq -= np.log(np.exp(logq).sum(axis=1, keepdims=True))
        logp = target_logp[t + 1]  # h_j(t) guesses f(t + 1): judged by p of x(t + 2)
        p = np.exp(logp)
        loss += (p * (logp - logq)).sum(axis=1).mean() / s  # KL(p || q), averaged
        tape.append((x, g, z, np.exp(logq) - p, len(t)))

    grads = {n: np.zeros_like(v) for n, v in (("W", W), ("b", b), ("A", A), ("B", B))}
    carried = None  # d loss / d h of the step below, from the rows that read it
    for j in range(s, 0, -1):
        x, g, z, dlogits, rows = tape[j - 1]
        dh = dlogits @ head.T / (rows * s)
        if carried is not None:
            dh[:-1] += carried  # step j + 1's row i read this step's row i: no detach
        grads["B"] += z.T @ dh
        da = (dh @ B.T) * (1 - z**2)
        grads["A"] += g.T @ da
        dg = dh + da @ A.T
        grads["W"] += x.T @ dg
        grads["b"] += dg.sum(axis=0)
        carried = (dg @ W.T)[:, C:]  # the feature half of the fused input
    return {"sources": sources, "fed": fed, "loss": float(loss), "grads": grads}
