"""The CPU fast path on the Llama family (FastLlama, specdec/fast_cpu/model.py and llama.py):
the plain Llama's logits under every configuration of tricks and every variant, each trick
against its plain function, a tree's and a batch's pass, greedy speculative decoding, the
plan, and the bench's report of it."""

from __future__ import annotations

import json

import numpy as np
import pytest

import reference
from reference import ModelDrafter, generate
from reference.batch import batched_forward, new_batch_cache
from reference.config import Llama3RopeScaling, LlamaConfig
from reference.llama import Llama, grouped_attention, init_llama_params, rms_norm, rotate, silu
from reference.tree import tree_forward
from reference.weights import write_safetensors
from specdec.cli import main
from specdec.drafting import model_drafter
from specdec.fast_cpu import FastGPT, FastModelDrafter, fast, llama_step
from specdec.fast_cpu import compiled as fast_compiled
from specdec.fast_cpu import llama as fast_llama
from specdec.fast_cpu import model as fast_model
from specdec.fast_cpu import plan as fast_plan
from specdec.measure import roofline

from .helpers import GREEDY, assert_close_scaled, speculative_run

V = 40
SCALING = Llama3RopeScaling(
    factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32
)
# name -> LlamaConfig keywords beside V, n_ctx 64, L 2. C 64 and I 96: multiples of 32, so
# the sliced product cuts them (slice_rows), and even, so the compiled one pairs them
VARIANTS = {
    "gqa2": dict(n_embd=64, n_head=4, n_kv_head=2, n_inner=96),
    "mha_tied_qwen2_biases": dict(
        n_embd=64, n_head=4, n_kv_head=4, n_inner=96, tie_word_embeddings=True, model_type="qwen2"
    ),
    "gqa4_llama3_scaling": dict(
        n_embd=64, n_head=4, n_kv_head=1, n_inner=96, rope_theta=10.0, rope_scaling=SCALING
    ),
    # head width 6 (not C / nh); widths 12-30, no multiple of 32: whole-matrix "slices"
    "mistral_head_dim": dict(n_embd=20, n_head=4, n_kv_head=2, head_dim=6, n_inner=30),
}
# every one the plan can choose (numba's: where installed) but the 16-bit ones, which need
# 16-bit weights (tests/unit/test_fast_16bit.py)
CONFIGS = [c for c in fast_plan.CONFIGS if c not in fast_plan.SIXTEEN_BIT]
needs_numba = pytest.mark.skipif(not fast_compiled.AVAILABLE, reason="numba not installed")


def tiny(seed: int = 0, n_layer: int = 2, **kw) -> Llama:
    # std 0.2: at 0.3 the GQA 4:1 variant's logits differed by 1.4e-5 of their size (the plain
    # float32 model is as far from a float64 forward), past the tolerance of 1e-5
    cfg = LlamaConfig(n_vocab=V, n_ctx=64, n_layer=n_layer, **kw)
    return Llama(cfg, init_llama_params(cfg, np.random.default_rng(seed), std=0.2))


@pytest.fixture(scope="module", params=list(VARIANTS))
def model(request):
    return tiny(**VARIANTS[request.param])


def configured(model: Llama, config: str) -> fast_model.FastLlama:
    if config in fast_plan.COMPILED_CONFIGS and not fast_compiled.AVAILABLE:
        pytest.skip("numba not installed")
    return fast_model.FastLlama(model.config, dict(model.params), fast_plan.TrickPlan.fixed(config))


def assert_same_logits_through_a_run(plain: Llama, quick, tokens: np.ndarray) -> None:
    """Prefill, one-row steps, then appends of 2..16 rows each rolled back (verification):
    the plain model's logits at every call, to float32 rounding."""
    assert_close_scaled(quick.forward(tokens), plain.forward(tokens), "no cache")
    caches = (plain.new_cache(), quick.new_cache())
    n = len(tokens) // 2
    for rows, keep in [(tokens[:n], n), *((tokens[i : i + 1], 1) for i in range(n, n + 3))]:
        ours, theirs = plain.forward(rows, caches[0]), quick.forward(rows, caches[1])
        assert_close_scaled(theirs, ours, f"{len(rows)} rows, committed")
        for c in caches:
            c.commit(keep)
    for T in range(2, fast_plan.FEW_ROWS + 1):
        ours, theirs = plain.forward(tokens[-T:], caches[0]), quick.forward(tokens[-T:], caches[1])
        assert_close_scaled(theirs, ours, f"append of {T} rows")
        for c in caches:
            c.rollback()


