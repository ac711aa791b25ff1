"""ModelDrafter.propose, the drafting of notebook 03: k tokens one after another, each with the
exact row q_i it was drawn from, and a cache that holds everything fed, as temporary."""

from __future__ import annotations

import numpy as np
import pytest

from reference import ModelDrafter, SamplingParams, probabilities

from .helpers import GREEDY

SOFT = SamplingParams(temperature=0.8)
CONTEXT = np.array([3, 1, 4, 1, 5, 9, 2, 6])


@pytest.mark.parametrize("sampling", [SOFT, GREEDY], ids=["T=0.8", "greedy"])
def test_each_row_is_the_draft_models_law_after_the_drafts_before_it(draft, sampling):
    """q_i = probabilities(forward(context + x_1 .. x_{i-1}) at its last position): the
    cached drafter returns what an uncached forward over that history gives."""
    proposal = ModelDrafter(draft).propose(CONTEXT, 4, sampling, np.random.default_rng(0))
    assert proposal.tokens.shape == (4,) and proposal.q.shape == (4, draft.n_vocab)
    for i in range(4):
        history = np.concatenate([CONTEXT, proposal.tokens[:i]])
        expected = probabilities(draft.forward(history)[-1], sampling)
        np.testing.assert_allclose(proposal.q[i], expected, atol=1e-6, err_msg=f"q_{i + 1}")


def test_each_draft_is_a_sample_of_its_own_row(draft):
    """Over many proposals, x_1 follows q_1 (a chi-square-free check: every drawn token has
    q_1 > 0, and the most likely token of q_1 is drawn about q_1(argmax) of the time)."""
    drafter = ModelDrafter(draft)
    rng = np.random.default_rng(1)
    firsts = []
    for _ in range(400):
        proposal = drafter.propose(CONTEXT, 1, SOFT, rng)
        firsts.append(int(proposal.tokens[0]))
    q1 = proposal.q[0]
    assert all(q1[t] > 0 for t in firsts)
    top = int(np.argmax(q1))
    share = firsts.count(top) / len(firsts)
    sd = np.sqrt(q1[top] * (1 - q1[top]) / len(firsts))
    assert abs(share - q1[top]) < 5 * sd, (share, q1[top])


def test_greedy_drafts_are_the_argmax_with_one_hot_rows(draft):
    proposal = ModelDrafter(draft).propose(CONTEXT, 4, GREEDY, np.random.default_rng(0))
    np.testing.assert_array_equal(proposal.tokens, proposal.q.argmax(axis=1))
    np.testing.assert_array_equal(proposal.q[np.arange(4), proposal.tokens], 1.0)
    np.testing.assert_array_equal(proposal.q.sum(axis=1), 1.0)


def test_the_cache_holds_context_and_drafts_but_the_last_all_temporary(draft):
    """After propose: the context and x_1 .. x_{k-1} are written, none committed (x_k was
    never fed: nobody needs q_{k+1}). commit(2) keeps context + x_1 x_2; rollback drops x_3."""
    drafter = ModelDrafter(draft)
    drafter.propose(CONTEXT, 4, SOFT, np.random.default_rng(0))
    assert (drafter.cache.length, drafter.cache.pending) == (0, len(CONTEXT) + 3)
    drafter.commit(2)
    assert (drafter.cache.length, drafter.cache.pending) == (len(CONTEXT) + 2, 1)
    drafter.rollback()
    assert (drafter.cache.length, drafter.cache.pending) == (len(CONTEXT) + 2, 0)
