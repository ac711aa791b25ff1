"""Exercise: turn logits into the distribution a token is drawn from (temperature, top-k,
top-p), then let the grader check it.

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_sampling.py:sampling_distribution

Every check is exact: your row is compared with the contract's on fixed cases and on a few
hundred seeded random ones (to 1e-6 relative), so one wrong row is proof, and the report
shows that row next to the expected one, with a hint about the likely mistake.

Why it matters for speculative decoding: min(1, p/q) is exact only if p and q are the
distributions the tokens are really drawn from, so this one function serves both models.

The contract (the same as `reference.sampling.probabilities` with a SamplingParams):

    sampling_distribution(logits, temperature, top_k=None, top_p=None) -> probs

    logits       [V] float64 array, finite (possibly large, like 1000, or very negative)
    temperature  a float >= 0; 0 means greedy
    top_k        an int or None; None or 0: off; k >= V keeps every token
    top_p        a float in (0, 1] or None; None or 1.0: off
    returns      [V] float64 array, >= 0, summing to 1

The steps, in this order:

    1. greedy (temperature == 0): return the one-hot row at argmax(logits); when logits tie
       at the maximum, the lowest index wins (np.argmax's rule). top_k and top_p change
       nothing then (the argmax survives both).
    2. z = (logits - max(logits)) / temperature
       (subtract the max first: every z <= 0, so exp cannot overflow, even for a tiny T)
    3. top-k: keep every z >= the k-th largest z, set the others to -inf. Tokens tied with
       the k-th largest all survive, so more than k tokens may be kept.
    4. p = softmax(z) = exp(z - max z) / sum(exp(z - max z))      (exp(-inf) = 0)
    5. top-p (nucleus), on that p: sort the tokens by p, largest first (equal p: the lower
       index first); keep a token while the mass of the tokens *before* it is < top_p. The
       token that crosses top_p is kept, so the kept mass reaches top_p and the most likely
       token always survives. Zero the others and divide by the kept mass.

Things the grader catches (each a small mistake it was tested on):

* temperature applied after the softmax (dividing probabilities by T, then renormalising,
  cancels it) or multiplied instead of divided;
* top-p that cuts the token crossing top_p, or keeps one token too many;
* filtering without renormalising (top-p needs its own division);
* top-p before top-k (the order above changes the answer);
* exp without subtracting the max (overflow: NaN for logits near 1000 or a tiny T);
* ties at the k-th largest logit, and at the maximum for greedy.

You may use numpy only; do not import `reference.sampling` (that would grade the reference).
A worked solution is in solutions/sampling_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def sampling_distribution(
    logits: np.ndarray, temperature: float, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    # logits [V] -> probs [V] float64
    raise NotImplementedError(
        "write sampling_distribution() in notebooks/exercises/my_sampling.py, then grade it "
        "with: .venv/bin/specdec grade notebooks/exercises/my_sampling.py:sampling_distribution"
    )
