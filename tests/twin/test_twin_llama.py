"""The twin's Llama family (gpu/llama.py) against the reference's (reference/llama.py).

Logits: the twin's q/k/v and gate/up are one matmul each and its SiLU is the tanh form, so
the numbers agree to float32 rounding, not bit for bit: the largest difference measured on
these tiny models (std 0.5 weights, logits up to ~8) was 1.8e-5, with GQA 4:1; the tests
allow 1e-4 (a wrong position or head gives differences of order 1). Every pass the loops
make -- an append, a rollback, a tree, a ragged batch -- is held against an uncached pass,
and every twin drafter's greedy run against the reference's tokens."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import gpu
import gpu.tree as twin_tree
import gpu.weights
import reference
import reference.eagle
import reference.tree as ref_tree
from gpu.device.backend import counting_launches, to_host
from gpu.device.kernels import MAX_ROWS
from gpu.drafters import as_twin_drafter
from gpu.model import as_twin_model
from reference.config import Llama3RopeScaling, LlamaConfig
from reference.early_exit import EXIT_RMS_NORM, lower_layers
from reference.llama import init_llama_params
from reference.sampling import GREEDY, SamplingParams
from reference.tree import POINT
from reference.tree.forward import tree_forward
from reference.weights import write_safetensors

V = 24
PROMPT = [3, 7, 1, 9, 3, 7, 1, 9, 3, 7]  # repeats itself: prompt lookup finds n-grams
NEW = 12
ATOL = 1e-4
BASE = LlamaConfig(n_vocab=V, n_ctx=64, n_embd=16, n_head=4, n_kv_head=2, n_layer=2, n_inner=24)
CONFIGS = {
    "GQA 1:1": replace(BASE, n_kv_head=4),
    "GQA 2:1, untied": BASE,
    "GQA 4:1": replace(BASE, n_kv_head=1),
    "tied output layer": replace(BASE, tie_word_embeddings=True),
    "Qwen2's q/k/v biases": replace(BASE, model_type="qwen2", attention_bias=True),
    "Llama 3 rope scaling": replace(
        BASE, rope_theta=500.0, rope_scaling=Llama3RopeScaling(8.0, 1.0, 4.0, 16)
    ),
    "Mistral, head_dim 12 (not C / nh)": replace(BASE, model_type="mistral", head_dim=12),
}


def llama(cfg: LlamaConfig, seed: int = 0) -> reference.Llama:
    return reference.Llama(cfg, init_llama_params(cfg, np.random.default_rng(seed), std=0.5))


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def target() -> reference.Llama:  # 3 blocks, 4 query heads sharing 2 key/value heads
    return llama(replace(BASE, n_layer=3))


@pytest.fixture(scope="module")
def draft(target) -> reference.Llama:
    # the target's first block as a model of its own: its drafts are sometimes accepted
    cut = lower_layers(target, 1)
    return reference.Llama(cut.config, {name: w.copy() for name, w in cut.params.items()})


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_twins_logits_equal_the_references(name):
    """A short pass (the fused linears' rows) and one longer than MAX_ROWS (their bodies)."""
    model = llama(CONFIGS[name])
    twin = as_twin_model(model)
    assert isinstance(twin, gpu.Llama) and twin.config is model.config
    tokens = np.random.default_rng(1).integers(0, V, size=MAX_ROWS + 9)
    for T in (5, len(tokens)):
        ours = to_host(twin.forward(tokens[:T]))
        np.testing.assert_allclose(ours, model.forward(tokens[:T]), rtol=0, atol=ATOL)


def test_cached_passes_equal_an_uncached_one_through_an_append_and_a_rollback(target):
    twin = as_twin_model(target)
    tokens = np.array(PROMPT + [5, 2, 8])
    whole = to_host(twin.forward(tokens))
    cache = twin.new_cache()
    first = twin.forward(tokens[:6], cache)
    cache.commit(6)
    twin.forward(np.array([11, 12, 13]), cache)  # drafts that are all rejected
    cache.rollback()
    rest = twin.forward(tokens[6:], cache)  # their slots rewritten at the same positions
    both = np.concatenate([to_host(first), to_host(rest)])
    np.testing.assert_allclose(both, whole, rtol=0, atol=ATOL)


def test_a_tree_pass_equals_each_nodes_path_run_uncached(target):
    """Siblings share a position (length + depth): each node's row is its path's last."""
    twin = as_twin_model(target)
    cache = twin.new_cache()
    twin.forward(np.array(PROMPT), cache)
    cache.commit(len(PROMPT))
    tokens, parents = np.array([4, 6, 2, 8, 5]), np.array([-1, -1, 0, 0, 1])
    rows = to_host(tree_forward(twin, tokens, parents, cache))
    for j in range(len(tokens)):
        path, node = [], j
        while node != -1:
            path, node = [int(tokens[node])] + path, parents[node]
        alone = to_host(twin.forward(np.array(PROMPT + path)))[-1]
        np.testing.assert_allclose(rows[j], alone, rtol=0, atol=ATOL, err_msg=f"node {j}")
        np.testing.assert_allclose(rows[j], target.forward(PROMPT + path)[-1], atol=ATOL)


def test_a_ragged_batch_equals_each_row_run_alone(target):
    twin = as_twin_model(target)
    cache = gpu.new_batch_cache(twin, 3)
    assert cache.k.shape[2] == target.config.n_kv_head  # [B, L, nkv, N, hs]: GQA's smaller cache
    prefill = np.array([[1, 2, 3, 4], [5, 6, 0, 0], [7, 0, 0, 0]])
    n_prefill = np.array([4, 2, 1])
    gpu.batched_forward(twin, prefill, n_prefill, cache)
    cache.commit(n_prefill)
    step = np.array([[9, 8], [3, 0], [2, 2]])
    n_step = np.array([2, 1, 2])
    ours = to_host(gpu.batched_forward(twin, step, n_step, cache))
    for b in range(3):
        row = np.concatenate([prefill[b, : n_prefill[b]], step[b, : n_step[b]]])
        alone = to_host(twin.forward(row))[-n_step[b] :]
        np.testing.assert_allclose(ours[b, : n_step[b]], alone, rtol=0, atol=ATOL)


def random_heads(n: int, C: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        name: (rng.standard_normal(shape) * 0.3).astype(np.float32)
        for i in range(n)
        for name, shape in ((f"heads.{i}.weight", (C, C)), (f"heads.{i}.bias", (C,)))
    }


CHAIN = {
    "draft model": lambda core, t, d: core.ModelDrafter(d),
    "lookup": lambda core, t, d: core.LookupDrafter(V, t.config.n_ctx),
    "hybrid": lambda core, t, d: core.HybridDrafter(
        core.LookupDrafter(V, t.config.n_ctx), core.ModelDrafter(d)
    ),
    "early exit, no head": lambda core, t, d: core.EarlyExitDrafter(t, 1),
    "early exit, a trained norm": lambda core, t, d: core.EarlyExitDrafter(
        t, 2, {EXIT_RMS_NORM[0]: np.random.default_rng(3).uniform(0, 2, t.config.n_embd)}
    ),
    "extra heads": lambda core, t, d: core.HeadsDrafter(t, random_heads(3, t.config.n_embd)),
}


@pytest.mark.parametrize("name", list(CHAIN))
def test_every_twin_chain_drafter_gives_the_references_greedy_tokens(target, draft, name):
    """The twin's own drafter on twin models, and the reference's handed to the twin loop."""
    kw = dict(k=3, max_new_tokens=NEW, sampling=GREEDY)
    theirs = reference.speculative_generate(
        target, CHAIN[name](reference, target, draft), PROMPT, rng=rng(), **kw
    )
    twins = as_twin_model(target), as_twin_model(draft)
    ours = gpu.speculative_generate(twins[0], CHAIN[name](gpu, *twins), PROMPT, rng=rng(), **kw)
    handed = gpu.speculative_generate(
        target, CHAIN[name](reference, target, draft), PROMPT, rng=rng(), **kw
    )
    assert ours.tokens == theirs.tokens == handed.tokens
    rounds = theirs.stats.accepted_per_round  # the same drafts: the same rounds
    assert ours.stats.accepted_per_round == rounds == handed.stats.accepted_per_round
    if name != "extra heads":  # random heads: useless drafts, only the output law is held
        assert ours.stats.accepted > 0


TREES = {
    "draft model": lambda t, d: ref_tree.ModelTreeDrafter(d, (2, 2, 1), POINT),
    "extra heads": lambda t, d: ref_tree.HeadsTreeDrafter(
        reference.HeadsDrafter(t, random_heads(3, t.config.n_embd)), (2, 2, 1)
    ),
}


@pytest.mark.parametrize("name", list(TREES))
def test_static_trees_on_the_twin_give_the_references_greedy_tokens(target, draft, name):
    kw = dict(max_new_tokens=NEW, sampling=GREEDY)
    theirs = ref_tree.tree_speculative_generate(
        target, TREES[name](target, draft), PROMPT, rng=rng(), **kw
    )
    handed = TREES[name](target, draft)
    assert type(as_twin_drafter(handed)).__module__ == "gpu.tree"  # swapped for its twin
    ours = twin_tree.tree_speculative_generate(target, handed, PROMPT, rng=rng(), **kw)
    assert ours.tokens == theirs.tokens
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round


def test_a_twin_batch_gives_each_rows_greedy_tokens(target, draft):
    prompts = [PROMPT, [5, 2], [8, 8, 4, 1, 0, 6]]
    kw = dict(k=3, max_new_tokens=NEW, sampling=GREEDY)
    theirs = reference.speculative_generate_batch(
        target, [reference.ModelDrafter(draft) for _ in prompts], prompts, rng=rng(), **kw
    )
    ours = gpu.speculative_generate_batch(
        target, [reference.ModelDrafter(draft) for _ in prompts], prompts, rng=rng(), **kw
    )
    assert [r.tokens for r in ours] == [r.tokens for r in theirs]


def test_no_twin_llama_step_is_captured_as_a_graph(target, draft):
    """On the stand-in graphs are on, and a capture refuses every launch that is not a fused
    kernel: the twin Llama's bodies would be refused, so its steps are launched one by one."""
    expected = reference.generate(target, PROMPT, max_new_tokens=NEW, rng=rng(), sampling=GREEDY)
    with counting_launches() as log:
        result = gpu.speculative_generate(
            target, reference.ModelDrafter(draft), PROMPT, k=3, max_new_tokens=NEW, rng=rng(),
            sampling=GREEDY,
        )  # fmt: skip
    assert result.tokens == expected
    assert log.by_name.get("graph launch", 0) == 0 and log.count > 0


EAGLE_LAYERS = {"EAGLE-1": None, "EAGLE-3, blocks 1, 2, 3": (1, 2, 3)}


def eagle_params(target, layers) -> dict:
    # random weights wide enough that a wrong position, head or feature changes the drafts
    rng = np.random.default_rng(1)
    return reference.eagle.init_eagle_params(target.config, rng, std=0.3, feature_layers=layers)


@pytest.mark.parametrize("name", list(EAGLE_LAYERS))
def test_a_twin_eagle_proposal_on_a_llama_target_has_the_references_q_rows(target, name):
    """The twin's one-block Llama (its rotations at the drafted slots' positions) gives the
    reference's sampled drafts and q rows, from the same features and uniforms."""
    layers = EAGLE_LAYERS[name]
    context = np.array(PROMPT)
    features = target.layer_features(context, None, None, layers or (target.config.n_layer,))
    drafts = []
    for core in (reference, gpu):
        drafter = core.EagleDrafter(target, eagle_params(target, layers), layers)
        drafter.observe_features(features[:-1])  # f(0..n-2), as a round hands them over
        draft = drafter.propose(context, 4, SamplingParams(1.0), np.random.default_rng(5))
        drafts.append((to_host(draft.tokens), to_host(draft.q)))
    (ref_tokens, ref_q), (twin_tokens, twin_q) = drafts
    print(f"{name}: max |q twin - q reference| = {np.abs(twin_q - ref_q).max():.1e}")
    assert np.array_equal(twin_tokens, ref_tokens)
    assert np.abs(twin_q - ref_q).max() < 1e-5


@pytest.mark.parametrize("name", list(EAGLE_LAYERS))
def test_eagle_chains_and_eagle2_trees_on_the_twin_give_the_references_greedy_tokens(target, name):
    """Chain: the twin's drafter on the twin target, and the reference's handed to the twin
    loop; EAGLE-2's dynamic tree: the reference's tree drafter handed to the twin's loop."""
    layers, params = EAGLE_LAYERS[name], eagle_params(target, EAGLE_LAYERS[name])
    kw = dict(k=3, max_new_tokens=NEW, sampling=GREEDY)
    theirs = reference.speculative_generate(
        target, reference.EagleDrafter(target, params, layers), PROMPT, rng=rng(), **kw
    )
    ours = gpu.speculative_generate(
        as_twin_model(target), gpu.EagleDrafter(target, params, layers), PROMPT, rng=rng(), **kw
    )
    handed = gpu.speculative_generate(
        target, reference.EagleDrafter(target, params, layers), PROMPT, rng=rng(), **kw
    )
    assert ours.tokens == theirs.tokens == handed.tokens
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round
    assert handed.stats.accepted_per_round == theirs.stats.accepted_per_round

    def tree():
        return ref_tree.EagleTreeDrafter(reference.EagleDrafter(target, params, layers), 6, 3)

    kw = dict(max_new_tokens=NEW, sampling=GREEDY)
    theirs = ref_tree.tree_speculative_generate(target, tree(), PROMPT, rng=rng(), **kw)
    ours = twin_tree.tree_speculative_generate(target, tree(), PROMPT, rng=rng(), **kw)
    assert ours.tokens == theirs.tokens
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round


def test_a_twin_llama_is_built_from_a_checkpoint_folder(tmp_path, target):
    (tmp_path / "config.json").write_text(json.dumps(target.config.to_hf_dict()))
    write_safetensors(tmp_path / "model.safetensors", target.params, metadata={"format": "pt"})
    twin = gpu.weights.load_model(tmp_path)
    assert isinstance(twin, gpu.Llama)
    np.testing.assert_allclose(to_host(twin.forward(PROMPT)), target.forward(PROMPT), atol=ATOL)


def test_a_twin_llama_running_the_kernels_gives_the_references_tokens(kernels_in_the_emulator):
    """The fused linears as kernels.cu computes them (the emulator), reading the [in, out]
    copies; graphs are on there too, and a Llama step must not be captured."""
    cfg = replace(BASE, n_embd=32, n_layer=1, n_inner=40, model_type="qwen2", attention_bias=True)
    target, draft = llama(cfg), llama(replace(cfg, n_embd=16, n_inner=24), seed=1)
    twin = as_twin_model(target)
    np.testing.assert_allclose(to_host(twin.forward(PROMPT)), target.forward(PROMPT), atol=ATOL)
    kw = dict(k=3, max_new_tokens=8, sampling=GREEDY)
    theirs = reference.speculative_generate(
        target, reference.ModelDrafter(draft), PROMPT, rng=rng(), **kw
    )
    ours = gpu.speculative_generate(twin, reference.ModelDrafter(draft), PROMPT, rng=rng(), **kw)
    assert ours.tokens == theirs.tokens
