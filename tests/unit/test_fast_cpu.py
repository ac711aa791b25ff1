"""The opt-in CPU fast path (specdec/fast_cpu.py): the plain model's logits, never stale, and
tricks chosen by measurement (specdec/fast_cpu_plan.py).

The parity tests force every trick on (`tricks="all"`) so that each is exercised whatever this
machine measured; the plan tests check the choice itself with made-up timings."""

from __future__ import annotations

import numpy as np
import pytest

from reference import GPT, GPTConfig, ModelDrafter, generate, init_params, speculative_generate
from reference import model as plain_model
from specdec import fast_cpu, fast_cpu_plan
from specdec.bundled import load_bundled_pair
from specdec.fast_cpu import FastGPT, fast

from .helpers import GREEDY, assert_close_scaled

# a random model twice the bundled draft's width: appends of 2-16 rows take the sliced path
WIDE_CFG = GPTConfig(n_vocab=64, n_ctx=96, n_embd=256, n_head=4, n_layer=2)


@pytest.fixture(scope="module")
def plain():
    return GPT(WIDE_CFG, init_params(WIDE_CFG, np.random.default_rng(0), std=0.05))


@pytest.fixture(scope="module")
def bundled():
    return load_bundled_pair()


def forward_both(models, caches, tokens) -> list[np.ndarray]:
    return [m.forward(tokens, c) for m, c in zip(models, caches, strict=True)]


def assert_same_logits_through_a_run(plain: GPT, quick: FastGPT, tokens: np.ndarray) -> None:
    """Prefill, one-token decode steps, then appends of 2..16 rows each rolled back (the
    verification pattern, every T of the sliced path): the two models agree at every call
    to float32 rounding."""
    models, caches = (plain, quick), (plain.new_cache(), quick.new_cache())
    assert_close_scaled(quick.forward(tokens), plain.forward(tokens), "no cache")
    n = len(tokens) // 2
    ours, theirs = forward_both(models, caches, tokens[:n])
    assert_close_scaled(theirs, ours, "prefill")
    for c in caches:
        c.commit(n)
    for i in range(n, n + 4):  # decode
        ours, theirs = forward_both(models, caches, tokens[i : i + 1])
        assert_close_scaled(theirs, ours, f"decode step {i}")
        for c in caches:
            c.commit(1)
    for T in range(2, fast_cpu.FEW_ROWS + 1):  # k+1-row appends, rolled back like rejected drafts
        ours, theirs = forward_both(models, caches, tokens[-T:])
        assert_close_scaled(theirs, ours, f"append of {T} rows")
        for c in caches:
            c.rollback()


def test_fast_path_equals_the_plain_model(plain):
    tokens = np.random.default_rng(1).integers(0, WIDE_CFG.n_vocab, 40)
    assert_same_logits_through_a_run(plain, fast(plain, tricks="all"), tokens)


@pytest.mark.parametrize("which", [0, 1], ids=["target", "draft"])
def test_fast_path_equals_the_plain_model_at_the_bundled_pairs_shapes(bundled, which):
    model = bundled[which]
    tokens = np.frombuffer(b"def area(self):\n    return self.w * self.h\n" * 3, np.uint8)
    assert_same_logits_through_a_run(model, fast(model, tricks="all"), tokens.astype(np.int64))


def test_appends_of_a_few_rows_take_the_sliced_path(plain, monkeypatch):
    """The parity tests above really exercise the trick: a 5-row append goes through
    linear_few_rows, a one-row step and a prefill do not."""
    calls = []
    real = fast_cpu.linear_few_rows
    monkeypatch.setattr(fast_cpu, "linear_few_rows", lambda *a: calls.append(1) or real(*a))
    quick = fast(plain, tricks="all")
    quick.forward(np.arange(5))
    assert calls, "a 5-row pass never took the sliced path"
    calls.clear()
    quick.forward(np.arange(1))
    quick.forward(np.arange(40))
    assert not calls


