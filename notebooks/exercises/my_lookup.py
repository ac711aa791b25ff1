"""Exercise: write prompt lookup's proposal yourself (notebook 10), then let the grader check it.

Grade your function from the repository root (well under a second):

    .venv/bin/specdec grade notebooks/exercises/my_lookup.py:propose_lookup

A proposal is a function of the context (nothing is drawn), so every check is exact: your
answers are held against the contract's on fixed contexts (one per convention below) and on
300 seeded random contexts over 3 token ids (so matches are common); then your function runs
as the drafter of the reference loop on a tiny transformer at greedy, where the output must be
the target's own greedy text. Each failure shows the shortest context that shows it, with a
hint read from your answers.

The contract (the same as `reference.lookup`'s LookupDrafter with min_ngram = 1 and
prefer = "recent"; notation: p = target, q = draft):

    propose_lookup(context, k, n_vocab, max_ngram=3) -> (draft_tokens, q_rows)

    context       [T] int64 array, T >= 1: the committed tokens (prompt + generated text),
                  each in 0..n_vocab-1; read it, do not modify it
    k             int >= 0: propose at most k tokens
    n_vocab       V, the vocabulary size (the width of q_rows)
    max_ngram     int >= 1: the longest match tried
    returns       draft_tokens [m] int64, 0 <= m <= k, and q_rows [m, V] float64 with
                  q_rows[i] = one-hot(draft_tokens[i])

The rule:

    for n = min(max_ngram, T - 1) down to 1 (the first n that matches wins):
        suffix = context[T-n:]                        the last n tokens
        find the MOST RECENT earlier occurrence: the largest end e with e <= T - 1 and
            context[e-n:e] == suffix                  (it may overlap the suffix itself)
        if there is one: return context[e : e + k]    (fewer than k if the context ends)
    no n matches (or k == 0): return an empty array and q_rows of shape [0, V]

    index     0 1 2 3 4 5 6 7 8
    context   3 1 0 2 3 0 1 0 2      T = 9, k = 3; n = 3: the suffix is 1 0 2 (index 6..8)
                ~~~~~                its most recent earlier occurrence is index 1..3: e = 4
    proposal  context[4:7] = 3 0 1   (the q rows: np.eye(V)[[3, 0, 1]])

Why q is one-hot. A copied token x was chosen, not drawn: the law it came from is the point
mass one-hot(x). With it, verify keeps x with min(1, p(x)/1) = p(x) and, on a refusal,
samples norm(max(0, p - one-hot(x))) = p without x, renormalised, so the emitted token is y
with probability p(y): exactly the target's law. The proof uses P(x proposed) = q(x); a soft
q (uniform, or a softmax over the counts of what followed) breaks it, since x is proposed
with probability 1 yet kept with min(1, p(x)/q(x)) > p(x): the output leans toward the copy.

Things to get right (each one is a mistake the grader names):

* the last n tokens always "occur" at the very end: that is the suffix itself, with nothing
  after it, and it is no match (search ends e <= T - 1);
* the most recent occurrence, not the oldest; the longest n first, not n = 1;
* copy what FOLLOWS the occurrence, context[e : e + k], not the matched n tokens themselves;
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
