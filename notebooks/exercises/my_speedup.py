"""Exercise: derive what speculative decoding gains per round, choose the draft length k, then
let the grader check it.

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_speedup.py:plan_k

No formula is given here: work out the expected number of tokens a round emits, and what a
round costs, from the description of a round below (pen and paper first; notebook 08 is the
place to check your reasoning afterwards). Every check is exact (to a relative 1e-9): your
three answers are compared with the grader's on fixed cases (alpha = 0.8, 0 and 1, measured
v, ties, k_max = 0) and on a few hundred seeded random ones, and the report shows the first
wrong answer with a hint that names the mistake when it is a known one.

What a round does (the model of Leviathan et al., 2023):

* The drafter proposes k tokens, one after the other: k draft steps, each costing c target
  steps (the time of one target forward over one new position).
* One target forward pass then computes, in one go, every target row the round can need: a
  row to judge each draft, and a row to draw the round's last token from (see below). A pass
  over n new positions costs v(n) target steps.
* The drafts are judged in order. Each is accepted with probability alpha, independently of
  the others, and the first rejection ends the round (the drafts after it are thrown away).
* The round emits the accepted drafts, then exactly one token of the target's: after a
  rejection, the correction drawn from the residual at the rejected position; when all k
  drafts are accepted, the bonus token drawn from the target's row after the last draft.
* k = 0 is plain decoding: nothing drafted, one pass over one position, one token.

The contract:

    plan_k(alpha, c, v, k_max) -> (best_k, expected_tokens, speedups)

    alpha            a float in [0, 1]: the probability that a draft is accepted
    c                a float >= 0: one draft step, in target steps
    v                the verification pass's cost, in target steps: either a float > 0, the
                     same figure for a pass of any length (v = 1 is Leviathan's assumption),
                     or a [k_max + 1] float64 array of measured costs, v[j] = v(j + 1): the
                     pass over j + 1 new positions (v[0] = v(1), one position)
    k_max            an int >= 0
    returns          expected_tokens  [k_max + 1] float64: expected_tokens[k] is the expected
                                      number of tokens one round with k drafts emits
                     speedups         [k_max + 1] float64: speedups[k] is expected_tokens[k]
                                      divided by what that round costs, in target steps
                                      (tokens per target step's worth of time)
                     best_k           an int in 0..k_max: the k with the highest speedup,
                                      the smallest such k on ties (np.argmax's rule)

Check yourself before grading: at alpha = 0 every round emits one token whatever k is; at
alpha = 1 nothing is ever rejected; at k = 1 a round emits 1 or 2 tokens, so its expectation
is 1 plus the probability of 2. Your expected_tokens must agree at all three, and work for
any alpha in [0, 1] (alpha = 1 included).

Things the grader catches (each a small mistake it was tested on), named in its hint:

* the target's token forgotten: counting the accepted drafts only, or counting the target's
  token only when all k drafts are accepted (the bonus) and not after a rejection;
* an off-by-one in the exponent of the closed form, if you write one;
* a verification pass priced for the wrong number of positions (how many rows does the
  round need?), the pass taken as 1 whatever v says, or a measured v read at the wrong index;
* alpha = 1 turned into a division by zero (or NaN);
* best_k from the wrong array (the tokens per round always grow with k), ties that go to
  the largest k, and k = 0 left out of the candidates.

You may use numpy only; do not import `specdec.costs` (that would grade the project's formula).
A worked solution is in solutions/speedup_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def plan_k(alpha: float, c: float, v, k_max: int) -> tuple[int, np.ndarray, np.ndarray]:
    # alpha, c, v (a float or [k_max + 1]), k_max -> (best_k, [k_max + 1], [k_max + 1])
    raise NotImplementedError(
        "write plan_k() in notebooks/exercises/my_speedup.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_speedup.py:plan_k"
    )