@pytest.mark.parametrize("config", CONFIGS)
def test_every_configuration_gives_the_plain_llamas_logits(model, config):
    tokens = np.random.default_rng(1).integers(0, V, 40)
    assert_same_logits_through_a_run(model, configured(model, config), tokens)


def test_every_trick_forced_gives_the_plain_llamas_logits(model):
    tokens = np.random.default_rng(2).integers(0, V, 40)
    assert_same_logits_through_a_run(model, fast(model, tricks="all"), tokens)


@pytest.mark.parametrize("config", ["plain", "all"])
def test_a_tree_pass_and_a_ragged_batch_equal_the_plain_ones(model, config):
    quick = configured(model, config)
    parents = np.array([-1, 0, 0, 1, -1, 3, 2])
    nodes = np.random.default_rng(3).integers(0, V, len(parents))
    prefix = np.random.default_rng(4).integers(0, V, 6)
    caches = [m.new_cache() for m in (model, quick)]
    for m, c in zip((model, quick), caches, strict=True):
        m.forward(prefix, c)
        c.commit(len(prefix))
    ours, theirs = (
        tree_forward(m, nodes, parents, c) for m, c in zip((model, quick), caches, strict=True)
    )
    assert_close_scaled(theirs, ours, "tree")
    padded, n_new = np.array([[1, 2, 3, 4], [5, 6, 0, 0]]), np.array([4, 2])
    ours, theirs = (
        batched_forward(m, padded, n_new, new_batch_cache(m, 2, 16)) for m in (model, quick)
    )
    assert_close_scaled(theirs[0], ours[0], "batch row 0")
    assert_close_scaled(theirs[1, :2], ours[1, :2], "batch row 1")


# ----------------------------------------------------------------- each trick alone


def test_silu_by_products_equals_silu_and_leaves_its_input_alone():
    x = np.concatenate([np.linspace(-120, 120, 481), [-1e30, 1e30, 0.0]]).astype(np.float32)
    before = x.copy()
    np.testing.assert_allclose(fast_llama.silu_by_products(x), silu(x), rtol=2e-6, atol=1e-30)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("shape", [(4, 3, 8), (2, 2, 5, 6)])
