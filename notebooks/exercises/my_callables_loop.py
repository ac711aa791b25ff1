"""Exercise: speculative sampling over two next-token callables -- the contract that lets a loop
written against any library (transformers, your course's own model) be graded.

Grade your function from the repository root (README.md beside this file gives each
exercise's grading time, measured):

    .venv/bin/specdec grade notebooks/exercises/my_callables_loop.py:speculative_sample

Your loop already speaks another library? Keep it, and wrap the callables the grader hands
you as that library's model: examples/transformers_style_loop.py does it for a loop written
the way transformers tutorials write one (`model(input_ids).logits`, `torch.softmax`).

The contract (p = target, q = draft):

    speculative_sample(target_next, draft_next, prompt, *, k, max_new_tokens, rng,
                       eos_id=None) -> a list of generated ids, or an object with .tokens
                       and, optionally, .accepted_per_round

    target_next   target_next(tokens) -> [V] float64 array: p(. | tokens), the target's
                  distribution of the token after `tokens` (a list of ids, the prompt
                  included). The sampling transform (temperature, top-k) is already applied:
                  draw from these rows as they are. Each call is one position of a target
                  pass, so ask for each row once (the grader counts the calls).
    draft_next    likewise for the draft model: q(. | tokens)
    prompt        a list of ids, at least one
    k             drafts per round (>= 1); max_new_tokens >= 1
    rng           a numpy.random.Generator: take every random number from it
    eos_id        None, or an id that ends the generation (it is emitted, nothing after it)
    returns       the generated ids (prompt excluded, at most max_new_tokens). Return an
                  object with .tokens and .accepted_per_round (the drafts kept in each round,
                  0..k) to have the law of the rounds checked as well

One round, with `context` = the prompt plus every token emitted so far:

    k_round = min(k, remaining - 1)       never draft what could not be emitted
    x_i ~ q_i = draft_next(context + [x_1..x_{i-1}])                       i = 1..k_round
    p_i = target_next(context + [x_1..x_{i-1}])    the row *before* x_i scores it; p_{k+1}
                                                   (after every draft) is the bonus row
    keep x_i with probability min(1, p_i(x_i) / q_i(x_i)), in order; at the first
    rejection draw the token from norm(max(0, p_i - q_i)); after all k_round kept, draw the
    bonus from p_{k+1}. Emit the kept drafts and that token, cut just after EOS and at
    max_new_tokens; stop at EOS or at the limit.

What the grader checks (on a tiny GPT pair, V = 5):

* greedy (one-hot rows), exact: every draft kept; a correction; EOS inside a round; the
  length limit with one token left;
* 4 000 sampled runs of two setups (T = 1, k = 2; T = 0.7 with top-k and EOS, k = 3): the
  tokens' law against the target's own, by chi-square; the drafts kept in rounds 1 and 2,
  when you return them;
* the calls: draft_next is asked at all (else this is plain sampling); no context is asked
  twice in a run (a real pass computes each position once); when you return the rounds, at
  most k + 1 target rows per round. One target row per emitted token is the floor here, not
  a fault: with plain callables nothing is batched, so asking p_i only when x_1..x_{i-1} were
  kept (lazily) is as good as it gets.

Traps: judging x_i with the row after it; a next round whose context still holds rejected
drafts; tokens after EOS; drafting k when one token is left (the rounds' law shows it);
accepted_per_round counting the emitted tokens instead of the kept drafts; calling
target_next again for a row you already had.

You may use numpy only (the point is to write it). A worked solution is in
solutions/callables_loop_solution.py -- try first.
"""

from __future__ import annotations

import numpy as np


def speculative_sample(
    target_next,
    draft_next,
    prompt,
    *,
    k: int,
    max_new_tokens: int,
    rng: np.random.Generator,
    eos_id: int | None = None,
):
    # prompt [n] ids -> tokens [<= max_new_tokens] (or .tokens and .accepted_per_round)
    raise NotImplementedError(
        "write speculative_sample() in notebooks/exercises/my_callables_loop.py, then grade "
        "it with: .venv/bin/specdec grade "
        "notebooks/exercises/my_callables_loop.py:speculative_sample"
    )