def slices_taken(model: GPT, monkeypatch, T: int) -> dict[tuple[int, int], int]:
    """(C_in, C_out) -> number of weight slices linear_few_rows used for a T-row append."""
    seen = {}
    real = fast_cpu.linear_few_rows

    def spy(x, w_t, b):
        seen[(w_t.shape[1], w_t.shape[0])] = w_t.shape[0] // fast_cpu.slice_rows(w_t.shape[0])
        return real(x, w_t, b)

    monkeypatch.setattr(fast_cpu, "linear_few_rows", spy)
    quick = fast(model, tricks="all")
    cache = quick.new_cache()
    quick.forward(np.arange(20), cache)
    cache.commit(20)
    quick.forward(np.arange(T), cache)
    return seen


@pytest.mark.parametrize("T", [2, 8, 9])
def test_the_bundled_pairs_appends_are_cut_into_slices(bundled, monkeypatch, T):
    """The bundled-shape parity test above reaches the sliced product proper: every linear
    layer of the bundled target (C = 384) and draft (C = 128) is cut into C_out / 32 slices
    of w.T for a k+1-row append."""
    for model in bundled:
        C = model.config.n_embd
        assert slices_taken(model, monkeypatch, T) == {
            (C, 3 * C): 3 * C // 32,
            (C, C): C // 32,
            (C, 4 * C): 4 * C // 32,
            (4 * C, C): C // 32,
        }


@pytest.mark.parametrize(
    "C_in, C_out", [(384, 1152), (384, 1536), (1536, 384), (384, 384), (128, 512), (384, 257)]
)
@pytest.mark.parametrize("T", [2, 3, 5, 8, 9, 16])
def test_linear_few_rows_equals_the_plain_product(C_in, C_out, T):
    """At the bundled pair's layer shapes (and a C_out of no multiple of 32, one product):
    the same numbers as x @ w + b, checked against a float64 product."""
    rng = np.random.default_rng(T * 7 + C_in)
    x = rng.standard_normal((T, C_in), dtype=np.float32)
    w = rng.standard_normal((C_in, C_out), dtype=np.float32) / np.float32(np.sqrt(C_in))
    b = rng.standard_normal(C_out, dtype=np.float32)
    got = fast_cpu.linear_few_rows(x, np.ascontiguousarray(w.T), b)
    exact = x.astype(np.float64) @ w.astype(np.float64) + b
    assert got.shape == (T, C_out) and got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-4)


def test_the_fast_model_keeps_one_copy_of_each_weight(plain):
    """params[name] is a view of the stored [C_out, C_in] layout, not a second copy."""
    quick = fast(plain, tricks="all")
    w = quick.params["h.0.mlp.c_fc.weight"]
    assert w.shape == (256, 1024) and w.T.flags.c_contiguous and w.base is not None
    np.testing.assert_array_equal(w, plain.params["h.0.mlp.c_fc.weight"])
    assert not np.shares_memory(w, plain.params["h.0.mlp.c_fc.weight"])  # plain untouched


def test_editing_weights_in_place_cannot_leave_the_fast_path_stale(plain):
    """`params[name] *= 0.5` on the fast model changes every path at once: its logits equal
    a plain model built from the edited weights, and greedy speculative decoding still
    equals greedy autoregressive (a stale copy made them differ before)."""
    target = fast(plain, tricks="all")
    draft = fast(plain, tricks="all")
    prompt = np.arange(6)

    def both():
        rng = np.random.default_rng(0)
        ar = generate(target, prompt, max_new_tokens=30, rng=rng, sampling=GREEDY)
        spec = speculative_generate(
            target, ModelDrafter(draft), prompt, k=5, max_new_tokens=30, rng=rng, sampling=GREEDY
        )
        return ar, spec.tokens

    before = both()
    for name in ("h.0.attn.c_attn.weight", "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.weight"):
        target.params[name] *= 0.3  # in place
    ar, spec = both()
    assert spec == ar
    assert ar != before[0], "the edit should change the target's output"
    edited = GPT(plain.config, {n: w.copy() for n, w in target.params.items()})
    assert_same_logits_through_a_run(edited, target, np.arange(30) % 64)