def test_rotate_by_products_equals_rotate(shape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    angles = rng.uniform(-3, 3, shape[:-3] + (1, shape[-2], shape[-1] // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    cos2, sin2 = fast_llama.whole_width(cos, sin)
    np.testing.assert_allclose(
        fast_llama.rotate_by_products(x, cos2, sin2), rotate(x, cos, sin), atol=1e-6
    )


@needs_numba
@pytest.mark.parametrize(("R", "C"), [(1, 64), (5, 20), (16, 128)])
def test_the_compiled_rms_norm_equals_the_plain_one(R, C):
    rng = np.random.default_rng(6)
    x = (3 * rng.standard_normal((R, C))).astype(np.float32)
    g = rng.standard_normal(C).astype(np.float32)
    np.testing.assert_allclose(
        fast_llama.rms_norm_rows(x, g, 1e-6), rms_norm(x, g, 1e-6), atol=1e-5
    )


@pytest.mark.parametrize(("nh", "nkv", "T"), [(4, 1, 1), (4, 2, 5), (6, 3, 16), (4, 4, 3)])
def test_grouped_attention_keys_first_equals_the_plain_one(nh, nkv, T):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((nh, T, 8)).astype(np.float32)
    k, v = (rng.standard_normal((nkv, 20, 8)).astype(np.float32) for _ in range(2))
    got = fast_model.attention_keys_first(q, k, v)
    np.testing.assert_allclose(got, grouped_attention(q, k, v), atol=1e-6)
    mask = rng.random((T, 20)) < 0.7
    mask[:, 0] = True  # every row sees a key
    got = fast_model.attention_keys_first(q, k, v, mask)
    np.testing.assert_allclose(got, grouped_attention(q, k, v, mask), atol=1e-6)


# ------------------------------------------------------- decoding, the plan, the bench


def test_greedy_speculative_decoding_on_the_fast_path_gives_the_plain_tokens():
    """A GQA target and a one-block draft, each fast with every trick forced, and measured:
    the plain target's greedy tokens, whatever each plan chose. The fast draft gets the
    fast path's drafter (its sampled draws one compiled call)."""
    target = tiny(**VARIANTS["gqa2"])
    draft = tiny(seed=1, n_layer=1, n_embd=32, n_head=2, n_kv_head=1, n_inner=64)
    prompt = list(np.random.default_rng(8).integers(0, V, 12))
    want = generate(
        target, prompt, max_new_tokens=24, rng=np.random.default_rng(0), sampling=GREEDY
    )
    assert (
        speculative_run(target, ModelDrafter(draft), prompt, k=4, max_new_tokens=24).tokens == want
    )
    for tricks in ("all", "measure"):
        quick_target, quick_draft = fast(target, tricks), fast(draft, tricks)
        drafter = model_drafter(reference, quick_draft, None)
        assert isinstance(drafter, FastModelDrafter)
        got = speculative_run(quick_target, drafter, prompt, k=4, max_new_tokens=24)
        assert got.tokens == want, (tricks, got.tokens, want)


def test_a_measured_plan_times_plain_among_its_candidates_and_names_silu():
    """The plan is never slower than plain by construction: plain is timed at every pass size
    and kept unless another configuration was faster (specdec/fast_cpu/plan.py)."""
    quick = fast(tiny(**VARIANTS["gqa2"]))
    assert isinstance(quick, fast_model.FastLlama) and isinstance(quick, FastGPT)
    sizes = {*range(1, fast_plan.FEW_ROWS + 1), fast_plan.MANY_ROWS}
    assert {t.rows for t in quick.plan.timings if t.config == "plain"} == sizes
    assert set(quick.plan.chosen) == sizes
    for T, config in quick.plan.chosen.items():
        assert quick.plan.seconds(config, T) <= quick.plan.seconds("plain", T)
    text = fast_plan.describe_plan(quick.plan)
    assert "gelu" not in text and "Fast path chosen by measuring whole passes" in text, text
    made_up = [fast_plan.PassTiming(c, T, t) for T in sizes for c, t in (("plain", 2), ("all", 1))]
    text = fast_plan.describe_plan(fast_plan.TrickPlan(tuple(made_up), activation="silu"))
    assert "| all | linear, attention, silu, logits |" in text, text


@pytest.mark.parametrize("config", ["all", "compiled"])
def test_each_trick_of_a_configuration_runs_in_a_pass(model, config, monkeypatch):
    """A 5-row append under the configuration: every trick it names is called (a trick that
    silently fell back to the plain path would pass the logits tests above)."""
    quick = configured(model, config)
    calls: list[str] = []
    spied = [
        (fast_model, n) for n in ("linear_few_rows", "attention_keys_first", "logits_few_rows")
    ]
    spied += [(fast_model, n) for n in ("rotate_by_products", "silu_by_products", "rms_norm_rows")]
    spied += [(fast_compiled, "few_rows_product")]
    for module, name in spied:
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _n=name, _f=real: calls.append(_n) or _f(*a))
    quick.forward(np.arange(5) % V)
    expected = {"attention_keys_first", "logits_few_rows", "rotate_by_products", "silu_by_products"}
    expected |= {"linear_few_rows"} if config == "all" else {"few_rows_product", "rms_norm_rows"}
    assert set(calls) == expected, sorted(set(calls))


@needs_numba
@pytest.mark.parametrize("config", [c for c in fast_plan.WHOLE_FORWARD if c in CONFIGS])
def test_a_whole_forward_configuration_runs_each_pass_as_one_compiled_call(
    model, config, monkeypatch
):
    quick = configured(model, config)
    calls = []
    real = llama_step.compiled_forward
    monkeypatch.setattr(llama_step, "compiled_forward", lambda *a: calls.append(a[4]) or real(*a))
    quick.forward(np.arange(5) % V, quick.new_cache())
    assert calls == [1 if config == "stepwise" else 5], calls  # rows in groups of 1, or all 5
    assert quick.compiled_weights.lists is not None, "the compiled call fell back to NumPy"


def llama_checkpoint(folder, cfg: LlamaConfig, seed: int, tokenizers) -> None:
    # config.json, model.safetensors, and a word-level tokenizer.json of exactly V ids
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg.to_hf_dict()))
    params = init_llama_params(cfg, np.random.default_rng(seed), std=0.3)
    write_safetensors(folder / "model.safetensors", params, metadata={"format": "pt"})
    vocab = {"[UNK]": 0} | {w: i + 1 for i, w in enumerate("the a cat sat on mat".split())}
    vocab |= {f"[unused{i}]": i for i in range(len(vocab), V)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))


