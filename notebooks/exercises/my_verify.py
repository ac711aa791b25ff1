"""Exercise: write speculative sampling's `verify` yourself, then let the oracle grade it.

Grade your function from the repository root (a wrong `verify` is rejected faster than a
right one passes; README.md beside this file gives each exercise's grading time, measured):

    .venv/bin/specdec grade notebooks/exercises/my_verify.py:verify

(or `make grade`). The grader answers four questions, each on its own: does your output
follow the target's law (the law family: exact cases whose outcome is certain, zero drafts,
the article's A/B example, drafts from context-dependent tables, point-mass and greedy rows)?
Is the rule the contract's min(1, p/q), with the optimal acceptance (the rule family: the A/B
acceptance rate, a draft with p(x) = 0, p = q, the joint law of (accepted, token) for k = 3)?
Does it take fresh randomness from rng (the randomness family)? And does it work inside the
speculative loop on a tiny transformer (in-loop)? It prints one line per law, PASS or FAIL,
and explains each failure on the smallest case that shows it, with a hint about the likely
mistake. If your code raises, it shows your line, the call and the inputs that caused it.

The exhaustive mode, every statistical family of the project's oracle with Holm tables:

    .venv/bin/pytest -m distribution --verify=notebooks/exercises/my_verify.py:verify

The contract (the same as `reference.verification.verify`; notation: p = target, q = draft):

    verify(p_target, q_draft, draft_tokens, rng) -> (accepted, token)

    p_target      [k+1, V] float64 array: row i is the target's distribution that scores
                  draft_tokens[i]; row k is the bonus row
    q_draft       [k, V] float64 array: row i is the distribution draft_tokens[i] was drawn from
    draft_tokens  [k] ints
    rng           a numpy.random.Generator: take every random number from it, and never
                  re-seed it (two runs with the same seed must give the same outcomes)
    returns       accepted in 0..k and the token that follows the accepted drafts — the
                  residual sample after a rejection, or the bonus sample from row k

    k may be 0 (the loop asks so when one token is left to generate): then q_draft has shape
    [0, V], draft_tokens is empty, and verify returns (0, a sample of p_target[0]).

    Every row you receive is float64 and sums to 1 (the grader normalises the model's float32
    rows), so rng.choice(V, p=p_target[i]) works on them; a vector you build yourself, like
    the residual, you normalise yourself.

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
