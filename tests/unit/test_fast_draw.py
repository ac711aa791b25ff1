"""The fast path's compiled draft draw (specdec/fast_cpu/draw.py): the reference's tokens and q
rows, used exactly where it applies, and trusted only as the library's own drafters are.
Its law is held by the oracle (tests/distribution/test_fast_draw_law.py)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu
import reference
from reference import drafters
from reference.drafters import ModelDrafter, proposals_checked
from reference.sampling import GREEDY, SamplingParams
from reference.speculative import speculative_generate
from specdec.bundled import load_bundled_pair
from specdec.drafting import make_drafter
from specdec.fast_cpu import compiled as fast_compiled
from specdec.fast_cpu import fast
from specdec.fast_cpu.draw import FastModelDrafter

needs_numba = pytest.mark.skipif(not fast_compiled.AVAILABLE, reason="numba (`fast` extra)")


@pytest.fixture(scope="module")
def fast_pair():
    target, draft = load_bundled_pair()
    return fast(target, tricks="all"), fast(draft, tricks="all")


def test_the_fast_path_drafts_with_the_compiled_draw_and_the_plain_models_do_not(fast_pair):
    plain_target, plain_draft = load_bundled_pair()
    assert type(make_drafter("model", reference, *fast_pair)) is FastModelDrafter
    hybrid = make_drafter("hybrid", reference, *fast_pair)
    assert type(hybrid.fallback) is FastModelDrafter
    assert type(make_drafter("model", reference, plain_target, plain_draft)) is ModelDrafter
    twin = make_drafter("model", gpu, gpu.GPT(plain_target.config, plain_target.params),
                        gpu.GPT(plain_draft.config, plain_draft.params))  # fmt: skip
    assert type(twin) is gpu.ModelDrafter


@needs_numba
@pytest.mark.parametrize("temperature", [0.8, 1.0])
def test_a_run_drafts_the_tokens_of_the_reference_draw(fast_pair, temperature):
    target, draft = fast_pair
    prompt = np.frombuffer(b"def area(self):\n    return ", np.uint8).astype(np.int64)
    kw = dict(k=5, max_new_tokens=48, sampling=SamplingParams(temperature=temperature))
    runs = [
        speculative_generate(target, kind(draft), prompt, rng=np.random.default_rng(3), **kw)
        for kind in (FastModelDrafter, ModelDrafter)
    ]
    assert list(runs[0].tokens) == list(runs[1].tokens)
    assert runs[0].stats.accepted == runs[1].stats.accepted


@needs_numba
def test_each_draw_gives_the_reference_token_and_row():
    rng = np.random.default_rng(0)
    ours, theirs = FastModelDrafter.__new__(FastModelDrafter), ModelDrafter.__new__(ModelDrafter)
    params = SamplingParams(temperature=0.8)
    for seed in range(300):
        logits = (rng.standard_normal(257) * 3).astype(np.float32)
        q_ours, q_theirs = np.empty(257, np.float32), np.empty(257, np.float32)
        a = ours.draw(logits, params, g := np.random.default_rng(seed), q_ours)
        b = theirs.draw(logits, params, h := np.random.default_rng(seed), q_theirs)
        assert a == b and g.random() == h.random()  # the same token, the same uniforms spent
        np.testing.assert_allclose(q_ours, q_theirs, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize(
    "params",
    [GREEDY, SamplingParams(temperature=0.8, top_k=5), SamplingParams(temperature=0.8, top_p=0.9)],
    ids=["greedy", "top-k", "top-p"],
)
def test_greedy_top_k_top_p_and_float64_rows_keep_the_reference_draw(params, monkeypatch):
    calls = []
    real = drafters.draw_token
    monkeypatch.setattr(drafters, "draw_token", lambda *a: calls.append(1) or real(*a))
    drafter = FastModelDrafter.__new__(FastModelDrafter)
    logits = np.linspace(-1, 1, 16, dtype=np.float32)
    drafter.draw(logits, params, np.random.default_rng(0), np.empty(16, np.float32))
    drafter.draw(logits.astype(np.float64), SamplingParams(0.8), np.random.default_rng(0),
                 np.empty(16))  # fmt: skip
    assert len(calls) == 2


def test_without_numba_the_reference_draw_runs(monkeypatch):
    calls = []
    real = drafters.draw_token
    monkeypatch.setattr(drafters, "draw_token", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(fast_compiled, "AVAILABLE", False)
    drafter = FastModelDrafter.__new__(FastModelDrafter)
    logits = np.linspace(-1, 1, 16, dtype=np.float32)
    drafter.draw(logits, SamplingParams(0.8), np.random.default_rng(0), np.empty(16, np.float32))
    assert calls == [1]


def test_a_subclass_that_replaces_the_draw_is_checked_unless_it_says_it_is_the_librarys():
    class OwnDraw(ModelDrafter):  # a plug-in: its rows are checked each round
        def draw(self, logits, sampling, rng, out):
            return super().draw(logits, sampling, rng, out)

    model = load_bundled_pair()[1]
    assert proposals_checked(ModelDrafter(model)) and proposals_checked(FastModelDrafter(model))
    assert not proposals_checked(OwnDraw(model))  # (FastModelDrafter declares it itself)
