"""EAGLE on the twin (gpu/eagle.py): the features every loop hands over, the drafter's rows and
draws, its cache, greedy runs equal to the reference's round for round, one transfer per
round, no hidden sync, its draft steps through the fused block; EAGLE-1 and EAGLE-3."""

from __future__ import annotations

import json
from contextlib import nullcontext

import numpy as np
import pytest

import gpu
import gpu.eagle
import gpu.weights
import reference
import reference.eagle
import reference.weights
from gpu.device.backend import counting_launches, counting_transfers, to_host
from gpu.drafters import as_twin_drafter
from reference.config import GPTConfig
from reference.eagle import init_eagle_params
from reference.model import causal_placement, init_params
from reference.sampling import GREEDY, SamplingParams, probabilities
from reference.weights import CheckpointError, write_safetensors
from specdec.bundled import MODELS_DIR

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # the device's python3 has none (scripts/gpu_preflight.py checks it)
    threadpool_limits = None

SAMPLINGS = [
    SamplingParams(1.0),
    SamplingParams(0.7, top_k=3),
    SamplingParams(1.3, top_p=0.8),
    SamplingParams(0.9, top_k=5, top_p=0.9),
]
# code that repeats itself (the hybrid's lookup matches in some rounds, not in others)
PROMPT = np.frombuffer(
    b"def area(self):\n    return self.w * self.h\n\ndef area(self):\n    return ", np.uint8
).astype(np.int64)
VARIANTS = {"eagle-1": None, "eagle-3": (1, 2)}  # the small target's feature layers


@pytest.fixture(scope="module", autouse=True)
def one_blas_thread():
    """One BLAS thread: these passes are small, and several threads fighting over a busy
    machine's cores make them many times slower (as in test_strict_array.py)."""
    with threadpool_limits(limits=1, user_api="blas") if threadpool_limits else nullcontext():
        yield


@pytest.fixture(scope="module")
def small():
    """A small random target (peaked enough that drafts are sometimes accepted) and its twin."""
    cfg = GPTConfig(n_vocab=16, n_ctx=64, n_embd=16, n_head=2, n_layer=2)
    target = reference.GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.3))
    return target, gpu.GPT(cfg, target.params)


def eagle_params(target, layers, seed: int = 1, std: float = 0.3) -> dict:
    return init_eagle_params(target.config, np.random.default_rng(seed), std, layers)


def by_hand(target, params, layers, context, drafts, sampling) -> np.ndarray:
    """q rows [len(drafts) + 1, V] from the definition, on the host, without any drafter's
    cache or bookkeeping: g(t) = [e(x(t+1)); f(t)] W + b over the committed positions (f the
    target's features of context[:-1], EAGLE-3's reduced), then one row per draft fed with
    the block's own previous output."""
    wte, W, b = target.params["wte.weight"], params["fc.weight"], params["fc.bias"]
    block = reference.EagleDrafter(target, params, layers).block_model
    f = target.layer_features(np.asarray(context[:-1]), layers=layers)  # [n-1, F]
    if layers is not None and len(layers) > 1:
        f = f @ params["reduce.weight"] + params["reduce.bias"]
    g = [np.concatenate([wte[context[t + 1]], f[t]]) @ W + b for t in range(len(context) - 1)]
    rows = []
    for i in range(len(drafts) + 1):
        G = np.stack(g)
        f_hat = block.blocks(G, None, causal_placement(0, len(G)), 0, 1)[-1]
        rows.append(probabilities(target.logits(target.norm(f_hat[None], "ln_f"))[0], sampling))
        if i < len(drafts):
            g.append(np.concatenate([wte[drafts[i]], f_hat]) @ W + b)
    return np.stack(rows)


def host(a) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else to_host(a)


