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

Read first: notebook 05 (the rule and why it keeps the target's law, a whole round
included), notebook 04 (which of the target's rows judges which draft) and notebook 07 (the
round, end to end). With callables there are no caches: the round is the whole exercise.

What a correct loop keeps true:

* each draft x_i is drawn from the draft's distribution given the context and the drafts
  before it, and judged against the target's distribution for the same position, with
  notebook 05's rule, draft after draft, stopping at the first refusal;
* the round then emits the kept drafts and one more token: the replacement of notebook 05
  after a refusal, or the bonus from the target's distribution after every draft; the
  next round starts from exactly what was emitted (never a refused draft);
* a round never drafts a token that could not be emitted (it emits up to one token more
  than it drafts), cuts just after the first EOS and at max_new_tokens, and the run stops
  at EOS or at the limit;
* each target row is asked for once at most, and only when it is needed (a row after a
  refused draft never is); accepted_per_round counts the drafts kept, 0..k, per round.

A worked example with greedy (one-hot) rows, k = 2, max_new_tokens = 3, prompt [0]: the
draft proposes 1 then 2; the target's argmax after [0] is 1 and after [0, 1] is 3. Round 1
keeps 1, refuses 2 and emits 1 3 (accepted 1). One token is left: round 2 drafts nothing,
asks the target for its row after [0, 1, 3] and emits that argmax (accepted 0). The run
returns 3 tokens, accepted_per_round [1, 0]; the target was asked for the rows after [0],
[0, 1] and [0, 1, 3], once each.

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

Traps: judging x_i with another position's row; a next round whose context still holds
refused drafts; tokens after EOS; drafting k when one token is left (the rounds' law shows
it); accepted_per_round counting the emitted tokens instead of the kept drafts; calling
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
