"""The opt-in CPU fast path (specdec/fast_cpu/model.py): the plain model's logits, never stale, and
tricks chosen by measurement (specdec/fast_cpu/plan.py).

The parity tests force every trick on (`tricks="all"`) so that each is exercised whatever this
machine measured; the plan tests check the choice itself with made-up timings."""

from __future__ import annotations

import numpy as np
import pytest

from reference import GPT, GPTConfig, ModelDrafter, generate, init_params, speculative_generate
from reference import model as plain_model
from specdec.bundled import load_bundled_pair
from specdec.fast_cpu import FastGPT, fast
from specdec.fast_cpu import compiled as fast_compiled
from specdec.fast_cpu import model as fast_model
from specdec.fast_cpu import plan as fast_plan
from specdec.fast_cpu import step as fast_step

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
    for T in range(2, fast_model.FEW_ROWS + 1):  # k+1-row appends, rolled back like rejected drafts
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
    real = fast_model.linear_few_rows
    monkeypatch.setattr(fast_model, "linear_few_rows", lambda *a: calls.append(1) or real(*a))
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
    real = fast_model.linear_few_rows

    def spy(x, w_t, b):
        seen[(w_t.shape[1], w_t.shape[0])] = w_t.shape[0] // fast_model.slice_rows(w_t.shape[0])
        return real(x, w_t, b)

    monkeypatch.setattr(fast_model, "linear_few_rows", spy)
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
    got = fast_model.linear_few_rows(x, np.ascontiguousarray(w.T), b)
    exact = x.astype(np.float64) @ w.astype(np.float64) + b
    assert got.shape == (T, C_out) and got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-4)


def test_the_fast_model_keeps_two_read_only_layouts_of_each_weight(plain):
    """params[name] is a read-only copy in the checkpoint's [C_in, C_out] layout (what a
    one-row step reads fastest) and the sliced product reads a read-only transposed copy."""
    quick = fast(plain, tricks="all")
    name = "h.0.mlp.c_fc.weight"
    w, w_t = quick.params[name], quick.transposed_weight(name)
    assert w.shape == (256, 1024) and w.flags.c_contiguous and not w.flags.writeable
    assert w_t.shape == (1024, 256) and w_t.flags.c_contiguous and not w_t.flags.writeable
    np.testing.assert_array_equal(w, plain.params[name])
    np.testing.assert_array_equal(w_t, w.T)
    assert not np.shares_memory(w, plain.params[name])  # plain untouched
    assert plain.params[name].flags.writeable, "the plain model's weights stay writable"


def test_editing_weights_in_place_is_refused_so_no_layout_goes_stale(plain):
    """`params[name] *= 0.5` on the fast model would leave the transposed layout behind: NumPy
    refuses it, and the model still computes the plain model's logits."""
    quick = fast(plain, tricks="all")
    for name in ("h.0.attn.c_attn.weight", "h.1.mlp.c_proj.weight"):
        with pytest.raises(ValueError, match="read-only"):
            quick.params[name] *= 0.3
    assert_same_logits_through_a_run(plain, quick, np.arange(30) % 64)


def test_replacing_a_weight_is_seen_by_every_path(plain):
    """`params[name] = new_array` drops the layout but not the numbers: still exact."""
    quick = fast(plain, tricks="all")
    name = "h.0.mlp.c_fc.weight"
    quick.params[name] = np.ascontiguousarray(quick.params[name] * 2.0)
    edited = GPT(plain.config, {n: w.copy() for n, w in quick.params.items()})
    assert_same_logits_through_a_run(edited, quick, np.arange(30) % 64)
    np.testing.assert_array_equal(quick.transposed_weight(name), quick.params[name].T)


def test_greedy_speculative_equals_autoregressive_after_a_weight_is_replaced(plain):
    """A replaced weight changes every path at once: greedy speculative decoding on the fast
    pair still equals greedy autoregressive decoding (a stale layout made them differ)."""
    target, draft = fast(plain, tricks="all"), fast(plain, tricks="all")
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
        target.params[name] = target.params[name] * np.float32(0.3)
    ar, spec = both()
    assert spec == ar
    assert ar != before[0], "the edit should change the target's output"


