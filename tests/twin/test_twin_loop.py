"""The twin's own code paths (NumPy in CI, CuPy with a device): equal to the reference where
the law is deterministic, one transfer per round, the decision vectorised correctly."""

from __future__ import annotations

import numpy as np
import pytest

import gpu
import reference
from gpu.device.backend import counting_transfers, to_device, to_host
from gpu.verification import decide
from reference.sampling import GREEDY, SamplingParams

PROMPTS = [
    b"def area(self):\n    return self.w",
    b"import os\nimport sys\n\n\ndef main(argv):\n    ",
    b"    for i, line in enumerate(lines):\n        if ",
]


def ids(text: bytes) -> np.ndarray:
    return np.frombuffer(text, np.uint8).astype(np.int64)


GREEDY_RUN = dict(max_new_tokens=48, sampling=GREEDY)


@pytest.fixture(scope="module")
def greedy_tokens(pair) -> list[list[int]]:
    """The twin's autoregressive greedy tokens per prompt (computed once: they do not depend
    on k); the test below holds them to the reference's speculative tokens."""
    target, _ = pair
    twin_target = gpu.GPT(target.config, target.params)
    rng = np.random.default_rng(0)
    return [gpu.generate(twin_target, ids(text), rng=rng, **GREEDY_RUN) for text in PROMPTS]


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_twin_equals_the_reference_token_for_token(pair, greedy_tokens, k):
    """Greedy has one answer: the twin's speculative and autoregressive loops give the
    reference's tokens for every prompt, and the same statistics."""
    target, draft = pair
    twin_target = gpu.GPT(target.config, target.params)
    twin_drafter = gpu.ModelDrafter(gpu.GPT(draft.config, draft.params))
    for text, expected in zip(PROMPTS, greedy_tokens, strict=True):
        prompt = ids(text)
        kw = dict(rng=np.random.default_rng(0), **GREEDY_RUN)
        ours = gpu.speculative_generate(twin_target, twin_drafter, prompt, k=k, **kw)
        theirs = reference.speculative_generate(
            target, reference.ModelDrafter(draft), prompt, k=k, **kw
        )
        assert ours.tokens == theirs.tokens == expected
        assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round


def test_one_device_to_host_transfer_per_round(pair):
    """Counted through gpu.device.backend.to_host, the helper the GPU mode uses: a round brings back
    (accepted, token, drafts, finite) in one copy, greedy and sampled, and the autoregressive
    baseline one per token."""
    target, draft = pair
    drafter = gpu.ModelDrafter(gpu.GPT(draft.config, draft.params))
    twin_target = gpu.GPT(target.config, target.params)
    for sampling in (GREEDY, SamplingParams(temperature=0.8, top_k=40)):
        with counting_transfers() as log:
            res = gpu.speculative_generate(
                twin_target,
                drafter,
                ids(PROMPTS[0]),
                k=4,
                max_new_tokens=40,
                rng=np.random.default_rng(1),
                sampling=sampling,
            )
        assert log.count == res.stats.rounds
    with counting_transfers() as log:
        out = gpu.generate(
            twin_target,
            ids(PROMPTS[1]),
            max_new_tokens=20,
            rng=np.random.default_rng(0),
            sampling=SamplingParams(0.8),
        )
    assert log.count == len(out)


def reference_decision(p, q, x, u):
    """The reference's rule written with an explicit list of uniforms, position by position
    (u[i] decides position i; u[k] draws the final token): what `decide` must reproduce."""
    k = len(x)
    for i in range(k):
        if u[i] >= min(1.0, p[i, x[i]] / q[i, x[i]]):
            r = np.maximum(p[i].astype(np.float64) - q[i], 0)
            r = r / r.sum() if r.sum() > 0 else p[i] / p[i].sum()
            cdf = np.cumsum(r)
            return i, int(min(np.searchsorted(cdf, u[k] * cdf[-1], side="right"), len(r) - 1))
    cdf = np.cumsum(p[k].astype(np.float64))
    return k, int(min(np.searchsorted(cdf, u[k] * cdf[-1], side="right"), len(cdf) - 1))


def test_the_vectorised_decision_matches_the_rule_uniform_by_uniform():
    """For random p, q, drafts and uniforms: the same accepted count and the same token as
    the position-by-position rule, including all-accepted (bonus) and k = 0."""
    rng = np.random.default_rng(0)
    seen = set()
    for trial in range(300):
        k, V = int(rng.integers(0, 5)), 6
        p = rng.dirichlet(np.ones(V) * 0.5, size=k + 1).astype(np.float32)
        q = rng.dirichlet(np.ones(V) * 0.5, size=k).astype(np.float32)
        x = np.array([rng.choice(V, p=q[i] / q[i].sum()) for i in range(k)], dtype=np.int64)
        u = rng.random(k + 1) ** (0.3 if trial % 2 else 3.0)  # push towards accepts / rejects
        expected = reference_decision(p, q, x, u)
        n, token = to_host(decide(to_device(p), to_device(q), to_device(x), to_device(u)))
        assert (int(n), int(token)) == expected, trial
        seen.add("bonus" if expected[0] == k else "residual")
    assert seen == {"bonus", "residual"}