def test_replacing_a_weight_is_seen_by_every_path(plain):
    """`params[name] = new_array` drops the layout but not the numbers: still exact."""
    quick = fast(plain, tricks="all")
    name = "h.0.mlp.c_fc.weight"
    quick.params[name] = np.ascontiguousarray(quick.params[name] * 2.0)
    edited = GPT(plain.config, {n: w.copy() for n, w in quick.params.items()})
    assert_same_logits_through_a_run(edited, quick, np.arange(30) % 64)


# target heads (6) over a long cache; draft heads (2) with S == T (an uncached pass) and S > T
ATTENTION_SHAPES = [(6, 400, T) for T in (1, 2, 8, 9, 16)] + [(2, 9, 9), (2, 9, 2), (6, 16, 16)]


@pytest.mark.parametrize("nh, S, T", ATTENTION_SHAPES)
def test_attention_keys_first_equals_the_plain_attention(nh, S, T):
    """Every branch of the fast attention (one row without a mask, the masked tail of T - 1
    keys, S == T as in an uncached pass) gives the plain attention's numbers."""
    rng = np.random.default_rng(S * 31 + T)
    q, k, v = (rng.standard_normal((nh, n, 64), dtype=np.float32) for n in (T, S, S))
    got = fast_cpu.attention_keys_first(q, k, v)
    assert got.shape == (nh, T, 64)
    np.testing.assert_allclose(got, plain_model.attention(q, k, v), rtol=0, atol=2e-6)


def test_future_keys_is_the_causal_masks_tail():
    for T in (2, 5, 9):
        mask = plain_model.causal_mask(T, 20)  # True = may attend
        assert mask[:, : 20 - T + 1].all()  # every new row sees the history and row 0
        np.testing.assert_array_equal(fast_cpu.future_keys(T), ~mask[:, 20 - T + 1 :])


def test_gelu_by_products_equals_gelu_and_leaves_its_input_alone():
    x = np.linspace(-8, 8, 4001, dtype=np.float32).reshape(1, -1)
    before = x.copy()
    np.testing.assert_allclose(fast_cpu.gelu_by_products(x), plain_model.gelu(x), atol=1e-6)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("T", [1, 2, 8, 16, 17])
def test_the_output_layer_equals_the_plain_one_and_reads_wte_afresh(bundled, T):
    """The fast logits (wte read in its stored order for a few rows) equal h @ wte^T, in C
    order, and an in-place edit of wte is seen at once."""
    quick = fast(bundled[0], tricks="all")
    h = np.random.default_rng(T).standard_normal((T, 384), dtype=np.float32)
    got = quick.logits(h)
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got, h @ bundled[0].params["wte.weight"].T, atol=1e-4, rtol=0)
    quick.params["wte.weight"] *= 2.0
    np.testing.assert_allclose(quick.logits(h), 2.0 * got, atol=2e-4, rtol=0)


@pytest.mark.parametrize("T", [2, 9])
def test_few_row_outputs_are_in_c_order(bundled, T):
    """A transposed (F-order) output would make every later row-wise reduction stride."""
    quick = fast(bundled[0], tricks="all")
    x = np.ones((T, 384), np.float32)
    assert quick.linear(x, "h.0.mlp.c_fc").flags.c_contiguous


# ---- the plan: each trick kept only where it measured faster ----


def test_a_measured_model_equals_the_plain_model_whatever_it_chose(bundled):
    """Whichever tricks this machine kept, the logits are the plain model's."""
    model = bundled[0]
    tokens = np.frombuffer(b"def area(self):\n    return self.w * self.h\n" * 3, np.uint8)
    quick = fast(model)
    assert quick.plan.everything is None and quick.plan.timings, "fast() should measure"
    assert_same_logits_through_a_run(model, quick, tokens.astype(np.int64))


