"""Valid alternatives: loops that are exact but differ from the reference in a declared way."""

from __future__ import annotations

from unittest import mock

import reference.speculative as speculative


def always_drafts_k(target, drafter, prompt, **kwargs):
    """The reference loop with the other exact round policy: every round drafts k tokens and
    the emitted tokens are cut at the length limit (`specdec grade --policy full`)."""
    with mock.patch.object(speculative, "round_draft_length", lambda k, remaining: k):
        return speculative.speculative_generate(target, drafter, prompt, **kwargs)


def keep_with_p_resample_without_x(p_target, q_draft, draft_tokens, rng):
    """An exact rule with lower acceptance (EAGLE's `evaluate_posterior`, transformers 4.36's
    sampling path): keep x with probability p(x); after a rejection, sample from p with x
    removed. Exact for any q (the first token is x with p(x), else y != x with
    (1 - p(x)) p(y) / (1 - p(x))), but it keeps sum(q p) of the drafts, not sum(min(p, q))."""
    for i, x in enumerate(draft_tokens):
        x = int(x)
        if rng.random() < p_target[i, x]:
            continue
        rest = p_target[i].copy()
        rest[x] = 0.0
        return i, int(rng.choice(len(rest), p=rest / rest.sum()))
    k = len(draft_tokens)
    return k, int(rng.choice(p_target.shape[1], p=p_target[k]))