def test_a_nan_in_the_rows_is_reported_not_sampled(pair):
    """The finiteness flag in the round's transfer replaces the reference's per-call check."""
    target, draft = pair
    params = dict(target.params)
    params["h.0.mlp.c_fc.bias"] = np.full_like(params["h.0.mlp.c_fc.bias"], np.nan)
    broken = gpu.GPT(target.config, params)
    drafter = gpu.ModelDrafter(gpu.GPT(draft.config, draft.params))
    with pytest.raises(ValueError, match="logits contains NaN"):
        gpu.speculative_generate(
            broken,
            drafter,
            ids(PROMPTS[0]),
            k=3,
            max_new_tokens=8,
            rng=np.random.default_rng(0),
            sampling=GREEDY,
        )
    with pytest.raises(ValueError, match="logits contains NaN"):
        gpu.generate(broken, ids(PROMPTS[0]), max_new_tokens=4, rng=np.random.default_rng(0))


def test_bad_input_gets_the_references_errors(pair):
    """The twin checks at the edge with the reference's own checks."""
    target, draft = pair
    drafter = gpu.ModelDrafter(draft)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        gpu.speculative_generate(target, drafter, [1, 2], k=2, max_new_tokens=4, rng=0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        gpu.speculative_generate(
            target, drafter, [1, 2], k=0, max_new_tokens=4, rng=np.random.default_rng(0)
        )
    with pytest.raises(ValueError, match="contains id 300"):
        gpu.generate(target, [1, 300], max_new_tokens=4, rng=np.random.default_rng(0))


@pytest.mark.gpu
def test_the_fused_gelu_kernel_equals_the_plain_function():
    """On a device, gelu is one fused kernel; it must give the plain function's numbers."""
    from gpu import model

    assert model.ON_DEVICE, "run with a CUDA device (pytest -m gpu)"
    x = model.xp.linspace(-6, 6, 10_001, dtype=np.float32)
    np.testing.assert_allclose(to_host(model.gelu(x)), to_host(model.gelu_plain(x)), atol=1e-6)


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=3),
        SamplingParams(temperature=1.0, top_p=0.5),
        SamplingParams(temperature=0.5, top_k=4, top_p=0.8),
        GREEDY,
    ],
    ids=["t1", "topk", "topp", "all", "greedy"],
)
def test_the_twins_distributions_equal_the_references(sampling):
    """The same processed distributions, ties included: top-p keeps tied tokens in the
    reference's (stable) order, which the device sort must reproduce."""
    from gpu.sampling import probabilities as twin_probabilities
    from reference.sampling import probabilities

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 12)).astype(np.float32)
    logits[:, 3] = logits[:, 5] = logits[:, 7] = 1.5  # three-way ties near the top
    np.testing.assert_allclose(
        to_host(twin_probabilities(logits, sampling)), probabilities(logits, sampling), atol=1e-6
    )


@pytest.mark.parametrize("hybrid", [False, True], ids=["lookup", "hybrid"])
def test_twin_runs_the_host_side_lookup_drafters(pair, hybrid):
    """gpu.LookupDrafter / gpu.HybridDrafter are the reference's own classes: the twin's loop
    checks a lookup proposal on the host and copies it over; greedy equals the reference.
    (The hybrid's fallback is a reference ModelDrafter: the twin's loop swaps the hybrid for
    one whose fallback is that drafter's twin, which drafts on the device.)"""
    target, draft = pair
    assert gpu.LookupDrafter is reference.LookupDrafter
    assert gpu.HybridDrafter is reference.HybridDrafter
    lookup = gpu.LookupDrafter(target.n_vocab, target.config.n_ctx)
    drafter = gpu.HybridDrafter(lookup, reference.ModelDrafter(draft)) if hybrid else lookup
    prompt = ids(PROMPTS[0] + b"\n\n" + PROMPTS[0])
    kw = dict(max_new_tokens=24, rng=np.random.default_rng(0), sampling=GREEDY)
    ours = gpu.speculative_generate(
        gpu.GPT(target.config, target.params), drafter, prompt, k=4, **kw
    )
    theirs = reference.speculative_generate(target, drafter, prompt, k=4, **kw)
    assert ours.tokens == theirs.tokens == reference.generate(target, prompt, **kw)
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round
    assert ours.stats.accepted > 0
