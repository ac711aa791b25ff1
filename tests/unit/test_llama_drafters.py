"""Every drafter on a Llama-family pair (reference/llama.py): a GQA 2:1 target of three blocks
and a one-block draft, random weights.

Greedy output equals the target's own greedy generation wherever the method is exact (all of
them here: typical acceptance is lossy only when sampling), and after the run the target's
cache, and the drafter's where it has one, hold exactly what a fresh prefill of the tokens
they committed would hold. The drafters trained on a Llama target (EAGLE, a trained exit
norm) are in test_llama_trained_drafters.py."""

from __future__ import annotations

import numpy as np
import pytest

import reference.batch
from reference import (
    EarlyExitDrafter,
    HeadsDrafter,
    HybridDrafter,
    LookupDrafter,
    ModelDrafter,
    generate,
    speculative_generate,
    speculative_generate_batch,
)
from reference.config import LlamaConfig
from reference.early_exit import block_of, lower_layers
from reference.llama import Llama, init_llama_params
from reference.model import causal_placement
from reference.tree import POINT, ModelTreeDrafter, tree_speculative_generate
from reference.typical import TypicalThreshold, typical_tree_speculative_generate

from .helpers import GREEDY, assert_cache_is_prefill

V = 24
# a prompt that repeats itself, so that prompt lookup finds n-grams to copy
PROMPT = [3, 7, 1, 9, 3, 7, 1, 9, 3, 7]
NEW = 12


class RecordingLlama(Llama):
    """A Llama that keeps every cache it makes, so a test can read the loop's target cache."""

    def __init__(self, config, params) -> None:
        super().__init__(config, params)
        self.caches = []

    def new_cache(self, capacity=None):
        cache = super().new_cache(capacity)
        self.caches.append(cache)
        return cache


def llama(seed: int, n_embd: int, n_layer: int, n_head: int, n_kv_head: int) -> Llama:
    cfg = LlamaConfig(
        n_vocab=V, n_ctx=64, n_embd=n_embd, n_head=n_head, n_kv_head=n_kv_head, n_layer=n_layer,
        n_inner=24,
    )  # fmt: skip
    return Llama(cfg, init_llama_params(cfg, np.random.default_rng(seed), std=0.5))


@pytest.fixture(scope="module")
def target() -> Llama:  # untied lm_head, 4 query heads sharing 2 key/value heads
    return llama(0, n_embd=16, n_layer=3, n_head=4, n_kv_head=2)


@pytest.fixture(scope="module")
def draft(target) -> Llama:
    # one block instead of three: a copy of the target's first block, its embedding, norm and
    # lm_head, so that its drafts are sometimes accepted (an independent random draft never
    # agrees with a random target, and a run with no accepted draft would not test commits)
    cut = lower_layers(target, 1)
    return Llama(cut.config, {name: w.copy() for name, w in cut.params.items()})


def greedy_tokens(target, prompt=PROMPT, n=NEW) -> list[int]:
    return generate(target, prompt, max_new_tokens=n, rng=np.random.default_rng(0), sampling=GREEDY)


def assert_committed_is_prefill(model, cache, tokens, what: str, lag: int = 2) -> None:
    # after a run a cache holds a prefix of the run's tokens, nothing temporary: that prefix
    # equals a fresh prefill (the last `lag` tokens at most are not fed yet)
    assert cache.pending == 0, f"{what}: {cache.pending} temporary slots left"
    assert len(tokens) - lag <= cache.length <= len(tokens), (what, cache.length, len(tokens))
    assert_cache_is_prefill(model, cache, tokens[: cache.length], what)


def random_heads(n: int, C: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        name: (rng.standard_normal(shape) * 0.3).astype(np.float32)
        for i in range(n)
        for name, shape in ((f"heads.{i}.weight", (C, C)), (f"heads.{i}.bias", (C,)))
    }


CHAIN_DRAFTERS = {
    "model": lambda t, d: ModelDrafter(d),
    "lookup": lambda t, d: LookupDrafter(V, t.config.n_ctx),
    "hybrid": lambda t, d: HybridDrafter(LookupDrafter(V, t.config.n_ctx), ModelDrafter(d)),
    # the target's own first block, its RMSNorm and lm_head: no trained part
    "early-exit": lambda t, d: EarlyExitDrafter(t, 1),
    # random heads: useless drafts, but the output law is the target's whatever they are
    "heads": lambda t, d: HeadsDrafter(t, random_heads(3, t.config.n_embd)),
}