# ---------------------------------------------------------------- the drafter and its rounds


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_twin_round_hands_over_the_kept_positions_features(small, variant):
    """Through the twin's own round (rounds that reject and rounds that accept everything,
    every sampling transform): the features the drafter holds are the target's (EAGLE-3's
    reduced), one per committed target slot; its committed slots equal a fresh reference
    prefill of the same history; every q row is the definition's."""
    target, twin = small
    layers = VARIANTS[variant]
    params = eagle_params(target, layers)
    seen_full = seen_reject = False
    for sampling in SAMPLINGS:
        drafter = gpu.EagleDrafter(twin, params, layers)
        rng = np.random.default_rng(5)
        context = np.array([1, 5, 2, 5, 3])
        cache = twin.new_cache()
        reference.speculative.prefill(twin, cache, drafter, context)
        for _ in range(8):
            rnd = gpu.speculative_round(twin, cache, drafter, context, 2, sampling, rng)
            drafts, v = rnd.draft.tokens, rnd.verification
            want = by_hand(target, params, layers, context, drafts[:-1], sampling)
            np.testing.assert_allclose(host(rnd.draft.q), want, atol=1e-5)
            seen_full |= v.accepted == rnd.k
            seen_reject |= v.accepted < rnd.k
            context = np.concatenate([context, v.emitted(drafts)])
            assert drafter.n_known == cache.length == len(context) - 1
            fresh = reference.EagleDrafter(target, params, layers)
            fresh.observe_features(target.layer_features(context[:-1], layers=layers))
            np.testing.assert_allclose(
                host(drafter.features[: drafter.n_known]), fresh.features[: fresh.n_known],
                atol=1e-4,
            )  # fmt: skip
            fresh.prefill(context[:-1])
            dc = drafter.cache
            assert dc.pending == 0 and dc.length == rnd.draft_cache.after <= fresh.cache.length
            for got, ref in zip(dc.committed(), fresh.cache.committed(), strict=True):
                np.testing.assert_allclose(host(got), ref[:, :, : dc.length], atol=1e-5)
    assert seen_full and seen_reject


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_twin_proposal_is_the_references_from_the_same_generator(small, variant):
    """The k uniforms are the ones the reference's k draws take: after the same history,
    the twin drafts the reference's tokens with its q rows, for every sampling transform."""
    target, twin = small
    layers = VARIANTS[variant]
    params = eagle_params(target, layers)
    context = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    for sampling in [*SAMPLINGS, GREEDY]:
        drafts = []
        for core, model in ((reference, target), (gpu, twin)):
            drafter = core.EagleDrafter(model, params, layers)
            drafter.observe_features(model.layer_features(context[:-1], layers=layers))
            drafter.prefill(context[:-1])
            drafts.append(drafter.propose(context, 5, sampling, np.random.default_rng(7)))
        theirs, ours = drafts
        assert host(ours.tokens).tolist() == theirs.tokens.tolist()
        np.testing.assert_allclose(host(ours.q), theirs.q, atol=1e-5)


def test_the_twins_drafter_refuses_what_the_references_refuses(small):
    target, twin = small
    params = eagle_params(target, None)
    drafter = gpu.EagleDrafter(twin, params)
    with pytest.raises(ValueError, match="shape \\[m, 16\\]"):
        drafter.observe_features(np.zeros((2, 8), np.float32))
    with pytest.raises(ValueError, match="exceed n_ctx"):
        drafter.observe_features(np.zeros((65, 16), np.float32))
    drafter.observe_features(np.zeros((2, 16), np.float32))
    with pytest.raises(ValueError, match="features of 2 positions.*context of 5 tokens"):
        drafter.propose(np.arange(5), 2, GREEDY, np.random.default_rng(0))
    with pytest.raises(ValueError, match="need exactly"):
        gpu.EagleDrafter(twin, eagle_params(target, (1, 2)))  # reduce.* without its layers
    one = gpu.EagleDrafter(twin, params)
    one.prefill([])  # a one-token prompt: nothing cached, no feature
    empty = one.propose(np.array([4]), 3, GREEDY, np.random.default_rng(0))  # no feature yet
    assert empty.tokens.shape == (0,) and empty.q.shape == (0, 16)


# ---------------------------------------------------------------- the loops


@pytest.mark.parametrize("variant", ["eagle-1", "eagle-3"])
def test_greedy_twin_eagle_equals_the_reference_round_for_round(pair, variant):
    """The bundled target: the reference's drafter handed to the twin's loop (swapped for
    its twin) gives the reference's tokens, accepted counts, drafts and q rows in every
    round (a trace costs two more transfers a round: its p and q rows)."""
    target = pair[0]
    layers = None if variant == "eagle-1" else (2, 4, target.config.n_layer)
    params = init_eagle_params(target.config, np.random.default_rng(1), 0.02, layers)
    kw = dict(k=4, max_new_tokens=16, sampling=GREEDY, trace=True)
    theirs = reference.speculative_generate(
        target, reference.EagleDrafter(target, params, layers), PROMPT, rng=rng(), **kw
    )
    with counting_transfers() as log:
        ours = gpu.speculative_generate(
            target, reference.EagleDrafter(target, params, layers), PROMPT, rng=rng(), **kw
        )
    assert ours.tokens == theirs.tokens
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round
    assert log.count == 3 * ours.stats.rounds
    for a, b in zip(ours.trace, theirs.trace, strict=True):
        assert list(a.draft_tokens) == list(b.draft_tokens)
        np.testing.assert_allclose(a.q_rows, b.q_rows, atol=1e-5)


