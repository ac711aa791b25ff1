"""Exercise: turn logits into the distribution a token is drawn from (temperature, top-k,
top-p), then let the grader check it.

Read first: notebook 05, §5 (why both models must hand the rule the distribution they really
sample from). This docstring says what each option must do to the row; how to compute it
exactly and without overflow is yours.

Grade your function from the repository root (about a second):

    .venv/bin/specdec grade notebooks/exercises/my_sampling.py:sampling_distribution

Every check is exact: your row is compared with the contract's on fixed cases and on a few
hundred random cases drawn afresh for each grading (to 1e-6 relative), so one wrong row is
proof, and the report shows that row next to the expected one, with a hint about the likely
mistake.

Why it matters for speculative decoding: the acceptance rule is exact only if p and q are
the distributions the tokens are really drawn from, so this one function serves both models.

The interface (the same as `reference.sampling.probabilities` with a SamplingParams):

    sampling_distribution(logits, temperature, top_k=None, top_p=None) -> probs

    logits       [V] float64 array, finite (possibly large, like 1000, or very negative)
    temperature  a float >= 0; 0 means greedy
    top_k        an int or None; None or 0: off; k >= V keeps every token
    top_p        a float in (0, 1] or None; None or 1.0: off
    returns      [V] float64 array, >= 0, summing to 1

What the returned row must satisfy (what the grader checks):

* greedy (temperature 0): all the mass on the most likely token; when several logits tie
  at the maximum, on the lowest index of them (np.argmax's rule). top_k and top_p change
  nothing then.
* temperature alone (T > 0, no top-k or top-p): T = 1 gives the model's own softmax of the
  logits; another T keeps the tokens' order but reshapes the row: for any two tokens, the
  ratio of their probabilities is the T = 1 ratio raised to the power 1/T (so T < 1
  sharpens the row and T > 1 flattens it).
* top-k: only the k most likely tokens keep probability, every other token gets exactly
  0. A token tied with the k-th most likely one is kept too, so more than k may survive.
* top-p (nucleus): take the tokens most likely first (equal probabilities: the lower index
  first) and keep them until the kept probability reaches top_p; the token that makes it
  reach (or pass) top_p is the last one kept, so the most likely token always survives.
  The others get exactly 0.
* both: top-p is measured on the row that temperature and top-k left (renormalised), not
  on the row before top-k.
* whatever is cut, the kept tokens keep the ratios they had before the cut, and the row
  sums to 1.
* logits near +-1000, and a temperature as small as 1e-3, still give a finite row (no NaN,
  no inf).

A worked example, logits = [2, 1, 0, -1]:

    temperature 1                    [0.6439, 0.2369, 0.0871, 0.0321]
    temperature 0.5                  [0.8650, 0.1171, 0.0158, 0.0021]
    temperature 0                    [1, 0, 0, 0]
    T = 1, top_k = 2                 [0.7311, 0.2689, 0, 0]
    T = 1, top_p = 0.9               [0.6652, 0.2447, 0.0900, 0]
    T = 1, top_k = 3, top_p = 0.9    [0.7311, 0.2689, 0, 0]   (top-p after top-k's cut)
    logits [1, 3, 3, 0], T = 0       [0, 1, 0, 0]             (the tie: the lower index)
    logits [1, 3, 3, 0], T = 1, top_k = 1    [0, 0.5, 0.5, 0] (the tie at the k-th: both kept)

Things the grader catches (each a small mistake it was tested on):

* temperature applied after the softmax, or in the wrong direction (sharpening when it
  should flatten);
* top-p that cuts the token crossing top_p, or keeps one token too many;
* a cut row left unnormalised;
* top-p measured before top-k cut the row;
* an overflow: NaN for logits near 1000 or a tiny T;
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