@pytest.mark.parametrize("name", list(CHAIN_DRAFTERS))
def test_chain_drafters_give_greedy_output_and_prefill_caches(target, draft, name):
    recording = RecordingLlama(target.config, target.params)
    drafter = CHAIN_DRAFTERS[name](recording, draft)
    result = speculative_generate(
        recording, drafter, PROMPT, k=3, max_new_tokens=NEW, rng=np.random.default_rng(0),
        sampling=GREEDY,
    )  # fmt: skip
    assert result.tokens == greedy_tokens(target), name
    assert result.stats.accepted > 0  # some drafts were committed, not only bonus tokens
    tokens = PROMPT + result.tokens
    assert_committed_is_prefill(target, recording.caches[-1], tokens, f"{name}: target")
    # the draft model's cache, where there is one; a hybrid's fallback is not fed during the
    # rounds lookup drafts, so it may lag by more (it catches up when it drafts again)
    model_drafter = drafter.fallback if name == "hybrid" else drafter
    lag = len(tokens) if name == "hybrid" else 2
    if hasattr(model_drafter, "model"):
        own = model_drafter.model
        assert_committed_is_prefill(own, model_drafter.cache, tokens, f"{name}: drafter", lag)


def test_sampled_chain_leaves_prefill_caches(target, draft):
    """At T = 1 rollbacks happen at every rejection: the committed slots stay a prefill."""
    recording = RecordingLlama(target.config, target.params)
    drafter = ModelDrafter(draft)
    result = speculative_generate(
        recording, drafter, PROMPT, k=4, max_new_tokens=NEW, rng=np.random.default_rng(0)
    )
    assert result.stats.rejections > 0 and result.stats.accepted > 0  # rolled back and kept
    tokens = PROMPT + result.tokens
    assert_committed_is_prefill(target, recording.caches[-1], tokens, "target")
    assert_committed_is_prefill(draft, drafter.cache, tokens, "draft")


def test_early_exit_cuts_a_llama_by_its_block_names(target):
    """The cut model keeps blocks 0..L'-1, the embedding, model.norm and lm_head (the same
    arrays), and is a Llama itself: its forward equals the target's own first blocks."""
    assert [block_of(n) for n in ("h.2.ln_1.weight", "model.layers.2.mlp.up_proj.weight")] == [2, 2]
    assert block_of("model.norm.weight") is None and block_of("lm_head.weight") is None
    cut = lower_layers(target, 2)
    assert isinstance(cut, Llama) and cut.config.n_layer == 2
    assert cut.params["lm_head.weight"] is target.params["lm_head.weight"]
    x = target.embed(np.array(PROMPT), None)
    expected = target.blocks(x, None, causal_placement(0, len(PROMPT)), 0, 2)
    np.testing.assert_allclose(cut.residual(np.array(PROMPT)), expected, rtol=1e-6, atol=1e-6)


def test_a_static_tree_gives_greedy_output_and_a_prefill_cache(target, draft):
    recording = RecordingLlama(target.config, target.params)
    drafter = ModelTreeDrafter(draft, (2, 2, 1), POINT)
    result = tree_speculative_generate(
        recording, drafter, PROMPT, max_new_tokens=NEW, rng=np.random.default_rng(0),
        sampling=GREEDY,
    )  # fmt: skip
    assert result.tokens == greedy_tokens(target)
    assert_committed_is_prefill(target, recording.caches[-1], PROMPT + result.tokens, "target")


def test_typical_acceptance_at_greedy_gives_greedy_output(target, draft):
    """Lossy when sampling; at T = 0 only the argmax passes, so it emits the greedy tokens."""
    recording = RecordingLlama(target.config, target.params)
    result = typical_tree_speculative_generate(
        recording, ModelTreeDrafter(draft, (2, 1, 1), POINT), PROMPT, max_new_tokens=NEW,
        rng=np.random.default_rng(0), threshold=TypicalThreshold(), sampling=GREEDY,
    )  # fmt: skip
    assert result.tokens == greedy_tokens(target)
    assert_committed_is_prefill(target, recording.caches[-1], PROMPT + result.tokens, "target")


def test_a_ragged_batch_gives_each_rows_greedy_output_and_prefill_rows(target, draft, monkeypatch):
    made = []

    def recording_batch_cache(model, batch_size, capacity=None):
        made.append(new_batch_cache(model, batch_size, capacity))
        return made[-1]

    new_batch_cache = reference.batch.new_batch_cache
    monkeypatch.setattr(reference.batch, "new_batch_cache", recording_batch_cache)
    prompts = [PROMPT, [5, 2], [8, 8, 4, 1, 0, 6]]
    limits = NEW
    drafters = [ModelDrafter(draft) for _ in prompts]
    results = speculative_generate_batch(
        target, drafters, prompts, k=3, max_new_tokens=limits, rng=np.random.default_rng(0),
        sampling=GREEDY,
    )  # fmt: skip
    for b, (prompt, result) in enumerate(zip(prompts, results, strict=True)):
        assert result.tokens == greedy_tokens(target, prompt), f"row {b}"
        tokens = list(prompt) + result.tokens
        assert_committed_is_prefill(target, made[-1].row(b), tokens, f"target row {b}")
        assert_committed_is_prefill(draft, drafters[b].cache, tokens, f"drafter {b}")
