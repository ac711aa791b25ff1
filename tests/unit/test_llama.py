"""The Llama family (reference/llama.py): its config, RoPE, GQA, and the GPT interfaces it shares.

Tiny random models of every variant (GQA 1:1, 2:1, 4:1; tied and untied; Qwen2's biases;
Llama 3's rope scaling; a head width apart from C / nh) run through what the article teaches:
cached = uncached through appends and rollbacks, a tree pass, a ragged batch, and greedy
speculative decoding = greedy generation. Logits against transformers' own model, read from
files it saved: tests/interop/test_hf_llama.py."""

from __future__ import annotations

import numpy as np
import pytest

from reference import ModelDrafter, generate
from reference.batch import batched_forward, new_batch_cache
from reference.config import Llama3RopeScaling, LlamaConfig
from reference.llama import Llama, init_llama_params, rope_frequencies, rope_tables, rotate
from reference.tree import compact, tree_forward

from .helpers import GREEDY, assert_cache_is_prefill, assert_close_scaled, speculative_run

V = 24
SCALING = Llama3RopeScaling(
    factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32
)
# name -> LlamaConfig keywords beside V, n_ctx 64, C 16, L 2
VARIANTS = {
    "mha_tied": dict(n_head=4, n_kv_head=4, tie_word_embeddings=True),
    "gqa2_qwen2_biases": dict(n_head=4, n_kv_head=2, model_type="qwen2"),
    # rope_theta 10, hs = 4: wavelengths 6.3 (kept by llama3's scaling) and 19.9 (blended)
    "gqa4_llama3_scaling": dict(n_head=4, n_kv_head=1, rope_theta=10.0, rope_scaling=SCALING),
    "mistral_head_dim": dict(n_head=4, n_kv_head=2, head_dim=6, model_type="mistral"),
}


def tiny(seed: int = 0, std: float = 0.5, n_embd: int = 16, n_layer: int = 2, **kw) -> Llama:
    cfg = LlamaConfig(n_vocab=V, n_ctx=64, n_embd=n_embd, n_layer=n_layer, n_inner=24, **kw)
    return Llama(cfg, init_llama_params(cfg, np.random.default_rng(seed), std=std))


@pytest.fixture(scope="module", params=list(VARIANTS))
def model(request):
    return tiny(**VARIANTS[request.param])


def tokens_of(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, V, n)


# ------------------------------------------------------------------------------- the config


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(n_kv_head=3), "n_kv_head"),  # 4 query heads cannot share 3 key/value heads
        (dict(head_dim=5), "head_dim"),  # RoPE turns pairs
        (dict(n_embd=18), "n_embd"),  # not divisible by n_head, no head_dim
        (dict(rms_norm_eps=0.0), "rms_norm_eps"),
        (dict(rope_theta=-1.0), "rope_theta"),
        (dict(model_type="gemma"), "model_type"),
        (dict(attention_bias=True), "attention_bias"),  # a llama's would reach o_proj too
        (dict(model_type="qwen2", attention_bias=False), "attention_bias"),
        (dict(tie_word_embeddings=1), "tie_word_embeddings"),
        (dict(rope_scaling={"factor": 8}), "rope_scaling"),
    ],
)
def test_a_bad_config_is_refused_in_one_line_naming_the_field(change, field):
    kw = dict(n_vocab=V, n_ctx=64, n_embd=16, n_head=4, n_layer=2) | change
    with pytest.raises(ValueError, match=field) as err:
        LlamaConfig(**kw)
    assert "\n" not in str(err.value)


def test_defaults_are_filled_in_as_transformers_does():
    cfg = LlamaConfig(n_vocab=V, n_ctx=64, n_embd=16, n_head=4, n_layer=2)
    assert (cfg.n_kv_head, cfg.head_size, cfg.n_inner, cfg.attention_bias) == (4, 4, 64, False)
    qwen = LlamaConfig(n_vocab=V, n_ctx=64, n_embd=16, n_head=4, n_layer=2, model_type="qwen2")
    assert qwen.attention_bias
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        Llama3RopeScaling(8.0, 1.0, 4.0, 0)
    with pytest.raises(ValueError, match="low_freq_factor"):
        Llama3RopeScaling(8.0, 4.0, 1.0, 8192)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_config_round_trips_through_a_config_json_dict(name):
    cfg = tiny(**VARIANTS[name]).config
    assert LlamaConfig.from_hf_dict(cfg.to_hf_dict()) == cfg


