"""Exercise: one step of EAGLE-3's training-time test, by hand (notebook 14).

Grade your function from the repository root (a few seconds):

    .venv/bin/specdec grade notebooks/exercises/my_eagle_ttt.py:training_time_test_step

The setting. An EAGLE drafter reads the target's feature f(t) (its hidden state at position t)
beside the token x(t + 1) that came next, and computes a hidden state that stands where the
next feature would (EAGLE-1 trains it to BE that feature; EAGLE-3 only to score the next token
well). When it drafts, it has
true features only up to the last committed position: its first draft reads a true feature, but
its second draft must read the drafter's OWN output of the first, its third its own output of
the second, and so on. Trained only on true features (EAGLE-1's teacher forcing), it never sees
its own errors as inputs, and its later drafts drift. EAGLE-3's "training-time test" trains it
as it is used: the drafter is unrolled for `steps` steps on its own outputs, and the loss is on
the token distributions only (no feature regression: EAGLE-3's output is a hidden state the
next step reads, free to be whatever predicts tokens best). You write one such training step
for a drafter small enough to differentiate by hand: the inputs each step reads, the loss, and
the gradient of every trained parameter.

The tiny drafter. One row at a time (position-wise: no attention), for a token x and a
feature u (C numbers):

    g      = [e(x); u] W + b          e(x) = embed[x], the frozen token embedding; [ ; ] puts
                                      the two C-vectors side by side (2C); W [2C, C], b [C]
    h      = g + tanh(g A) B           A [C, H], B [H, C]; h is the drafter's output (C)
    log q  = log_softmax(h head)       head [C, V], frozen: the drafter's token distribution

The unrolled steps. Think of a round that drafts after the committed tokens x(0..c): the first
draft comes from the row that reads x(c) and the true feature f(c - 1); the second from the
row that reads the true token x(c + 1) (training uses the window's own tokens) and, where f(c)
would stand, the first row's output; the third reads x(c + 2) and the second row's output; and
so on, `steps` rows per round. Every position of the window can start a round, so step j (the
j-th row of a round) runs at every position where that row fits inside the window (a round
cut short by the window's end still trains its first rows). Index a
row by the token it reads: the row of step j at position t reads x(t + 1). Each row's output
stands in for a feature of the target (the round's first row's, for f(c)), and is scored by
the distribution that feature scores in the target: its row of target_logp.

The contract:

    training_time_test_step(params, frozen, tokens, features, target_logp, steps) -> dict

    params       {"W": [2C, C], "b": [C], "A": [C, H], "B": [H, C]} float64: trained
    frozen       {"embed": [V, C], "head": [C, V]} float64: given, not trained
    tokens       [N] int64: the window's tokens x(0..N-1), N >= 2
    features     [N, C] float64: the target's true features f(0..N-1)
    target_logp  [N, V] float64: row t = log p(. | x(0..t)), the target's distribution of
                 x(t + 1) (the one its feature f(t) scored); every entry finite
    steps        int s, 1 <= s <= N - 1

    returns a dict:
    "sources"  [s, N-1] int: sources[j - 1, t] says what the row of step j at position t
               (t = 0..N-2) read as its feature: 0 the true feature f(t), i >= 1 the
               drafter's own output of step i, -1 where step j has no row
    "fed"      [s, N-1, C] float: the feature u that row read (zeros where it has none)
    "loss"     a float: the mean over the s steps of each step's mean, over its rows, of
               KL(p || q) = sum_x p(x) (log p(x) - log q(x)), p the target's distribution
               the row is scored by, q the drafter's at that row (as train_eagle.py here;
               EAGLE-3's released code minimises the cross-entropy -sum_x p(x) log q(x),
               which differs by the entropy of p, a constant: the same gradients)
    "grads"    {"W", "b", "A", "B"}: d loss / d parameter, float arrays of the parameters'
               shapes

Invariants the grader holds you to:

* step 1 reads only true features; a step j >= 2 reads only what the drafter itself made at
  step j - 1 (no true feature, no other step's output): the gap between the true features and
  its own is what this training closes;
* a row is scored against the distribution of the token its draft would propose, never of a
  token it has already read;
* the gradient flows through the fed-back outputs: a step's loss depends on the parameters
  also through the feature the step before made from them, and `grads` counts that too (no
  stop-gradient; specdec/training/train_eagle.py's `unroll` does the same, as EAGLE-3's
  released training does). With s = 1 nothing is fed back, and this is plain teacher forcing;
* each step weighs the same in the loss, whatever its number of rows (train_eagle.py's
  choice; EAGLE-3's released training sums the steps' losses weighted 1, 0.8, 0.64, ...);
  no term but the KL.

A worked example (C = 2, H = 2, V = 3, N = 4, s = 2; the grader's first shown case):

    W = [[0.6, -0.4], [0.6, 0.3], [0.2, 0.8], [0.8, -0.7]]     b = [-0.5, -0.1]
    A = [[2.2, -0.5], [0.6, 0.4]]                              B = [[0.7, 0.2], [-0.3, 0.3]]
    embed = [[0.1, 1.0], [-1.1, 0.1], [1.1, 1.2]]      head = [[-0.6, 1.4, 1.0], [0.7, 0.1, -0.5]]
    tokens = [0, 0, 1, 2]
    features = [[1.0, -1.2], [-1.2, 0.3], [1.3, -0.8], [0.7, -2.1]]
    target_logp = log of [[0.05, 0.9, 0.05], [0.51, 0.3, 0.19], [0.36, 0.46, 0.18],
                          [0.1, 0.8, 0.1]]

    sources = [[ 0, 0, 0],          step 1 at t = 0, 1, 2 reads f(0), f(1), f(2)
               [-1, 1, 1]]          step 2 runs at t = 1, 2 and reads step 1's outputs
    step 1's outputs h at t = 0, 1, 2: [-0.9958, 1.9839], [-1.8636, -0.9310], [1.0800, 1.7044]
    fed[1] = [[0, 0], [-0.9958, 1.9839], [-1.8636, -0.9310]]
    loss = 0.741528
    grads["b"] = [-0.7276, 0.0226]
    (with the fed-back outputs detached, grads["b"] would be [-0.6088, -0.0443]: wrong; with
    every step fed the true features, the loss would be 0.541523: wrong too)

Check your gradients yourself before grading: nudge one entry of a parameter by +-1e-6 and
compare (loss(+) - loss(-)) / 2e-6 with your gradient's entry (in float64 the two agree to
about 1e-9 on cases like these). The grader compares the loss to 1e-5 (relative) and each
gradient to 1e-4 of its largest entry, on shown cases and on cases drawn fresh for each
grading.

Things the grader catches (each a mistake it was tested on), in three families scored apart:
ttt-inputs (sources, fed), ttt-loss, ttt-gradients:

* every step fed the true features (teacher forcing: no training-time test at all);
* the drafter's own output fed at the wrong position, or from the wrong step;
* the fed-back outputs detached from the gradient;
* a feature-regression term added to the loss (EAGLE-1's, not EAGLE-3's);
* a row scored against the wrong position's distribution;
* a sum where the contract averages, one mean over all rows where it averages per step, or
  the released code's step weights;
* the cross-entropy (or KL the other way round) in place of KL(p || q).

You may use numpy only; do not import `reference` or torch (write the backward pass
yourself). A worked solution is in solutions/eagle_ttt_solution.py — try first.
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
    # params {W, b, A, B}, frozen {embed, head}, tokens [N], features [N, C],
    # target_logp [N, V], steps s -> {"sources", "fed", "loss", "grads"}
    raise NotImplementedError(
        "write training_time_test_step() in notebooks/exercises/my_eagle_ttt.py, then grade it "
        "with: .venv/bin/specdec grade notebooks/exercises/my_eagle_ttt.py:training_time_test_step"
    )
