"""The twin's ragged batch: the reference batch's tokens at greedy, one transfer per round."""

from __future__ import annotations

import numpy as np
import pytest

import gpu
import reference
from gpu.device.backend import counting_transfers, to_host
from reference.sampling import GREEDY, SamplingParams
from reference.verification import verify
from specdec.timing import StageClock

PROMPTS = [
    b"def area(self):\n    return self.w",
    b"import os\n",
    b"    for i, line in enumerate(lines):\n        if line.startswith('#'):\n            ",
]


def ids(text: bytes) -> list[int]:
    return list(text)


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_twin_batch_equals_the_reference_batch(pair, k):
    """Prompts of different lengths, an EOS some rows may hit: the same tokens and the same
    accepted counts per round as the reference's batch (and so as single runs)."""
    target, draft = pair
    prompts = [ids(t) for t in PROMPTS]
    kw = dict(k=k, max_new_tokens=40, rng=np.random.default_rng(0), sampling=GREEDY, eos_id=10)
    ours = gpu.speculative_generate_batch(
        gpu.GPT(target.config, target.params),
        [gpu.ModelDrafter(draft) for _ in prompts],
        prompts,
        **kw,
    )
    theirs = reference.speculative_generate_batch(
        target, [reference.ModelDrafter(draft) for _ in prompts], prompts, **kw
    )
    assert [r.tokens for r in ours] == [r.tokens for r in theirs]
    assert [r.stats.accepted_per_round for r in ours] == [
        r.stats.accepted_per_round for r in theirs
    ]
    assert len({len(r.tokens) for r in theirs}) > 1 or len({r.stats.rounds for r in theirs}) > 1


def test_one_transfer_per_batched_round(pair):
    """However many sequences, a round brings its outcome back in one copy: the transfers
    equal the number of rounds of the longest-running sequence."""
    target, draft = pair
    prompts = [ids(t) for t in PROMPTS]
    with counting_transfers() as log:
        results = gpu.speculative_generate_batch(
            gpu.GPT(target.config, target.params),
            [gpu.ModelDrafter(draft) for _ in prompts],
            prompts,
            k=3,
            max_new_tokens=30,
            rng=np.random.default_rng(2),
            sampling=SamplingParams(temperature=0.8),
        )
    assert log.count == max(r.stats.rounds for r in results)


def test_batched_forward_rows_equal_the_references(pair):
    """Ragged rows through the twin's batched forward give the reference's logits."""
    target, _ = pair
    twin = gpu.GPT(target.config, target.params)
    tokens = np.array([[1, 2, 3, 4], [5, 6, 0, 0], [7, 0, 0, 0]])
    n_new = np.array([4, 2, 1])
    ours_cache, theirs_cache = gpu.new_batch_cache(twin, 3), reference.new_batch_cache(target, 3)
    ours = to_host(gpu.batched_forward(twin, tokens, n_new, ours_cache))
    theirs = reference.batched_forward(target, tokens, n_new, theirs_cache)
    real = np.arange(4)[None, :] < n_new[:, None]
    np.testing.assert_allclose(ours[real], theirs[real], atol=1e-4)
    assert np.isnan(ours[~real]).all()
    with pytest.raises(ValueError, match="tokens\\[1\\] contains id 999"):
        gpu.batched_forward(
            twin, np.array([[1, 2], [999, 1], [3, 0]]), np.array([2, 1, 1]), ours_cache
        )


def test_the_twin_batch_has_the_single_loops_trace_clock_and_verify(pair):
    """The batch is the single loop's `Run` per row on the twin too (issue 30): a trace per
    row on the host, a clock charged per stage, and another verify run on the host in every
    row, with the tokens of the twin's own verify at greedy."""
    target, draft = pair
    prompts = [ids(t) for t in PROMPTS]
    calls, clock = [], StageClock()

    def counted(p, q, tokens, rng):
        calls.append(len(tokens))
        return verify(p, q, tokens, rng)

    def run(**kw):
        return gpu.speculative_generate_batch(
            gpu.GPT(target.config, target.params),
            [gpu.ModelDrafter(draft) for _ in prompts],
            prompts,
            k=3,
            max_new_tokens=24,
            rng=np.random.default_rng(0),
            sampling=GREEDY,
            **kw,
        )

    ours = run(trace=True, verify_fn=counted, clock=clock)
    theirs = run()
    assert [r.tokens for r in ours] == [r.tokens for r in theirs]
    assert len(calls) == sum(r.stats.rounds for r in ours)
    rounds = max(r.stats.rounds for r in ours)
    assert [clock.calls[s] for s in ("draft", "target", "verify", "other")] == [rounds] * 4
    for r in ours:
        assert len(r.trace) == r.stats.rounds
        assert [t for rnd in r.trace for t in rnd.emitted] == r.tokens
        assert isinstance(r.trace[0].p_rows, np.ndarray)  # copied to the host
