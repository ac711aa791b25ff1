"""Exercise: write prompt lookup's proposal yourself (notebook 10), then let the grader check it.

Read first: notebook 10, its introduction and §1 (one real match: where a proposal comes
from) and §2 (why copying is exact). The conventions below fix which match counts; turning
them into a search over the context is yours.

Grade your function from the repository root (well under a second):

    .venv/bin/specdec grade notebooks/exercises/my_lookup.py:propose_lookup

A proposal is a function of the context (nothing is drawn), so every check is exact: your
answers are held against the contract's on fixed contexts (one per convention below) and on
300 random contexts over 3 token ids (so matches are common), drawn afresh for each
grading; then your function runs as the drafter of the reference loop on a tiny transformer
at greedy, where the output must be the target's own greedy text. Each failure shows the
shortest context that shows it, with a hint read from your answers.

The interface (the same as `reference.lookup`'s LookupDrafter with min_ngram = 1 and
prefer = "recent"; notation: p = target, q = draft):

    propose_lookup(context, k, n_vocab, max_ngram=3) -> (draft_tokens, q_rows)

    context       [T] int64 array, T >= 1: the committed tokens (prompt + generated text),
                  each in 0..n_vocab-1; read it, do not modify it
    k             int >= 0: propose at most k tokens
    n_vocab       V, the vocabulary size (the width of q_rows)
    max_ngram     int >= 1: the longest match tried
    returns       draft_tokens [m] int64, 0 <= m <= k, and q_rows [m, V] float64 whose row
                  i is the one-hot row of draft_tokens[i]

The conventions (what the grader checks, in words):

* the key is the context's last n tokens, its *suffix*; n is tried from the longest
  (max_ngram, or less when the context is too short to hold an earlier copy) down to 1, and
  the first n that has a match decides;
* a match is an earlier place where the same n tokens occur, in the same order, with at
  least one context token after them. It may overlap the suffix itself; the suffix in its
  own place (nothing after it) is never a match;
* of several matches, the most recent one (the one that ends latest) wins;
* the proposal is what followed that match in the context: up to k tokens, fewer when the
  context ends first. Never the matched tokens themselves;
* no n has a match, or k = 0: no proposal (an empty array, and q_rows of shape [0, V]).

Worked examples (V = 10):

    context 3 1 0 2 3 0 1 0 2, k = 3, max_ngram = 3  ->  3 0 1
        (the suffix 1 0 2 occurs before at index 1..3; what followed it is at 4, 5, 6)
    context 4 2 9 9 4 2, k = 3, max_ngram = 3        ->  9 9 4   (no 3-token match: n = 2)
    context 5 0 7 5 0 8 5 0, k = 3, max_ngram = 2    ->  8 5 0   (the later of two matches)
    context 1 1 1, k = 2, max_ngram = 3              ->  1       (an overlapping match)
    context 0 1 2, k = 3                             ->  nothing, q_rows of shape [0, 10]

Why q is one-hot (notebook 10, §2): a copied token is chosen, not drawn, so the law it came
from is a point mass on it. Work out what notebook 05's acceptance rule does with such a q,
and why a "soft" q (uniform, or shaped by how often each token followed the match) would lean
the output toward the copy: the proof needs P(x proposed) = q(x).

Things to get right (each one is a mistake the grader names):

* the suffix found at the very end of the context, with nothing after it, is no match;
* the most recent match, not the oldest; the longest n first, not n = 1;
* copy what FOLLOWS the match, not the matched tokens themselves;
* at most k tokens; when nothing matches, nothing (and q of shape [0, V], not [0]);
* q_rows one-hot at each draft, row i at draft_tokens[i].

You may use numpy only; do not import `reference.lookup` (that would grade the reference).
A worked solution is in solutions/lookup_solution.py — try first.
"""

from __future__ import annotations

import numpy as np


def propose_lookup(context: np.ndarray, k: int, n_vocab: int, max_ngram: int = 3):
    # context [T] -> (draft_tokens [m] int64, q_rows [m, V] float64), 0 <= m <= k
    raise NotImplementedError(
        "write propose_lookup() in notebooks/exercises/my_lookup.py, then grade it with: "
        ".venv/bin/specdec grade notebooks/exercises/my_lookup.py:propose_lookup"
    )
