"""Exercise: an EAGLE drafter's catch-up, which token goes with which feature (notebook 14).

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_eagle_align.py:catch_up_pairs

When: after notebook 14's opening sections (the three papers, and this project's EAGLE)
and before its §1, whose table answers it: §1 and §4 are the place to check your reasoning
afterwards. What you need: what EAGLE's drafter reads at each position (the papers'
section: a feature, and a token sampled relative to it), and notebook 06's catch-up of a
chain drafter. Which token stands beside which feature, the papers' section says; which pairs
are new after a round or at a prefill (none fed twice, none that cannot be built yet) is
yours to work out.

The answer is a selection of your inputs (nothing is drawn, nothing is computed), so every
check is exact: your pairs are held against the contract's on hand-made cases (nothing to
feed, a one-pair catch-up, a catch-up after a full acceptance, a prefill) and on 300 random
ones drawn afresh for each grading (eagle-pairs); then your function replaces the catch-up of
a real EagleDrafter, which runs through the reference loop beside the reference's own, on
prompts drawn for each grading, and every proposal and the drafter's cache after every round
must be the reference's, bit for bit (eagle-round). Each
failure shows the smallest case that shows it, the pairs expected next to yours, with a hint
read from your answers.

The setting. An EAGLE drafter's block reads one fused row per position t: the embedding of
a token and a feature of the target's, f(t), the residual stream after its last block at
position t (what the target's output layer reads to score its next token). Its cache keeps
one row per position t whose TRUE feature is known (the target's, not the drafter's own
guess) and whose row the block can build from committed tokens only. After a round the
target hands over the features of the positions it kept, and the next proposal first feeds
the rows its cache does not hold yet: its catch-up. You choose those rows: for each, the
token and the feature it fuses.

The contract (`reference.eagle.EagleDrafter` feeds the same, in `prefill` and at the start of
`propose`):

    catch_up_pairs(context, features, cached) -> (tokens, feats)

    context   [n] int64 array, n >= 1: the committed tokens x(0..n-1)
    features  [m, C] float32 array: the target's features f(0..m-1) handed over so far.
              m = n - 1 after a round (every position but the last, whose token was just
              drawn); at prefill the drafter is handed the prompt less its last token and
              knows one feature more, m = n
    cached    int >= 0: the rows the drafter's cache already holds, positions 0..cached - 1
              (fed in earlier rounds, or at prefill)

    returns a tuple of two numpy arrays, one entry per row to feed, in the order of their
    positions:
    tokens    [r] int: the token each row fuses (one of context's)
    feats     [r, C]: the feature each row fuses (one of features' rows, unchanged)
    r may be 0: then tokens is empty and feats has shape [0, C].

What a right answer keeps (what the grader holds you to):

* each row fuses a feature with the token EAGLE's block reads beside it (which one: what
  has the feature at a position already read, and what was sampled from it?);
* a row the cache already holds is never fed again;
* every row that can be built is fed: all its inputs known, its feature a true one and its
  token committed; none that cannot (a token not in context yet, a feature not handed over);
* after it, proposing from the drafter gives the reference's drafts, bit for bit.

Two examples (features' row t is filled with the number t, so you can read which row went):

    context = [7, 3, 9, 4, 6], features = 4 rows [[0., 0.], [1., 1.], [2., 2.], [3., 3.]],
    cached = 2 (the round before started from [7, 3, 9]; it kept its draft 4 and added 6)
      -> tokens = [4, 6], feats = [[2., 2.], [3., 3.]]

    at prefill: context = [5, 8, 2], features = 3 rows [[0., 0.], [1., 1.], [2., 2.]],
    cached = 0
      -> tokens = [8, 2], feats = [[0., 0.], [1., 1.]]

Things the grader catches (each a mistake it was tested on):

* the feature one position off, in either direction;
* the tokens not shifted against the features (what has a feature already read?);
* rows the cache already holds fed again (starting over from the first position);
* the last row dropped: the one that fuses the token just committed;
* at prefill, a row for the last feature, whose token is not in the context yet.

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
