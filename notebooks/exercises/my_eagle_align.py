"""Exercise: an EAGLE drafter's catch-up, which token goes with which feature (notebook 14).

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_eagle_align.py:catch_up_pairs

The answer is a selection of your inputs (nothing is drawn, nothing is computed), so every
check is exact: your pairs are held against the contract's on hand-made cases (nothing to
feed, a one-pair catch-up, a catch-up after a full acceptance, a prefill) and on 300 seeded
random ones (eagle-pairs); then your function replaces the catch-up of a real EagleDrafter,
which runs through the reference loop beside the reference's own, and every proposal and the
drafter's cache after every round must be the reference's, bit for bit (eagle-round). Each
failure shows the smallest case that shows it, the pairs expected next to yours, with a hint
read from your answers.

The setting. An EAGLE drafter's block reads one fused row per position t,
g(t) = [e(x(t + 1)); f(t)] W + b, where f(t) is the target's feature at position t (the
residual stream after its last block: what its output layer reads to score the next token)
and x(t + 1) is the token that came next. Its cache keeps one row per position whose TRUE
feature is known and whose next token is committed. After a round the target hands over the
features of the positions it kept, and the next proposal first feeds the pairs the cache does
not hold yet: its catch-up. You write which pairs those are.

    position t :    0       1     ...    n-2
    token in   :  x(1)    x(2)    ...   x(n-1)      (the token AFTER position t)
    feature in :  f(0)    f(1)    ...   f(n-2)      (the target's feature AT position t)

The contract (`reference.eagle.EagleDrafter` feeds the same, in `prefill` and at the start of
`propose`):

    catch_up_pairs(context, features, cached) -> (tokens, feats)

    context   [n] int64 array, n >= 1: the committed tokens x(0..n-1)
    features  [m, C] float32 array: the target's features f(0..m-1) handed over so far.
              m = n - 1 after a round (every position but the last, whose token was just
              drawn); at prefill the drafter is handed the prompt less its last token and
              knows one feature more, m = n: f(n - 1) scored a token not in `context` yet
    cached    int >= 0: the pairs the drafter's cache already holds, t = 0..cached - 1
              (fed in earlier rounds, or at prefill)

    returns a tuple of two numpy arrays, one entry per pair t = cached, ..., min(n-1, m) - 1
    (a pair needs both its token x(t + 1) and its feature f(t)), in that order:
    tokens    [r] int: tokens[i] = x(t + 1) = context[t + 1]
    feats     [r, C]: feats[i] = f(t) = features[t], the rows unchanged
    r may be 0: then tokens is empty and feats has shape [0, C].

An example: context = [7, 3, 9, 4, 6] (n = 5), features f(0..3) (m = 4), cached = 2 (the
round before started from [7, 3, 9] with the cache holding t = 0, 1; it kept its draft 4 and
added 6, so two pairs are new):

    t = 2: (x(3) = 4, f(2))     t = 3: (x(4) = 6, f(3))
    tokens = [4, 6], feats = features[[2, 3]]

Things the grader catches (each a mistake it was tested on):

* the feature one position off: x(t + 1) with f(t + 1), or with f(t - 1);
* the tokens not shifted: x(t) with f(t) (f(t) has already read x(t));
* pairs the cache already holds fed again (starting at t = 0 instead of t = cached);
* the last pair dropped, (x(n - 1), f(n - 2)): the token just committed;
* at prefill, a pair for the last feature, whose next token is not in the context.

You may use numpy only; do not import `reference` (that would grade the reference).
A worked solution is in solutions/eagle_align_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def catch_up_pairs(context: np.ndarray, features: np.ndarray, cached: int):
    # context [n], features [m, C], cached -> (tokens [r], feats [r, C])
    raise NotImplementedError(
        "write catch_up_pairs() in notebooks/exercises/my_eagle_align.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_eagle_align.py:catch_up_pairs"
    )