def test_the_trained_drafter_on_the_twin_drafts_as_the_references(pair):
    """models/eagle/ (python -m specdec.training.train_eagle): loaded by the twin's
    load_eagle and by the reference's, on the bundled target, greedy and at T = 0.8: the
    same tokens and accepted counts at greedy, proposals equal draw for draw at T = 0.8 (a
    trained drafter accepts: the comparison is not vacuous)."""
    folder = MODELS_DIR / "eagle"
    if not (folder / "eagle.safetensors").is_file():
        pytest.skip(f"no trained EAGLE drafter in {folder} yet")
    target = pair[0]
    twin = gpu.GPT(target.config, target.params)
    kw = dict(k=4, max_new_tokens=24, sampling=GREEDY)
    theirs = reference.speculative_generate(
        target, reference.weights.load_eagle(folder, target), PROMPT, rng=rng(), **kw
    )
    ours = gpu.speculative_generate(
        twin, gpu.weights.load_eagle(folder, twin), PROMPT, rng=rng(), **kw
    )
    assert ours.tokens == theirs.tokens
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round
    assert ours.stats.accepted > 0
    sampling = SamplingParams(0.8)
    drafts = []
    for core, model in ((reference, target), (gpu, twin)):
        drafter = core.weights.load_eagle(folder, model)
        layers = drafter.feature_layers
        drafter.observe_features(model.layer_features(PROMPT[:-1], layers=layers))
        drafter.prefill(PROMPT[:-1])
        drafts.append(drafter.propose(PROMPT, 5, sampling, np.random.default_rng(3)))
    assert host(drafts[1].tokens).tolist() == drafts[0].tokens.tolist()
    np.testing.assert_allclose(host(drafts[1].q), drafts[0].q, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_twin_eagle_batch_equals_the_reference_batch(small, variant):
    """Ragged prompts (one of one token), EAGLE rows beside a draft model's row: the batched
    loop hands each EAGLE row the features it reads, at prefill and after every round; one
    transfer per batched round."""
    target, twin = small
    layers = VARIANTS[variant]
    params = eagle_params(target, layers)
    draft_cfg = GPTConfig(n_vocab=16, n_ctx=64, n_embd=8, n_head=2, n_layer=1)
    draft = reference.GPT(draft_cfg, init_params(draft_cfg, np.random.default_rng(2), std=0.3))
    prompts = [np.array([4, 4, 2, 9, 1]), np.array([3]), np.array([7, 7]), np.array([1, 2, 3])]

    def drafters(core, model):
        rows = [core.EagleDrafter(model, params, layers) for _ in prompts[:3]]
        return rows + [core.ModelDrafter(draft)]

    kw = dict(k=3, max_new_tokens=14, sampling=GREEDY)
    theirs = reference.speculative_generate_batch(
        target, drafters(reference, target), prompts, rng=rng(), **kw
    )
    with counting_transfers() as log:
        ours = gpu.speculative_generate_batch(twin, drafters(gpu, twin), prompts, rng=rng(), **kw)
    handed = gpu.speculative_generate_batch(
        target, drafters(reference, target), prompts, rng=rng(), **kw
    )
    assert [r.tokens for r in ours] == [r.tokens for r in theirs] == [r.tokens for r in handed]
    assert [r.stats.accepted_per_round for r in ours] == [
        r.stats.accepted_per_round for r in theirs
    ]
    assert log.count == max(r.stats.rounds for r in ours)
    assert sum(r.stats.accepted for r in ours[:3]) > 0


def test_greedy_hybrid_with_an_eagle_fallback_equals_the_reference(small):
    """Lookup rounds leave the EAGLE cache alone; the features still arrive (the hybrid passes
    them on) and the next EAGLE round catches up over every position it missed."""
    target, twin = small
    params = eagle_params(target, None)
    prompt = np.array([1, 2, 3, 1, 2, 3, 1, 2])

    def hybrid(core, model):
        lookup = core.LookupDrafter(16, 64, 3, 1)
        return core.HybridDrafter(lookup, core.EagleDrafter(model, params))

    kw = dict(k=3, max_new_tokens=20, sampling=GREEDY)
    theirs = reference.speculative_generate(
        target, hybrid(reference, target), prompt, rng=rng(), **kw
    )
    drafter = hybrid(gpu, twin)
    who = []
    real_propose = drafter.propose

    def propose(*args):
        draft = real_propose(*args)
        who.append(type(drafter.proposer).__name__)
        return draft

    drafter.propose = propose
    with counting_transfers() as log:
        ours = gpu.speculative_generate(twin, drafter, prompt, rng=rng(), **kw)
    assert ours.tokens == theirs.tokens
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round
    assert set(who) == {"LookupDrafter", "EagleDrafter"}
    assert log.count == ours.stats.rounds


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_broken_eagle_is_reported_not_accepted(small):
    """A fusion layer broken after its checks (NaN) makes q NaN, which the twin does not
    check per step; the round's one transfer carries the finiteness flag of q too, so the
    run fails loudly."""
    target, twin = small
    drafter = gpu.EagleDrafter(twin, eagle_params(target, None))
    drafter.w = drafter.w + np.float32(np.nan)
    with pytest.raises(ValueError, match="logits contains NaN"):
        gpu.speculative_generate(
            twin, drafter, [1, 2, 3], k=3, max_new_tokens=8, rng=rng(), sampling=SAMPLINGS[0]
        )


def test_a_reference_eagle_drafter_has_a_twin(small):
    """What the oracle hands the twin: the reference's drafter becomes the twin's, once, with
    the same weights, feature layers and reduction."""
    target, _ = small
    for layers in VARIANTS.values():
        theirs = reference.EagleDrafter(target, eagle_params(target, layers), layers)
        ours = as_twin_drafter(theirs)
        assert type(ours) is gpu.EagleDrafter and as_twin_drafter(theirs) is ours
        assert ours.feature_layers == theirs.feature_layers
        np.testing.assert_array_equal(host(ours.w), theirs.w)
        assert (ours.reduce is None) == (theirs.reduce is None)
        hybrid = as_twin_drafter(reference.HybridDrafter(reference.LookupDrafter(16, 64), theirs))
        assert hybrid.fallback is ours
        assert getattr(hybrid, "feature_layers", None) == theirs.feature_layers


def test_load_eagle_reads_the_references_files_into_the_twins_drafter(small, tmp_path):
    """The twin's load_eagle: the reference's two files (float16 weights, metadata naming
    the feature layers), the reference's errors; its drafter proposes the reference's."""
    target, twin = small
    with pytest.raises(FileNotFoundError, match="specdec.training.train_eagle"):
        gpu.weights.load_eagle(tmp_path, twin)
    params = eagle_params(target, (1, 2))
    half = {name: value.astype(np.float16) for name, value in params.items()}
    write_safetensors(tmp_path / "eagle.safetensors", half)
    (tmp_path / "metadata.json").write_text(json.dumps({"feature_layers": [2]}))
    with pytest.raises(CheckpointError, match="does not hold an EAGLE drafter"):
        gpu.weights.load_eagle(tmp_path, twin)  # reduce.* with one feature layer
    (tmp_path / "metadata.json").write_text(json.dumps({"feature_layers": [1, 2]}))
    context = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    drafts = []
    for core, model in ((reference, target), (gpu, twin)):
        drafter = core.weights.load_eagle(tmp_path, model)
        assert type(drafter) is core.EagleDrafter and drafter.feature_layers == (1, 2)
        drafter.observe_features(model.layer_features(context[:-1], layers=(1, 2)))
        drafter.prefill(context[:-1])
        drafts.append(drafter.propose(context, 4, SAMPLINGS[0], np.random.default_rng(7)))
    assert host(drafts[1].tokens).tolist() == drafts[0].tokens.tolist()
    np.testing.assert_allclose(host(drafts[1].q), drafts[0].q, atol=1e-5)


# ---------------------------------------------------------------- on the stand-in


@pytest.mark.parametrize("variant", ["eagle-1", "eagle-3"])
@pytest.mark.parametrize("sampling", [GREEDY, SamplingParams(0.8, top_k=8, top_p=0.9)])
def test_eagle_rounds_make_no_hidden_sync(small, variant, sampling):
    """On the strict stand-in: the chain loop and the batch, greedy and sampled with top-k
    and top-p, one sanctioned transfer per round; greedy gives the reference's tokens."""
    target, _ = small
    layers = VARIANTS[variant]
    params = eagle_params(target, layers)
    prompts = [np.array([4, 4, 2, 9, 1]), np.array([3, 1])]
    kw = dict(k=3, max_new_tokens=10, sampling=sampling)
    with counting_launches(strict=True) as launches:
        twin = gpu.GPT(target.config, target.params)
        with counting_transfers() as chain:
            out = gpu.speculative_generate(
                twin, gpu.EagleDrafter(twin, params, layers), prompts[0], rng=rng(), **kw
            )
        with counting_transfers() as batched:
            batch = gpu.speculative_generate_batch(
                twin, [gpu.EagleDrafter(twin, params, layers) for _ in prompts], prompts,
                rng=rng(), **kw,
            )  # fmt: skip
    assert chain.count == out.stats.rounds
    assert batched.count == max(r.stats.rounds for r in batch)
    assert launches.count > 0 and not launches.hidden_syncs
    if sampling.greedy:
        theirs = reference.speculative_generate(
            target, reference.EagleDrafter(target, params, layers), prompts[0], rng=rng(), **kw
        )
        assert out.tokens == theirs.tokens


def test_an_eagle_draft_step_runs_the_fused_block(small):
    """Each draft step is the fused block's four linears and its attention kernel, the
    fusion's linear, and the output layer's: a proposal of k drafts after a one-row catch-up
    makes 6k fused linears (catch-up: fusion + 4; each draft: output, and for the first k-1
    a fusion + 4) and k attention launches, and one draw per draft."""
    target, _ = small
    k = 4
    with counting_launches() as log:
        twin = gpu.GPT(target.config, target.params)
        drafter = gpu.EagleDrafter(twin, eagle_params(target, None))
        context = np.array([1, 5, 2, 5, 3])
        drafter.observe_features(twin.residual(context[:-1]))
        drafter.prefill(context[:-1])
        with counting_launches() as step:
            drafter.propose(context, k, GREEDY, rng())
    assert step.by_name["fused fused_linear"] == 6 * k
    assert step.by_name["fused cached_attention"] == k
    assert step.by_name["fused pick_rows"] == k
    assert log.count > step.count


# ---------------------------------------------------------------- EAGLE-2: the dynamic tree


def counted_confidence(drafter, calls: list) -> None:
    # counts the drafter's `confidence` calls: each is one transfer on the twin
    real = drafter.confidence
    drafter.confidence = lambda f_hat: calls.append(1) or real(f_hat)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("sampling", [GREEDY, SamplingParams(0.9, top_k=6)], ids=["greedy", "t"])
def test_twin_dynamic_trees_equal_the_references(small, variant, sampling):
    """Point masses: the walk draws on the host as the reference's, so greedy and sampled
    runs give the reference's tokens, accepted paths and trees from the same seed, whether
    the twin's drafter is built on the twin or the reference's is handed over. Transfers:
    one per block pass of the drafter (its `confidence`) plus the walk's one per round."""
    target, twin = small
    layers = VARIANTS[variant]
    params = eagle_params(target, layers)
    prompt = np.array([4, 4, 2, 9, 1, 3, 3])
    kw = dict(max_new_tokens=20, sampling=sampling, trace=True)

    def tree(core, model):
        return core.EagleTreeDrafter(core.EagleDrafter(model, params, layers), 12, 4, 4)

    theirs = reference.tree.tree_speculative_generate(
        target, tree(reference, target), prompt, rng=rng(), **kw
    )
    drafter, calls = tree(gpu, twin), []
    counted_confidence(drafter, calls)
    with counting_transfers() as log:
        ours = gpu.tree.tree_speculative_generate(twin, drafter, prompt, rng=rng(), **kw)
    handed = gpu.tree.tree_speculative_generate(
        target, tree(reference, target), prompt, rng=rng(), **kw
    )
    assert ours.tokens == theirs.tokens == handed.tokens
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round
    assert ours.stats.nodes == theirs.stats.nodes
    for a, b in zip(ours.trace, theirs.trace, strict=True):
        assert list(a.draft_tokens) == list(b.draft_tokens) and a.emitted == b.emitted
    assert log.count == ours.stats.rounds + len(calls)
    assert sum(ours.stats.accepted_per_round) > 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_twin_tree_round_hands_over_the_kept_positions_features(small, variant):
    """Through the twin's tree round: the drafter's features are the target's of every
    committed position (catch-up, then the accepted path, gathered out of tree order), its
    committed slots a fresh reference prefill's, and every tree the reference's for the same
    history (tokens, parents, point-mass q)."""
    target, twin = small
    layers = VARIANTS[variant]
    params = eagle_params(target, layers)
    drafter = gpu.EagleTreeDrafter(gpu.EagleDrafter(twin, params, layers), 12, 4, 4)
    context = np.array([1, 5, 2, 5, 3])
    cache = twin.new_cache()
    reference.speculative.prefill(twin, cache, drafter, context)
    rng_ = np.random.default_rng(4)
    sampling = GREEDY  # accepts the most often: paths of several nodes, out of tree order
    kept = []
    for _ in range(10):
        mirror = reference.EagleTreeDrafter(
            reference.EagleDrafter(target, params, layers), 12, 4, 4
        )
        mirror.eagle.observe_features(target.layer_features(context[:-1], layers=layers))
        mirror.prefill(context[:-1])
        want = mirror.propose_tree(context, 4, 64, sampling, np.random.default_rng(0))
        rnd = gpu.tree.tree_round(twin, cache, drafter, context, 4, sampling, rng_)
        assert rnd.tree.tokens.tolist() == want.tokens.tolist()
        assert rnd.tree.parents.tolist() == want.parents.tolist()
        np.testing.assert_array_equal(rnd.tree.q, want.q)
        kept.append(rnd.result.path)
        context = np.concatenate([context, rnd.verification.emitted(rnd.draft.tokens)])
        eagle = drafter.eagle
        assert eagle.n_known == cache.length == len(context) - 1
        fresh = reference.EagleDrafter(target, params, layers)
        fresh.observe_features(target.layer_features(context[:-1], layers=layers))
        np.testing.assert_allclose(
            host(eagle.features[: eagle.n_known]), fresh.features[: fresh.n_known], atol=1e-4
        )
        fresh.prefill(context[:-1])
        dc = eagle.cache
        assert dc.pending == 0 and dc.length <= fresh.cache.length
        for got, ref in zip(dc.committed(), fresh.cache.committed(), strict=True):
            np.testing.assert_allclose(host(got), ref[:, :, : dc.length], atol=1e-5)
    assert any(path and path[-1] > len(path) for path in kept)  # kept out of tree order


def test_a_reference_dynamic_tree_drafter_has_a_twin(small):
    target, _ = small
    theirs = reference.EagleTreeDrafter(
        reference.EagleDrafter(target, eagle_params(target, (1, 2)), (1, 2)), 5, 4, 2
    )
    ours = as_twin_drafter(theirs)
    assert type(ours) is gpu.EagleTreeDrafter and as_twin_drafter(theirs) is ours
    assert type(ours.eagle) is gpu.EagleDrafter and ours.eagle is as_twin_drafter(theirs.eagle)
    assert (ours.max_nodes, ours.depth, ours.top, ours.feature_layers) == (5, 4, 2, (1, 2))


@pytest.mark.parametrize("variant", ["eagle-1", "eagle-3"])
def test_dynamic_tree_rounds_make_no_hidden_sync(small, variant):
    """On the strict stand-in, sampled: every value the tree's growth reads comes back
    through to_host (one per block pass), and the walk's p rows in one more."""
    target, _ = small
    layers = VARIANTS[variant]
    params = eagle_params(target, layers)
    calls = []
    with counting_launches(strict=True) as launches:
        twin = gpu.GPT(target.config, target.params)
        drafter = gpu.EagleTreeDrafter(gpu.EagleDrafter(twin, params, layers), 6, 3, 2)
        counted_confidence(drafter, calls)
        with counting_transfers() as log:
            out = gpu.tree.tree_speculative_generate(
                twin, drafter, [4, 4, 2, 9, 1], max_new_tokens=10, rng=rng(),
                sampling=SamplingParams(0.8, top_k=8, top_p=0.9),
            )  # fmt: skip
    assert log.count == out.stats.rounds + len(calls)
    assert launches.count > 0 and not launches.hidden_syncs


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)