def test_the_bench_runs_a_llama_pair_on_the_fast_path_and_names_its_plans(tmp_path, capsys):
    tokenizers = pytest.importorskip("tokenizers")  # the lab extra: a checkpoint's tokenizer
    target_cfg = LlamaConfig(n_vocab=V, n_ctx=96, n_embd=32, n_layer=2, n_head=4, n_kv_head=2)
    draft_cfg = LlamaConfig(n_vocab=V, n_ctx=96, n_embd=16, n_layer=1, n_head=2, n_kv_head=1)
    llama_checkpoint(tmp_path / "target", target_cfg, 0, tokenizers)
    llama_checkpoint(tmp_path / "draft", draft_cfg, 1, tokenizers)
    argv = ["bench", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft")]
    argv += ["--prompts", "text", "--max-new-tokens", "6", "--repeats", "1", "--ks", "2"]
    argv += ["--temperatures", "0", "--no-transformers", "--n-prompts", "1"]
    assert main(argv + ["--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    models = next(line for line in out.splitlines() if line.startswith("models:"))
    assert models.endswith("CPU fast path (docs/fast-path.md)"), models
    for name in ("target", "draft"):
        assert f"Fast path, {name} model: Fast path chosen by measuring whole passes" in out, out
    assert "the floor of a pass" in out and "| 2 |" in out, out


@pytest.mark.parametrize("variant", ["gqa4_llama3_scaling", "mha_tied_qwen2_biases"])
def test_the_roofline_counts_the_llama_blocks_products(variant):
    """q, k, v, o at their GQA widths, gate, up, down, attention over n_kv_head cached heads,
    the output layer: every byte of the blocks' linears (Qwen2's biases too), once."""
    model = tiny(**VARIANTS[variant])
    cfg, T, S = model.config, 3, 20
    products = {p.name: p for p in roofline.pass_products(model, T, S)}
    assert set(products) == {*roofline.LLAMA_LINEARS, "attention", "logits"}
    linears = [w for n, w in model.params.items() if n.startswith("model.layers.") and "proj" in n]
    assert sum(products[n].bytes for n in roofline.LLAMA_LINEARS) == sum(w.nbytes for w in linears)
    nk = cfg.n_kv_head * cfg.head_size
    assert products["self_attn.k_proj"].flops == cfg.n_layer * 2 * T * cfg.n_embd * nk
    assert products["attention"].bytes == cfg.n_layer * 2 * 4 * S * nk  # K and V, nkv heads
    parts = roofline.pass_breakdown(fast(model, "all"), np.arange(12) % V, T=4, repeats=2)
    assert set(parts) == {*products, "other", "total"} and parts["self_attn.q_proj"] > 0