def hub_config(**change) -> dict:
    # a config.json as the Hub's llama checkpoints write it (rope_theta at the top level)
    d = {
        "model_type": "llama",
        "vocab_size": V,
        "max_position_embeddings": 64,
        "hidden_size": 16,
        "intermediate_size": 24,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "hidden_act": "silu",
        "tie_word_embeddings": True,
    }
    return {k: v for k, v in (d | change).items() if v is not ...}


def test_from_hf_dict_reads_a_hub_config():
    cfg = LlamaConfig.from_hf_dict(hub_config())
    assert (cfg.n_kv_head, cfg.rope_theta, cfg.tie_word_embeddings) == (2, 500000.0, True)
    assert cfg.rope_scaling == Llama3RopeScaling(32.0, 1.0, 4.0, 8192)
    # transformers v5 writes the same as rope_parameters
    v5 = hub_config(rope_theta=..., rope_scaling=None)
    v5["rope_parameters"] = {"rope_theta": 500000.0} | hub_config()["rope_scaling"]
    assert LlamaConfig.from_hf_dict(v5) == cfg
    qwen = LlamaConfig.from_hf_dict(hub_config(model_type="qwen2", rope_scaling=None))
    assert qwen.attention_bias and qwen.rope_scaling is None


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (dict(model_type="mistral", sliding_window=4096), "sliding"),
        (dict(model_type="mistral"), "sliding"),  # absent: transformers' default is 4096
        (dict(model_type="qwen2", use_sliding_window=True, sliding_window=128), "sliding"),
        (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "'linear'"),
        (dict(rope_scaling={"type": "dynamic", "factor": 2.0}), "'dynamic'"),
        (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "'yarn'"),
        (dict(hidden_act="gelu"), "hidden_act 'gelu'"),
        (dict(model_type="gpt_neox"), "model_type 'gpt_neox'"),
        (dict(attention_bias=True), "attention_bias"),
        (dict(mlp_bias=True), "mlp_bias"),
        (dict(hidden_size=...), "hidden_size"),
    ],
)
def test_from_hf_dict_refuses_what_is_not_implemented_by_name(change, named):
    with pytest.raises(ValueError, match=named) as err:
        LlamaConfig.from_hf_dict(hub_config(**change))
    assert "\n" not in str(err.value)


def test_a_full_attention_mistral_is_read():
    cfg = LlamaConfig.from_hf_dict(hub_config(model_type="mistral", sliding_window=None))
    assert cfg.model_type == "mistral" and not cfg.attention_bias


# ------------------------------------------------------------------------------------- RoPE


def test_rotated_dot_products_depend_only_on_the_distance():
    """q.k with q at position m and k at n equals q.k at m + s and n + s: R(m)q . R(n)k =
    q . R(n - m)k. What lets a cached key keep its rotation forever."""
    cfg = LlamaConfig(n_vocab=V, n_ctx=64, n_embd=16, n_head=2, n_layer=1, head_dim=8)
    cos, sin = rope_tables(cfg)
    q, k = np.random.default_rng(0).standard_normal((2, 1, 1, 8)).astype(np.float32)

    def dot(m, n):
        qm = rotate(q, cos[[m]][None], sin[[m]][None])
        kn = rotate(k, cos[[n]][None], sin[[n]][None])
        return float((qm * kn).sum())

    assert dot(3, 1) == pytest.approx(dot(40, 38), abs=1e-5)
    assert dot(0, 0) == pytest.approx(float((q * k).sum()), abs=1e-6)  # angle 0: no rotation
    assert abs(dot(3, 1) - dot(3, 2)) > 1e-3  # and the distance does matter


def test_llama3_scaling_against_a_hand_computation():
    """hs = 8, rope_theta 100: theta_j = 1, 0.316, 0.1, 0.0316 (wavelengths 6.3, 19.9, 62.8,
    199). With original context 32, low 1, high 4: wavelengths under 32 / 4 = 8 keep their
    speed, over 32 / 1 = 32 turn factor 8 times slower, 19.9 is blended:
    s = (32 / 19.869 - 1) / (4 - 1) = 0.20351, theta' = 0.31623 (s + (1 - s) / 8) = 0.095840."""
    cfg = LlamaConfig(
        n_vocab=V, n_ctx=64, n_embd=16, n_head=2, n_layer=1, rope_theta=100.0, rope_scaling=SCALING
    )
    theta = rope_frequencies(cfg)
    assert theta[0] == 1.0
    assert theta[1] == pytest.approx(0.095840, rel=1e-4)
    assert theta[2] == pytest.approx(0.1 / 8, rel=1e-12)
    assert theta[3] == pytest.approx(100 ** (-6 / 8) / 8, rel=1e-12)


