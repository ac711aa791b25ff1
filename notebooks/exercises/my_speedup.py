"""Exercise: what a round of speculative decoding gains when each draft position has its own
acceptance rate, and which draft length k to choose; then let the grader check it.

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_speedup.py:plan_k

No formula is given here: work out, pen and paper first, the expected number of tokens a
round emits and what the round costs, from the description of a round below. Do it after
notebook 07 and before notebook 08: 08 derives E for one rate shared by every position (a
special case of yours) and in §2 measures the rates by position and simulates rounds with
them, the place to check your answer afterwards. Every check is exact (to a relative 1e-9):
your three answers are compared with the grader's on fixed cases (one rate, no draft ever
kept, every draft kept, rates that differ by position, measured v, ties, k_max = 0), then on
200 cases drawn afresh for each grading; the report shows the first wrong answer with a hint
that names the mistake when it is a known one.

What a round does (the model of Leviathan et al., 2023, with a rate per position):

* The drafter proposes k tokens, one after the other: k draft steps, each costing c.
* One target forward pass then computes, in one go, every target row the round can need: a
  row to judge each draft, and a row to draw the round's last token from (see below).
* The drafts are judged in order, and the first rejection ends the round (the drafts after it
  are thrown away, never judged). The round's draft number j + 1 (j = 0, 1, ...), when it is
  judged, is accepted with probability alpha[j]: its rate given that the j drafts before it
  were accepted. A position's rate does not depend on k.
* The round emits the accepted drafts, then exactly one token of the target's: after a
  rejection, the correction drawn from the residual at the rejected position; when all k
  drafts are accepted, the bonus token drawn from the target's row after the last draft.
* k = 0 is plain decoding: nothing drafted, one pass over one position, one token.

The unit of cost is one target step: one target forward over ONE new position. Plain
decoding therefore costs exactly 1 per token, and its speedup is exactly 1, whatever the
passes over several positions cost. A pass over n new positions costs v(n) target steps, so
v(1) = 1 by definition.

The contract:

    plan_k(alpha, c, v, k_max) -> (best_k, expected_tokens, speedups)

    alpha            the acceptance rates: either a float in [0, 1], the same rate at every
                     position, or a [k_max] float64 array of rates in [0, 1], alpha[j] for
                     the round's draft j + 1 given that the drafts before it were accepted
    c                a float >= 0: one draft step, in target steps
    v                the verification pass's cost, in target steps: either a float > 0, the
                     cost of any pass over 2 or more positions (v = 1 is Leviathan's
                     assumption), or a [k_max + 1] float64 array of measured costs,
                     v[j] = v(j + 1): the pass over j + 1 new positions (v[0] = v(1) = 1)
    k_max            an int >= 0
    returns          expected_tokens  [k_max + 1] float64: expected_tokens[k] is the expected
                                      number of tokens one round with k drafts emits
                     speedups         [k_max + 1] float64: speedups[k] is expected_tokens[k]
                                      divided by what that round costs, in target steps
                                      (tokens per target step's worth of time)
                     best_k           an int in 0..k_max: the k with the highest speedup,
                                      the smallest such k on ties (np.argmax's rule)

What a right answer keeps (what the grader holds you to):

* expected_tokens[0] = 1 and speedups[0] = 1 (plain decoding, the unit);
* expected_tokens never falls as k grows, never exceeds k + 1, and is exactly 1 for every k
  when the first rate is 0; an array of equal rates gives the same answer as that one float;
* a rate of 1 anywhere (alpha = 1 included) is a valid input, not a division by zero;
* the speedups charge each round for what it does: its own k draft steps and its one pass,
  over as many positions as the round needs rows;
* best_k is chosen among all of 0..k_max by the speedup, not by the tokens.

A worked example, to check yourself against before grading:

    plan_k(alpha=np.array([0.8, 0.5]), c=0.1, v=1.2, k_max=2)
      -> best_k = 2
         expected_tokens = [1.0, 1.8, 2.2]
         speedups        = [1.0, 1.384615..., 1.571428...]   (1.8 / 1.3 and 2.2 / 1.4)

Check yourself: at k = 1 a round emits 1 or 2 tokens, so its expectation is 1 plus the
probability of 2. Why does the example's k = 2 add 0.4 and not 0.5?

Things the grader catches (each a small mistake it was tested on), named in its hint:

* the target's token forgotten: counting the accepted drafts only, or counting the target's
  token only when all k drafts are accepted (the bonus) and not after a rejection;
* a term too few or too many (with one rate: an off-by-one in the exponent of a closed form,
  if you write one); the rates added as if every draft were judged; one pooled rate (the
  mean) used for every position; alpha read one position late;
* plain decoding priced at v instead of 1; a verification pass priced for the wrong number
  of positions (how many rows does the round need?), the pass taken as 1 whatever v says, or
  a measured v read at the wrong index;
* a rate of 1 turned into a division by zero (or NaN);
* best_k from the wrong array (the tokens per round always grow with k), ties that go to
  the largest k, and k = 0 left out of the candidates.

You may use numpy only; do not import `specdec.costs` (that would grade the project's formula).
A worked solution is in solutions/speedup_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def plan_k(alpha, c: float, v, k_max: int) -> tuple[int, np.ndarray, np.ndarray]:
    # alpha (a float or [k_max]), c, v (a float or [k_max + 1]), k_max
    #   -> (best_k, expected_tokens [k_max + 1], speedups [k_max + 1])
    raise NotImplementedError(
        "write plan_k() in notebooks/exercises/my_speedup.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_speedup.py:plan_k"
    )