def test_no_tricks_is_the_plain_computation(plain, monkeypatch):
    calls = []
    for name in ("linear_few_rows", "attention_keys_first", "gelu_by_products", "logits_few_rows"):
        real = getattr(fast_cpu, name)
        monkeypatch.setattr(
            fast_cpu, name, lambda *a, real=real, name=name: calls.append(name) or real(*a)
        )
    quick = fast(plain, tricks="none")
    cache = quick.new_cache()
    quick.forward(np.arange(20), cache)
    cache.commit(20)
    for T in (1, 2, 8):
        quick.forward(np.arange(T), cache)
        cache.rollback()
    assert calls == [], f"tricks='none' still called {sorted(set(calls))}"
    assert_same_logits_through_a_run(plain, quick, np.arange(40) % 64)


def made_up_plan(faster: set[tuple[str, int]]) -> fast_cpu_plan.TrickPlan:
    """Timings in which the trick wins exactly at the (trick, rows) in `faster`."""
    timings = []
    for trick, shape in (("linear", (256, 1024)), ("logits", (64, 256))):
        for T in range(2, fast_cpu.FEW_ROWS + 1):
            fast_s = 1.0 if (trick, T) in faster else 3.0
            timings.append(fast_cpu_plan.Timing(trick, shape, T, 2.0, fast_s))
    return fast_cpu_plan.TrickPlan(tuple(timings), machine="made up")


def test_the_plan_keeps_a_trick_exactly_where_it_was_faster():
    plan = made_up_plan({("linear", 2), ("linear", 9), ("logits", 16)})
    assert plan.uses("linear", (256, 1024), 2) and plan.uses("linear", (256, 1024), 9)
    assert not plan.uses("linear", (256, 1024), 3)
    assert not plan.uses("linear", (256, 512), 2), "another shape was never measured"
    assert plan.uses("logits", (64, 256), 16) and not plan.uses("logits", (64, 256), 2)
    assert not plan.uses("attention", (4, 64), 1), "an unmeasured trick is never used"
    table = fast_cpu_plan.describe_plan(plan)
    assert "| linear | 256x1024 | 2, 9 | 3-8, 10-16 |" in table, table
    assert "| logits | 64x256 | 16 | 2-15 |" in table, table


def test_a_fast_model_follows_its_plan(plain, monkeypatch):
    """With a plan that keeps the sliced product at 5 rows only, a 5-row pass takes it and a
    4-row pass does not."""
    calls = []
    real = fast_cpu.linear_few_rows
    monkeypatch.setattr(fast_cpu, "linear_few_rows", lambda *a: calls.append(1) or real(*a))
    shapes = {(256, 768), (256, 256), (256, 1024), (1024, 256)}
    timings = tuple(
        fast_cpu_plan.Timing("linear", s, T, 2.0, 1.0 if T == 5 else 3.0)
        for s in shapes
        for T in range(2, fast_cpu.FEW_ROWS + 1)
    )
    quick = FastGPT(plain.config, dict(plain.params), fast_cpu_plan.TrickPlan(timings))
    quick.forward(np.arange(4))
    assert not calls
    quick.forward(np.arange(5))
    assert len(calls) == 4 * plain.config.n_layer  # every linear layer of every block


def test_measurements_are_cached_for_the_process(plain, monkeypatch):
    """A second plan for the same shapes and BLAS setting times nothing again."""
    fast(plain)  # measured (or already cached by an earlier test)
    timed = []
    real = fast_cpu_plan.fastest_pair
    monkeypatch.setattr(fast_cpu_plan, "fastest_pair", lambda *a: timed.append(1) or real(*a))
    again = fast(plain)
    assert timed == [], f"the second plan re-timed {len(timed)} calls"
    assert again.plan.timings


def test_unknown_tricks_option_is_refused(plain):
    with pytest.raises(ValueError, match="tricks must be one of"):
        fast(plain, tricks="some")
