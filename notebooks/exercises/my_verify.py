"""Exercise: write speculative sampling's `verify` yourself, then let the oracle grade it.

Assigned right after notebook 05's proof: the rule you need, why it keeps the target's law
exactly and why no exact rule keeps more drafts, are all there (§1 the A/B example by hand,
"Why it is exact", "From one token to the whole round"). Reread them and turn the proof
into code; this docstring gives the interface and what is checked, not the rule. Further
reading, once it passes: notebook 09, the oracle that grades it.

Grade your function from the repository root (a wrong `verify` is rejected faster than a
right one passes; README.md beside this file gives each exercise's grading time, measured):

    .venv/bin/specdec grade notebooks/exercises/my_verify.py:verify

(or `make grade`). The grader answers four questions, each on its own, and prints one line
per law, PASS or FAIL, explaining each failure on the smallest case that shows it, with a
hint about the likely mistake. If your code raises, it shows your line, the call and the
inputs that caused it.

The exhaustive mode, every statistical family of the project's oracle with Holm tables:

    .venv/bin/pytest -m distribution --verify=notebooks/exercises/my_verify.py:verify

The interface (the same as `reference.verification.verify`; notation: p = target, q = draft):

    verify(p_target, q_draft, draft_tokens, rng) -> (accepted, token)

    p_target      [k+1, V] float64 array: row i is the target's distribution for the
                  position of draft_tokens[i]; row k is the bonus row (after every draft)
    q_draft       [k, V] float64 array: row i is the distribution draft_tokens[i] was drawn from
    draft_tokens  [k] ints
    rng           a numpy.random.Generator: take every random number from it, and never
                  re-seed it (two runs with the same seed must give the same outcomes)
    returns       accepted in 0..k (how many drafts, from the first, are kept) and the one
                  token emitted after them: a replacement for the first refused draft, or,
                  when all k are kept, a bonus token from row k

    k may be 0 (the loop asks so when one token is left to generate): then q_draft has shape
    [0, V], draft_tokens is empty, and verify returns (0, a sample of p_target[0]).

    Every row you receive is float64 and sums to 1 (the grader normalises the model's float32
    rows), so rng.choice(V, p=p_target[i]) works on them; a vector you build yourself, you
    normalise yourself.

What a correct verify keeps true (the grader's four questions):

* law: draft_tokens[:accepted] + [token] follows the target's law exactly, as if the target
  had sampled those tokens one by one, whatever q is (point masses, greedy one-hot rows,
  drafts p can never give, p = q);
* rule: no exact rule keeps more drafts: each draft is kept as often as notebook 05 shows
  the target's law allows, and no less (so a draft p gives more mass than q is always kept,
  and a draft p can never give is always refused);
* randomness: every decision uses new randomness from rng (same seed, same outcomes; two
  positions never share one draw);
* in-loop: inside the speculative loop on a tiny transformer, the text follows the target's
  law.

A worked example (V = 2, tokens A = 0 and B = 1; k = 1):

    p_target = [[0.6, 0.4],      row 0 judges the draft
                [0.1, 0.9]]      row 1 is the bonus row
    q_draft  = [[0.8, 0.2]]
    draft_tokens = [0] (A): (accepted, token) is (1, 0) with probability 0.075,
                            (1, 1) with 0.675, (0, 1) with 0.25, and never (0, 0)
    draft_tokens = [1] (B): (1, 0) with probability 0.1, (1, 1) with 0.9
    With the draft drawn from q, the first emitted token is A with probability
    0.8 * (0.075 + 0.675) + 0.2 * 0 = 0.6: p_target[0]'s law, as it must be.

Things the grader catches (each one is a broken variant the oracle is known to catch):

* one uniform shared by every position (it correlates the decisions);
* a replacement drawn from the wrong distribution: built from |p - q|, drawn from p itself,
  or left unnormalised before sampling;
* the replacement or the bonus taken from the wrong row;
* a division by zero when a row of p equals its row of q (nothing can be refused then, but
  the code must not fail).

You may use numpy only; do not import `reference.verification` (that would grade the
reference). A worked solution is in solutions/verify_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def verify(p_target: np.ndarray, q_draft: np.ndarray, draft_tokens, rng: np.random.Generator):
    # p_target [k+1, V], q_draft [k, V], draft_tokens [k] -> (accepted, token)
    raise NotImplementedError(
        "write verify() in notebooks/exercises/my_verify.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_verify.py:verify"
    )