# target heads (6) over a long cache; draft heads (2) with S == T (an uncached pass) and S > T
ATTENTION_SHAPES = [(6, 400, T) for T in (1, 2, 8, 9, 16)] + [(2, 9, 9), (2, 9, 2), (6, 16, 16)]


@pytest.mark.parametrize("nh, S, T", ATTENTION_SHAPES)
def test_attention_keys_first_equals_the_plain_attention(nh, S, T):
    """Every branch of the fast attention (one row without a mask, the masked tail of T - 1
    keys, S == T as in an uncached pass) gives the plain attention's numbers."""
    rng = np.random.default_rng(S * 31 + T)
    q, k, v = (rng.standard_normal((nh, n, 64), dtype=np.float32) for n in (T, S, S))
    got = fast_model.attention_keys_first(q, k, v)
    assert got.shape == (nh, T, 64)
    np.testing.assert_allclose(got, plain_model.attention(q, k, v), rtol=0, atol=2e-6)


def test_future_keys_is_the_causal_masks_tail():
    for T in (2, 5, 9):
        mask = plain_model.causal_mask(T, 20)  # True = may attend
        assert mask[:, : 20 - T + 1].all()  # every new row sees the history and row 0
        np.testing.assert_array_equal(fast_model.future_keys(T), ~mask[:, 20 - T + 1 :])


def test_gelu_by_products_equals_gelu_and_leaves_its_input_alone():
    x = np.linspace(-8, 8, 4001, dtype=np.float32).reshape(1, -1)
    before = x.copy()
    np.testing.assert_allclose(fast_model.gelu_by_products(x), plain_model.gelu(x), atol=1e-6)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("T", [1, 2, 8, 16, 17])
def test_the_output_layer_equals_the_plain_one_and_reads_wte_afresh(bundled, T):
    """The fast logits (wte read in its stored order for a few rows) equal h @ wte^T, in C
    order, and a replaced wte is seen at once (an in-place edit is refused where the fast
    model keeps a 16-bit copy of it, as the bundled float16 one does with numba)."""
    quick = fast(bundled[0], tricks="all")
    h = np.random.default_rng(T).standard_normal((T, 384), dtype=np.float32)
    got = quick.logits(h)
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got, h @ bundled[0].params["wte.weight"].T, atol=1e-4, rtol=0)
    if quick.sixteen_copies.fmt is not None:
        with pytest.raises(ValueError, match="read-only"):
            quick.params["wte.weight"] *= 2.0
    quick.params["wte.weight"] = quick.params["wte.weight"] * np.float32(2.0)
    np.testing.assert_allclose(quick.logits(h), 2.0 * got, atol=2e-4, rtol=0)


@pytest.mark.parametrize("T", [2, 9])
def test_few_row_outputs_are_in_c_order(bundled, T):
    """A transposed (F-order) output would make every later row-wise reduction stride."""
    quick = fast(bundled[0], tricks="all")
    x = np.ones((T, 384), np.float32)
    assert quick.linear(x, "h.0.mlp.c_fc").flags.c_contiguous


# ---- the plan: whole passes measured, the fastest configuration kept per pass size ----


def test_a_measured_model_equals_the_plain_model_whatever_it_chose(bundled):
    """Whichever configurations this machine kept, the logits are the plain model's."""
    model = bundled[0]
    tokens = np.frombuffer(b"def area(self):\n    return self.w * self.h\n" * 3, np.uint8)
    quick = fast(model)
    assert quick.plan.everything is None and quick.plan.timings, "fast() should measure"
    assert set(quick.plan.chosen) == {*range(1, fast_model.FEW_ROWS + 1), fast_model.MANY_ROWS}
    assert_same_logits_through_a_run(model, quick, tokens.astype(np.int64))