# ------------------------------------------------------------------------------ the cache


def test_the_cache_holds_the_key_value_heads(model):
    cfg = model.config
    assert model.new_cache(8).k.shape == (cfg.n_layer, cfg.n_kv_head, 8, cfg.head_size)
    assert new_batch_cache(model, 3, 8).k.shape == (3, cfg.n_layer, cfg.n_kv_head, 8, cfg.head_size)
    other = tiny(n_head=4, n_kv_head=4 if cfg.n_kv_head != 4 else 2)
    with pytest.raises(ValueError, match="key/value heads"):
        model.forward([1], other.new_cache())


def test_cached_equals_uncached_through_appends_and_rollbacks(model):
    """Every append's logits equal an uncached forward of the committed tokens + the new ones,
    whatever was written and rolled back before; the committed slots equal a fresh prefill."""
    cache, committed = model.new_cache(), []
    # (tokens fed, how many of them to commit): partial commits, a full rollback, a single token
    for step, (n, keep) in enumerate([(5, 5), (4, 2), (3, 0), (1, 1), (6, 4)]):
        new = tokens_of(10 + step, n)
        logits = model.forward(new, cache)
        assert_close_scaled(logits, model.forward(committed + list(new))[-n:], f"step {step}")
        cache.commit(keep)
        cache.rollback()
        committed += list(new[:keep])
        assert_cache_is_prefill(model, cache, committed, f"after step {step}")


def test_a_tree_pass_equals_the_forward_of_each_path(model):
    """Node j sits at position length + depth(j) wherever its slot is: its row equals the
    last row of a plain forward of (committed, path to j). Compacting a path then gives the
    cache a prefill of it would: its keys were rotated for exactly the positions they land at."""
    prefix = list(tokens_of(1, 6))
    cache = model.new_cache()
    model.forward(prefix, cache)
    cache.commit(len(prefix))
    parents = np.array([-1, 0, 0, 1, -1, 3, 2])
    nodes = tokens_of(2, len(parents))
    logits = tree_forward(model, nodes, parents, cache)
    paths = []
    for j in range(len(parents)):
        path, a = [], j
        while a >= 0:
            path, a = [a, *path], parents[a]
        paths.append(path)
        expected = model.forward(prefix + list(nodes[path]))[-1]
        assert_close_scaled(logits[j], expected, f"node {j}")
    compact(cache, paths[5])  # nodes 0, 1, 3, 5: depths 0..3 at slots 6..9
    cache.commit(len(paths[5]))
    cache.rollback()
    assert_cache_is_prefill(model, cache, prefix + list(nodes[paths[5]]), "compacted path")


def test_a_ragged_batch_equals_each_sequence_alone(model):
    """Rows at different lengths: row b's positions start at its own cache end."""
    prompts = [tokens_of(20 + b, n) for b, n in enumerate([3, 7, 1])]
    news = [tokens_of(30 + b, n) for b, n in enumerate([4, 2, 3])]
    cache = new_batch_cache(model, 3, 32)
    for rows in (prompts, news):
        n_new = np.array([len(r) for r in rows])
        padded = np.zeros((3, n_new.max()), dtype=np.int64)
        for b, r in enumerate(rows):
            padded[b, : len(r)] = r
        logits = batched_forward(model, padded, n_new, cache)
        cache.commit(n_new)
    for b in range(3):
        alone = model.forward(np.concatenate([prompts[b], news[b]]))[-len(news[b]) :]
        assert_close_scaled(logits[b, : len(news[b])], alone, f"row {b}")
        assert_cache_is_prefill(model, cache.row(b), list(prompts[b]) + list(news[b]), f"row {b}")


def test_greedy_speculative_decoding_equals_greedy_generation():
    """A Llama target (GQA 2:1) and a smaller Llama draft (GQA 2:1, one block, another
    width): whatever the acceptance, greedy speculative output is the target's greedy output."""
    target = tiny(seed=0, n_head=4, n_kv_head=2, tie_word_embeddings=True)
    draft = tiny(seed=1, n_embd=8, n_layer=1, n_head=2, n_kv_head=1, tie_word_embeddings=True)
    for i, k in enumerate((1, 3, 4)):
        prompt = list(tokens_of(40 + i, 2 + 2 * i))
        rng = np.random.default_rng(0)
        want = generate(target, prompt, max_new_tokens=11, rng=rng, sampling=GREEDY)
        got = speculative_run(target, ModelDrafter(draft), prompt, k=k, max_new_tokens=11)
        assert got.tokens == want, (k, got.tokens, want)


# ---------------------------------------------------------------------------- transformers
