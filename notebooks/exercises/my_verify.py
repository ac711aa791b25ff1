"""Exercise: write speculative sampling's `verify` yourself, then let the oracle grade it.

Grade your function from the repository root (about 10 s when it is right, a second or two
when it is not):

    .venv/bin/specdec grade notebooks/exercises/my_verify.py:verify

(or `make grade`). The grader runs the checks that exercise your code, cheapest first: exact
cases whose outcome is certain, the article's A/B example, the joint law of (accepted, token)
for k = 3, drafts from context-dependent tables, point-mass and greedy rows, and your verify
inside the speculative loop on a tiny transformer. It prints one line per law, PASS or FAIL,
and explains each failure on the smallest case that shows it, with a hint about the likely
mistake. If your code raises, it shows your line and the inputs that caused it.

The exhaustive mode, every statistical family of the project's oracle with Holm tables:

    .venv/bin/pytest -m distribution --verify=notebooks/exercises/my_verify.py:verify

The contract (the same as `reference.verification.verify`; notation: p = target, q = draft):

    verify(p_target, q_draft, draft_tokens, rng) -> (accepted, token)

    p_target      [k+1, V] float array: row i is the target's distribution that scores
                  draft_tokens[i]; row k is the bonus row
    q_draft       [k, V] float array: row i is the distribution draft_tokens[i] was drawn from
    draft_tokens  [k] ints
    rng           a numpy.random.Generator: take every random number from it
    returns       accepted in 0..k and the token that follows the accepted drafts — the
                  residual sample after a rejection, or the bonus sample from row k

The rule, position by position (i = 0, 1, ...):

    accept x = draft_tokens[i] with probability min(1, p_i(x) / q_i(x))
    at the first rejection, sample from norm(max(0, p_i - q_i)) and stop
    if all k are accepted, sample the bonus token from p_k

Things to get right (each one is a broken variant the oracle is known to catch):

* use a fresh uniform for every position — one shared uniform correlates the decisions;
* the residual is max(0, p - q), not |p - q|, and it must be normalised before sampling;
* the residual uses the same row i as the rejected draft, and the bonus uses row k;
* when p_i == q_i the residual is all zeros — but then a rejection cannot happen; guard the
  division anyway (fall back to p_i).

You may use numpy only; do not import `reference.verification` (that would grade the reference).
A worked solution is in solutions/verify_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def verify(p_target: np.ndarray, q_draft: np.ndarray, draft_tokens, rng: np.random.Generator):
    # p_target [k+1, V], q_draft [k, V], draft_tokens [k] -> (accepted, token)
    raise NotImplementedError(
        "write verify() in notebooks/exercises/my_verify.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_verify.py:verify"
    )