def test_no_tricks_is_the_plain_computation(plain, monkeypatch):
    calls = []
    for name in ("linear_few_rows", "attention_keys_first", "gelu_by_products", "logits_few_rows"):
        real = getattr(fast_model, name)
        monkeypatch.setattr(
            fast_model, name, lambda *a, real=real, name=name: calls.append(name) or real(*a)
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


def made_up_plan(seconds) -> fast_plan.TrickPlan:
    """Timings from `seconds(config, T)` at every pass size."""
    rows = [*range(1, fast_model.FEW_ROWS + 1), fast_model.MANY_ROWS]
    timings = tuple(
        fast_plan.PassTiming(c, T, seconds(c, T)) for c in fast_plan.CONFIGS for T in rows
    )
    return fast_plan.TrickPlan(timings, machine="made up")


def test_the_plan_keeps_the_fastest_configuration_for_each_pass_size():
    """Sliced products faster at 8-9 rows only, the other tricks faster everywhere: each pass
    size runs its fastest configuration, and plain wins a tie (a trick must be faster)."""
    table = {"plain": 3.0, "products": 2.0, "all": 2.0, "compiled": 2.5}
    table |= {c: 2.5 for c in ("stepwise", "fused", *fast_plan.SIXTEEN_BIT)}

    def seconds(config, T):
        return 1.0 if (config, T) in {("all", 8), ("all", 9)} else table[config]

    plan = made_up_plan(seconds)
    assert plan.chosen[8] == plan.chosen[9] == "all"
    assert plan.chosen[1] == plan.chosen[2] == plan.chosen[fast_model.MANY_ROWS] == "products"
    assert plan.uses("linear", (256, 1024), 8) and not plan.uses("linear", (256, 1024), 7)
    assert plan.uses("gelu", (1024,), 40), "a prefill follows the MANY_ROWS bucket"
    tie = made_up_plan(lambda config, T: 1.0)
    assert set(tie.chosen.values()) == {"plain"}
    assert not tie.uses("gelu", (1024,), 1)
    text = fast_plan.describe_plan(plan)
    assert "| all | linear, attention, gelu, logits | 8-9 rows |" in text, text
    assert "T = 8: 3.00" in text and "T = 2: 1.50" in text, text


def test_the_chosen_pass_is_never_slower_than_the_plain_one():
    """Whatever the timings, the plan's pass at every size is at most the plain pass."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        made = {(c, T): rng.uniform(1, 2) for c in fast_plan.CONFIGS for T in range(1, 65)}
        plan = made_up_plan(lambda c, T, made=made: made[c, T])
        for T, config in plan.chosen.items():
            assert plan.seconds(config, T) <= plan.seconds("plain", T)


def test_the_plan_times_cold_whole_passes_in_turns():
    """measure_plan reads every weight before each timed pass, and times every configuration
    at every pass size, taking turns (made-up passes: nothing is run)."""
    events = []
    plan = fast_plan.measure_plan(
        run_pass=lambda config, T: events.append(("pass", config, T)),
        touch=lambda: events.append(("touch",)),
        key=("made up", 1),
        repeats=2,
    )
    timed = [e for i, e in enumerate(events) if e[0] == "pass" and events[i - 1] == ("touch",)]
    rows = [*range(1, fast_model.FEW_ROWS + 1), fast_model.MANY_ROWS]
    offered = {(c, T) for c in fast_plan.CONFIGS for T in rows}
    offered -= {(c, fast_model.MANY_ROWS) for c in fast_plan.MOST_ROWS}  # not for a prefill
    assert len(timed) == 2 * len(offered)
    assert {(c, T) for _, c, T in timed} == offered
    n = len(fast_plan.CONFIGS)
    assert [e[1] for e in timed[:n]] == list(fast_plan.CONFIGS), "configurations alternate"
    assert set(plan.chosen) == set(rows)
    fast_plan.forget_measurements()


def test_a_configuration_far_slower_than_the_best_drops_out():
    """After the first repeats, a configuration 1.5x slower than the fastest at a pass size
    is timed no more there (it could not win); one within that stays."""
    best = {"plain": 3.1, "products": 2.0, "all": 2.8, "compiled": 1.9}
    assert fast_plan.still_in_the_running(best) == {"products", "compiled", "all"}
    assert fast_plan.still_in_the_running({"plain": 1.0}) == {"plain"}


def test_a_fast_model_follows_its_plan(plain, monkeypatch):
    """With a plan that keeps the sliced product at 5 rows only, a 5-row pass takes it and a
    4-row pass does not."""
    calls = []
    real = fast_model.linear_few_rows
    monkeypatch.setattr(fast_model, "linear_few_rows", lambda *a: calls.append(1) or real(*a))
    plan = made_up_plan(lambda c, T: 1.0 if (c, T) == ("all", 5) else 2.0)
    quick = FastGPT(plain.config, dict(plain.params), plan)
    quick.forward(np.arange(4))
    assert not calls
    quick.forward(np.arange(5))
    assert len(calls) == 4 * plain.config.n_layer  # every linear layer of every block


def test_measurements_are_cached_for_the_process(plain, monkeypatch):
    """A second plan for the same shapes and BLAS setting times nothing again."""
    fast(plain)  # measured (or already cached by an earlier test)
    timed = []
    real = fast_plan.fastest_pass_seconds
    monkeypatch.setattr(fast_plan, "fastest_pass_seconds", lambda *a: timed.append(1) or real(*a))
    again = fast(plain)
    assert timed == [], "the second plan re-timed its passes"
    assert again.plan.timings


def test_unknown_tricks_option_is_refused(plain):
    with pytest.raises(ValueError, match="tricks must be one of"):
        fast(plain, tricks="some")


# ---- the compiled few-row product (numba, the `fast` extra) ----

needs_numba = pytest.mark.skipif(
    not fast_compiled.AVAILABLE, reason="numba is not installed (the `fast` extra)"
)


@needs_numba
# (100: a last cache line cut short; 5: fewer inputs than a line, so the first half of a
# single block's inputs is empty)
@pytest.mark.parametrize(
    "C_in, C_out", [(384, 1152), (1536, 384), (128, 512), (256, 2), (100, 6), (5, 4)]
)
@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16])  # every tail: 4s, +2, +1
def test_the_compiled_product_equals_the_plain_product(C_in, C_out, T):
    rng = np.random.default_rng(C_in + 7 * C_out + T)
    x = rng.standard_normal((T, C_in), dtype=np.float32)
    w = rng.standard_normal((C_in, C_out), dtype=np.float32) / np.float32(np.sqrt(C_in))
    b = rng.standard_normal(C_out, dtype=np.float32)
    got = fast_compiled.few_rows_product(x, np.ascontiguousarray(w.T), b)
    exact = x.astype(np.float64) @ w.astype(np.float64) + b
    assert got.shape == (T, C_out) and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-4)


@needs_numba
def test_a_plan_that_chose_the_compiled_product_runs_it_and_equals_the_plain_model(
    plain, monkeypatch
):
    calls = []
    real = fast_compiled.few_rows_product
    monkeypatch.setattr(fast_compiled, "few_rows_product", lambda *a: calls.append(1) or real(*a))
    quick = FastGPT(plain.config, dict(plain.params), fast_plan.TrickPlan.fixed("compiled"))
    quick.forward(np.arange(5))
    assert len(calls) == 4 * plain.config.n_layer, "every linear of a 5-row pass"
    calls.clear()
    quick.forward(np.arange(1))
    assert not calls, "a one-row step keeps BLAS's product"
    assert_same_logits_through_a_run(plain, quick, np.arange(40) % 64)


def test_without_numba_the_compiled_configuration_is_never_offered(plain, monkeypatch):
    """The `fast` extra missing: the plan measures the other configurations only, and a plan
    that names the compiled one falls back to BLAS's product (same logits)."""
    monkeypatch.setattr(fast_compiled, "AVAILABLE", False)
    offered = []
    real = fast_plan.measure_plan
    monkeypatch.setattr(fast_model, "measure_plan", lambda *a: offered.append(a[4]) or real(*a))
    quick = fast(plain)
    assert offered and "plain" in offered[0]
    assert not set(offered[0]) & set(fast_plan.COMPILED_CONFIGS)
    assert not set(quick.plan.chosen.values()) & set(fast_plan.COMPILED_CONFIGS)
    for config in set(fast_plan.COMPILED_CONFIGS) - set(fast_plan.SIXTEEN_BIT):  # test_fast_16bit
        forced = FastGPT(plain.config, dict(plain.params), fast_plan.TrickPlan.fixed(config))
        assert_same_logits_through_a_run(plain, forced, np.arange(40) % 64)


@needs_numba
@pytest.mark.parametrize("which", [0, 1], ids=["target", "draft"])
def test_every_compiled_loop_equals_the_plain_model_at_the_bundled_pairs_shapes(bundled, which):
    """The compiled product and LayerNorm, both on, through a whole run."""
    model = bundled[which]
    tokens = np.frombuffer(b"def area(self):\n    return self.w * self.h\n" * 3, np.uint8)
    quick = FastGPT(model.config, dict(model.params), fast_plan.TrickPlan.fixed("compiled"))
    assert_same_logits_through_a_run(model, quick, tokens.astype(np.int64))


@needs_numba
@pytest.mark.parametrize("R, C", [(1, 128), (8, 384), (3, 48)])
def test_the_compiled_layer_norm_equals_the_plain_one(R, C):
    rng = np.random.default_rng(R * C)
    x = rng.standard_normal((R, C), dtype=np.float32) * 3 + 1
    g, b = rng.standard_normal(C, dtype=np.float32), rng.standard_normal(C, dtype=np.float32)
    got = fast_compiled.layer_norm_rows(x, g, b, 1e-5)
    np.testing.assert_allclose(got, plain_model.layer_norm(x, g, b, 1e-5), rtol=0, atol=2e-5)


def test_the_plan_refuses_configurations_without_plain():
    with pytest.raises(ValueError, match="must include 'plain'"):
        fast_plan.measure_plan(lambda c, T: None, lambda: 0, ("k",), 1, ("all",))
    with pytest.raises(ValueError, match="config must be one of"):
        fast_plan.TrickPlan.fixed("turbo")


@pytest.mark.parametrize(
    "features, expected",
    [
        ("+avx2,+fma,+avx512f,+avx512bw", "AVX-512"),
        ("+avx2,+fma", "AVX2"),  # what NUMBA_CPU_FEATURES=+avx2,+fma gives an emulated laptop
        ("+avx2,-avx512f", "AVX2"),
        ("+sse4.2,+avx", "AVX"),
        ("+sse2", "SSE"),
    ],
)
def test_the_compiled_loops_name_the_vector_instructions_they_were_given(features, expected):
    assert fast_compiled.vector_instructions(features) == expected


@needs_numba
def test_a_cpu_name_alone_does_not_hide_the_hosts_wider_instructions(monkeypatch):
    """NUMBA_CPU_NAME=haswell without NUMBA_CPU_FEATURES still compiles with the host's
    features (numba's rule): the report must say so rather than claim AVX2."""
    config, binding = fast_compiled.numba.config, fast_compiled.binding
    monkeypatch.setattr(config, "CPU_NAME", "haswell")
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    host = fast_compiled.vector_instructions(binding.get_host_cpu_features().flatten())
    assert fast_compiled.compiled_for() == f"haswell, {host}"
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma")
    assert fast_compiled.compiled_for() == "haswell, AVX2"


# ---- a forward as one compiled call: rows one by one ("stepwise") or all at once ("fused") ----

# the float32 ones (the 16-bit ones need 16-bit weights: tests/unit/test_fast_16bit.py)
WHOLE_F32 = [c for c in fast_plan.WHOLE_FORWARD if c not in fast_plan.SIXTEEN_BIT]
WHOLE = pytest.mark.parametrize("config", WHOLE_F32)


def compiled_whole(model: GPT, config: str) -> FastGPT:
    return FastGPT(model.config, dict(model.params), fast_plan.TrickPlan.fixed(config))


def committed_prefixes(models, prefix: np.ndarray) -> list:
    # one fresh cache per model, holding `prefix` committed
    caches = [m.new_cache() for m in models]
    for model, cache in zip(models, caches, strict=True):
        model.forward(prefix, cache)
        cache.commit(len(prefix))
    return caches


@needs_numba
@WHOLE
@pytest.mark.parametrize("which", [0, 1], ids=["target", "draft"])
def test_a_compiled_forward_equals_the_plain_model_at_the_bundled_pairs_shapes(
    bundled, which, config
):
    """Prefill, decode steps and 2..16-row appends, each one compiled call (rows one by one,
    or all at once): the plain model's logits at every call (the caches feed later calls)."""
    model = bundled[which]
    tokens = np.frombuffer(b"def area(self):\n    return self.w * self.h\n" * 3, np.uint8)
    assert_same_logits_through_a_run(model, compiled_whole(model, config), tokens.astype(np.int64))


@needs_numba
@WHOLE
def test_a_compiled_forward_writes_the_cache_as_a_pass_does(plain, config):
    """Three rows after a committed prefix: the same K/V in the same slots, marked temporary,
    and a rollback forgets them, as for the plain pass."""
    quick = compiled_whole(plain, config)
    tokens = np.arange(20) % 64
    caches = committed_prefixes((plain, quick), tokens[:17])
    for model, cache in zip((plain, quick), caches, strict=True):
        model.forward(tokens[17:], cache)
    ours, theirs = caches
    assert (theirs.length, theirs.pending) == (ours.length, ours.pending) == (17, 3)
    assert_close_scaled(theirs.k[:, :, :20], ours.k[:, :, :20], "keys")
    assert_close_scaled(theirs.v[:, :, :20], ours.v[:, :, :20], "values")
    theirs.rollback()
    assert (theirs.length, theirs.pending) == (17, 0)


@needs_numba
def test_a_plan_runs_a_compiled_forward_only_where_it_chose_one(plain, monkeypatch):
    """Stepwise chosen for 1-2 rows, fused for 3: a 2-row forward with a cache runs its rows one
    by one, a 3-row one all at once; a 4-row one, a forward without a cache, and every forced
    plan run layer by layer."""
    calls = []
    real = fast_step.compiled_forward
    monkeypatch.setattr(
        fast_step, "compiled_forward", lambda *a: calls.append((len(a[2]), a[4])) or real(*a)
    )
    chosen = {("stepwise", 1), ("stepwise", 2), ("fused", 3)}
    plan = made_up_plan(lambda c, T: 1.0 if (c, T) in chosen else 2.0)
    text = fast_plan.describe_plan(plan)
    assert "| stepwise | rows one by one in one compiled call" in text, text
    assert "| fused | the whole pass in one compiled call" in text, text
    quick = FastGPT(plain.config, dict(plain.params), plan)
    cache = quick.new_cache()
    quick.forward(np.arange(2), cache)
    quick.forward(np.arange(3), cache)
    assert calls == [(2, 1), (3, 3)], "rows in groups of one, then all three at once"
    quick.forward(np.arange(4), cache)
    quick.forward(np.arange(2))  # no cache: nothing to write the rows' K/V into
    assert len(calls) == 2
    for forced in ("all", "none"):
        cache = quick.new_cache()
        fast(plain, tricks=forced).forward(np.arange(2), cache)
    assert len(calls) == 2, "a forced plan never runs a compiled forward"


@needs_numba
@WHOLE
def test_a_compiled_forward_sees_replaced_and_edited_weights(plain, config):
    """The compiled forward reads the model's own arrays: a replaced one is picked up at the
    next call (both layouts), an in-place edit of a vector too; still the plain logits."""
    quick = compiled_whole(plain, config)
    quick.params["h.1.mlp.c_fc.weight"] = quick.params["h.1.mlp.c_fc.weight"] * np.float32(2.0)
    quick.params["h.0.ln_2.bias"] += np.float32(0.5)
    edited = GPT(plain.config, {n: w.copy() for n, w in quick.params.items()})
    assert_same_logits_through_a_run(edited, quick, np.arange(30) % 64)
    assert not np.allclose(edited.forward(np.arange(5)), plain.forward(np.arange(5)))


@needs_numba
@WHOLE
def test_a_compiled_forward_leaves_weights_it_cannot_read_to_the_numpy_pass(plain, config):
    """A float64 weight: the compiled forward declines (nothing written) and the layer-by-layer
    forward runs, with the same logits as the plain model holding that weight."""
    quick = compiled_whole(plain, config)
    quick.params["h.0.attn.c_proj.bias"] = quick.params["h.0.attn.c_proj.bias"].astype(np.float64)
    cache = quick.new_cache()
    assert fast_step.compiled_forward(quick, quick.compiled_weights, np.arange(2), cache, 1) is None
    assert (cache.length, cache.pending) == (0, 0)
    edited = GPT(plain.config, dict(quick.params))
    assert_same_logits_through_a_run(edited, quick, np.arange(30) % 64)


@needs_numba
@WHOLE
def test_greedy_speculative_equals_autoregressive_with_a_compiled_pair(bundled, config):
    """Both bundled models run every forward as one compiled call: greedy speculative decoding
    still emits exactly greedy autoregressive decoding's tokens."""
    target, draft = (compiled_whole(m, config) for m in bundled)
    prompt = np.frombuffer(b"class Rectangle:\n    def area(self):\n", np.uint8).astype(np.int64)
    rng = np.random.default_rng(0)
    ar = generate(target, prompt, max_new_tokens=40, rng=rng, sampling=GREEDY)
    spec = speculative_generate(
        target, ModelDrafter(draft), prompt, k=5, max_new_tokens=40, rng=rng, sampling=GREEDY
    )
    assert spec.tokens == ar


@needs_numba
def test_the_compiled_exp_is_within_a_few_ulps_of_numpys():
    """The vectorised exp of the compiled forward (polynomial and built exponent): within 8
    float32 ulps of the exact value wherever that is a normal float, and tiny below."""
    x = np.concatenate([np.linspace(-87, 0, 20001), np.linspace(0, 80, 2001)]).astype(np.float32)
    out, bits = np.empty_like(x), np.empty(len(x), np.int32)
    fast_step.exp_into(x, out, bits)
    exact = np.exp(x.astype(np.float64))
    assert np.max(np.abs(out - exact) / exact) < 8 * 2.0**-24
    below = np.array([-100.0, -1e10], np.float32)
    fast_step.exp_into(below, out[:2], bits[:2])
    assert np.all(out[:2] >= 0) and np.all(out[:2] < 1e-37), "a masked score weighs nothing"


@needs_numba
def test_the_compiled_gelu_equals_the_plain_one():
    x = np.random.default_rng(5).standard_normal(4096).astype(np.float32) * 4
    got = x.copy()
    fast_step.gelu_row(got, np.empty_like(x), np.empty(len(x), np.int32))
    np.testing.assert_allclose(got, plain_model.gelu(x), rtol=1e-5, atol=1e-6)


@needs_numba
@WHOLE
def test_the_verification_pass_residual_is_compiled_too(plain, config, monkeypatch):
    """The speculative loop reads its pass as `residual` (the stream before ln_f): a plan that
    chose a compiled forward serves it as well, with the plain model's numbers; a tree's or a
    batch's pass (a placement given) runs layer by layer."""
    calls = []
    real = fast_step.compiled_forward
    monkeypatch.setattr(fast_step, "compiled_forward", lambda *a: calls.append(1) or real(*a))
    quick = compiled_whole(plain, config)
    tokens = np.arange(24) % 64
    caches = committed_prefixes((plain, quick), tokens[:18])
    calls.clear()
    ours, theirs = (m.residual(tokens[18:], c) for m, c in zip((plain, quick), caches, strict=True))
    assert calls == [1]
    assert_close_scaled(theirs, ours, "residual of a 6-row pass")
    assert caches[1].pending == 6


def ctrl_c_inside_compiled_code(*args):
    # what Python reports when numba returns with a KeyboardInterrupt set by a signal handler
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as interrupt:
        raise SystemError(
            "CPUDispatcher(...) returned a result with an exception set"
        ) from interrupt


@needs_numba
def test_a_ctrl_c_inside_the_compiled_forward_is_a_keyboard_interrupt_and_writes_nothing(
    plain, monkeypatch
):
    """The bench saves its finished cells on KeyboardInterrupt: a Ctrl-C that lands in a
    compiled call must arrive as one, not as numba's SystemError, and the cache stays at its
    last committed state."""
    quick = compiled_whole(plain, "fused")
    cache = quick.new_cache()
    quick.forward(np.arange(5), cache)
    cache.commit(5)
    monkeypatch.setattr(fast_step, "forward_kernel", ctrl_c_inside_compiled_code)
    with pytest.raises(KeyboardInterrupt):
        quick.forward(np.arange(3), cache)
    assert (cache.length, cache.pending) == (5, 0)
    with pytest.raises(SystemError, match="other"):  # any other SystemError stays one
        fast_compiled.interruptible(lambda: (_ for _ in ()).throw(SystemError("other")))
