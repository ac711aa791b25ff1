"""Trained drafters for a Llama-family target (issue 48, item 3): the EAGLE drafter's Llama
layer trained in torch (specdec/training/eagle_llama.py) and read by reference/eagle.py, the
RMSNorm exit head (train_heads.py) read by reference/early_exit.py, the refusal of a head
or an EAGLE drafter made for the other family, and the method table's use of them. Tiny
random targets with GQA, a few training steps. Skipped where torch is not installed."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the training scripts need torch (train/dev extras)")

import reference  # noqa: E402
from reference import generate, speculative_generate  # noqa: E402
from reference.config import LlamaConfig  # noqa: E402
from reference.eagle import EagleDrafter, eagle_param_shapes, init_eagle_params  # noqa: E402
from reference.early_exit import EXIT_NORM, EXIT_RMS_NORM, EarlyExitDrafter  # noqa: E402
from reference.llama import Llama, init_llama_params  # noqa: E402
from reference.sampling import SamplingParams  # noqa: E402
from reference.speculative import prefill, speculative_round  # noqa: E402
from reference.tree import EagleTreeDrafter, tree_speculative_generate  # noqa: E402
from reference.weights import load_eagle, write_safetensors  # noqa: E402
from specdec.cli.methods import runnable  # noqa: E402
from specdec.training import train_eagle as te  # noqa: E402
from specdec.training import train_heads as th  # noqa: E402
from specdec.training.eagle_llama import LlamaEagle  # noqa: E402
from specdec.training.llama_states import llama_states, output_matrix  # noqa: E402

from .helpers import GREEDY, make_model  # noqa: E402

# GQA 2:1, untied, Llama 3 style rope base; a Qwen2-like twin with q/k/v biases, tied
CFG = LlamaConfig(
    n_vocab=24, n_ctx=64, n_embd=16, n_head=4, n_kv_head=2, n_layer=3, n_inner=24,
    rope_theta=500.0,
)  # fmt: skip
QWEN = LlamaConfig(
    n_vocab=24, n_ctx=64, n_embd=16, n_head=4, n_kv_head=1, n_layer=2, n_inner=24,
    tie_word_embeddings=True, model_type="qwen2",
)  # fmt: skip
EAGLE_1, EAGLE_3 = (3,), (1, 3)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # tiny models: several torch threads only wait for each other on a shared machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def plain_greedy(target, prompt, n: int) -> list[int]:
    return generate(target, prompt, max_new_tokens=n, rng=np.random.default_rng(0), sampling=GREEDY)


@pytest.fixture(scope="module")
def target() -> Llama:
    return Llama(CFG, init_llama_params(CFG, np.random.default_rng(0), std=0.5))


def trained_eagle(target: Llama, layers, steps: int) -> LlamaEagle:
    # the Llama drafter after `steps` steps of train_eagle's own training on random windows
    torch.manual_seed(0)
    windows = np.random.default_rng(1).integers(0, target.n_vocab, size=(6, 20))
    states = llama_states(target, windows, layers)
    args = argparse.Namespace(
        seed=0, lr=1e-2, steps=steps, minutes=5.0, batch=4, unroll=3, chains=8, kl_weight=1.0,
        bf16=False,
    )  # fmt: skip
    model = LlamaEagle(target, layers, torch.Generator().manual_seed(0))
    model.record = te.train(model, states, args, "eagle-1" if len(layers) == 1 else "eagle-3")
    return model


def numpy_params(model: LlamaEagle) -> dict[str, np.ndarray]:
    return {n: a.detach().numpy().copy() for n, a in model.arrays().items()}


@pytest.mark.parametrize("layers", [EAGLE_1, EAGLE_3], ids=["eagle-1", "eagle-3"])
def test_the_numpy_drafter_proposes_the_torch_llama_drafters_q(target, layers):
    """A round of reference.eagle on the trained weights gives the q rows of the torch
    drafter unrolled on the same context and drafts (its own f^, RoPE at each row's slot)."""
    model = trained_eagle(target, layers, steps=30)
    assert model.record["final_loss"] < model.record["curve"][0]["loss"]
    with torch.no_grad():  # a few steps leave attention near uniform: blind to positions
        gen = torch.Generator().manual_seed(2)
        for name, value in model.arrays().items():
            if name.startswith("model.layers.0.") and value.ndim == 2:
                value.add_(torch.randn(value.shape, generator=gen) * 0.5)
    params = numpy_params(model)
    assert {n: a.shape for n, a in params.items()} == eagle_param_shapes(CFG, layers)
    drafter = EagleDrafter(target, params, feature_layers=layers)
    context = np.random.default_rng(3).integers(0, CFG.n_vocab, size=11)
    prefill(target, target.new_cache(), drafter, context)
    k = 4
    draft = drafter.propose(context, k, SamplingParams(1.0), np.random.default_rng(4))

    n = len(context)  # chain c = n - 1, the last committed token; one dummy token after it
    windows = np.concatenate([context, [0]])[None]
    feats = te.features_of(llama_states(target, windows, layers), layers)
    y = torch.zeros(1, k, n + 1, dtype=torch.int64)
    y[0, :, n - 1] = torch.from_numpy(draft.tokens)
    q = te.eagle_chain_logq(model, windows, feats, {"y": y})[0, :, n - 1].exp().numpy()
    assert np.abs(q - draft.q).max() < 2e-5, np.abs(q - draft.q).max()


def test_greedy_with_a_llama_eagle_drafter_is_plain_greedy_chain_and_tree():
    """Speculative greedy output equals the target's own greedy, with the Llama EAGLE
    drafter as a chain and as EAGLE-2's dynamic tree (EAGLE-3 features, a Qwen2-like
    target: q/k/v biases, tied output layer, 4:1 GQA)."""
    target = Llama(QWEN, init_llama_params(QWEN, np.random.default_rng(5), std=0.5))
    params = init_eagle_params(QWEN, np.random.default_rng(6), std=0.3, feature_layers=(1, 2))
    assert "model.layers.0.self_attn.q_proj.bias" in params
    prompt = [3, 1, 4, 1, 5, 9]
    plain = plain_greedy(target, prompt, 24)
    chain = EagleDrafter(target, params, feature_layers=(1, 2))
    got = speculative_generate(
        target, chain, prompt, k=3, max_new_tokens=24, rng=np.random.default_rng(0),
        sampling=GREEDY,
    )  # fmt: skip
    assert got.tokens == plain
    tree = EagleTreeDrafter(EagleDrafter(target, params, feature_layers=(1, 2)), max_nodes=6)
    got = tree_speculative_generate(
        target, tree, prompt, max_new_tokens=24, rng=np.random.default_rng(0), sampling=GREEDY
    )
    assert got.tokens == plain


def test_the_llama_drafters_committed_slots_equal_a_fresh_prefill(target):
    """The KV invariant with RoPE in the drafter's block: after rounds that reject and rounds
    that accept, its committed slots hold the keys a fresh prefill of the same (feature,
    token) history writes, each rotated by its slot's position; never a draft row's."""
    params = init_eagle_params(CFG, np.random.default_rng(8), std=0.3, feature_layers=EAGLE_3)
    drafter = EagleDrafter(target, params, feature_layers=EAGLE_3)
    rng, sampling = np.random.default_rng(9), SamplingParams(temperature=1.0)
    context = np.array([1, 5, 2, 5, 3])
    cache = target.new_cache()
    prefill(target, cache, drafter, context)
    accepted = rejected = 0
    for _ in range(12):
        rnd = speculative_round(target, cache, drafter, context, 3, sampling, rng)
        v = rnd.verification
        accepted, rejected = accepted + v.accepted, rejected + (v.accepted < rnd.k)
        context = np.concatenate([context, v.emitted(rnd.draft.tokens)])
        fresh = EagleDrafter(target, params, feature_layers=EAGLE_3)
        fresh.observe_features(target.layer_features(context[:-1], layers=EAGLE_3))
        fresh.prefill(context[:-1])
        dc = drafter.cache
        assert dc.pending == 0 and 0 < dc.length <= fresh.cache.length
        for got, want in zip(dc.committed(), fresh.cache.committed(), strict=True):
            np.testing.assert_allclose(got, want[:, :, : dc.length], atol=1e-5)
    assert accepted > 0 and rejected > 0


def test_the_trained_llama_drafter_loads_from_its_folder(target, tmp_path):
    """What train_eagle writes for a Llama target (float16 arrays, metadata.json's feature
    layers) is what reference.weights.load_eagle reads back into a working drafter."""
    model = trained_eagle(target, EAGLE_3, steps=1)
    write_safetensors(tmp_path / "eagle.safetensors", te.export_arrays(model))
    (tmp_path / "metadata.json").write_text(json.dumps({"feature_layers": list(EAGLE_3)}))
    drafter = load_eagle(tmp_path, target)
    assert drafter.feature_layers == EAGLE_3
    prompt = [2, 7, 1, 8]
    plain = plain_greedy(target, prompt, 12)
    got = speculative_generate(
        target, drafter, prompt, k=3, max_new_tokens=12, rng=np.random.default_rng(0),
        sampling=GREEDY,
    )  # fmt: skip
    assert got.tokens == plain


def test_a_trained_rmsnorm_exit_head_drafts_its_torch_q(target):
    """The Llama exit head fitted by train_heads (RMSNorm from model.norm, adapter) lowers
    its loss, and reference.early_exit drafts with exactly its q; greedy stays greedy."""
    windows = np.random.default_rng(7).integers(0, CFG.n_vocab, size=(6, 20))
    states = th.exit_inputs(llama_states(target, windows, [1]), [1])
    norm = torch.from_numpy(target.params["model.norm.weight"].copy())
    head = th.LlamaExitHead(norm, CFG.rms_norm_eps, output_matrix(target))
    x, logp = states["x1"].reshape(-1, CFG.n_embd), states["logp"].reshape(-1, CFG.n_vocab)
    with torch.no_grad():
        before = float(th.kl(logp, head(x)))
    after = th.fit(head, x, logp, steps=40, batch=64, lr=1e-2, seed=0)
    assert after < before
    arrays = {n: a.detach().numpy().copy() for n, a in head.arrays().items()}
    assert set(arrays) == {EXIT_RMS_NORM[0], "exit.proj.weight", "exit.proj.bias"}
    drafter = EarlyExitDrafter(target, 1, arrays)
    context = windows[0, :9]
    draft = drafter.propose(context, 1, SamplingParams(1.0), np.random.default_rng(0))
    with torch.no_grad():
        q = head(states["x1"][0, 8:9]).exp().numpy()[0]
    assert np.abs(q - draft.q[0]).max() < 1e-5
    prompt = list(windows[1, :5])
    plain = plain_greedy(target, prompt, 16)
    got = speculative_generate(
        target, EarlyExitDrafter(target, 1, arrays), prompt, k=3, max_new_tokens=16,
        rng=np.random.default_rng(0), sampling=GREEDY,
    )  # fmt: skip
    assert got.tokens == plain


def test_a_head_or_eagle_drafter_of_the_other_family_is_refused_in_one_line(target):
    C = CFG.n_embd
    gpt2 = make_model(reference.GPTConfig(n_vocab=24, n_ctx=64, n_embd=C, n_head=2, n_layer=3), 1)
    layer_norm = {EXIT_NORM[0]: np.ones(C, np.float32), EXIT_NORM[1]: np.zeros(C, np.float32)}
    rms = {EXIT_RMS_NORM[0]: np.ones(C, np.float32)}
    cases = (
        (lambda: EarlyExitDrafter(target, 1, layer_norm), "trained for a GPT-2 target, but"),
        (lambda: EarlyExitDrafter(gpt2, 1, rms), "trained for a Llama-family target, but"),
        (
            lambda: EagleDrafter(target, init_eagle_params(gpt2.config, np.random.default_rng(0))),
            "have a GPT-2 block",
        ),
        (
            lambda: EagleDrafter(gpt2, init_eagle_params(CFG, np.random.default_rng(0))),
            "have a Llama-family block",
        ),
    )
    for make, words in cases:
        with pytest.raises(ValueError, match=words) as err:
            make()
        assert "\n" not in str(err.value) and "train" in str(err.value)


def test_the_method_table_runs_trained_drafters_for_a_llama_target_when_given(target, tmp_path):
    """With the parts trained for this target (--self-draft, --eagle) early exit, heads and
    EAGLE are in the table; without them they are left out, each with its reason."""
    draft = Llama(
        LlamaConfig(n_vocab=24, n_ctx=64, n_embd=8, n_head=2, n_layer=1),
        init_llama_params(
            LlamaConfig(n_vocab=24, n_ctx=64, n_embd=8, n_head=2, n_layer=1),
            np.random.default_rng(2),
        ),
    )
    C = CFG.n_embd
    rng = np.random.default_rng(3)
    write_safetensors(tmp_path / "exit-2.safetensors", {EXIT_RMS_NORM[0]: np.ones(C, np.float32)})
    heads = {
        f"heads.{i}.{p}": rng.standard_normal((C, C) if p == "weight" else C)
        for i in range(2)
        for p in ("weight", "bias")
    }
    write_safetensors(
        tmp_path / "heads.safetensors", {n: a.astype(np.float32) for n, a in heads.items()}
    )
    eagle = tmp_path / "eagle"
    eagle.mkdir()
    write_safetensors(eagle / "eagle.safetensors", init_eagle_params(CFG, rng))
    (eagle / "metadata.json").write_text(json.dumps({"feature_layers": [CFG.n_layer]}))
    names = ["early-exit", "heads", "eagle", "eagle-tree"]
    given = {"self_draft_dir": tmp_path, "eagle_dir": eagle, "eagle_seed": 0}
    kept, refused = runnable(names, True, target, draft, given)
    assert kept == names and not refused
    none = {"self_draft_dir": None, "eagle_dir": None, "eagle_seed": 0}
    kept, refused = runnable(names, True, target, draft, none)
    assert set(refused) == {"heads", "eagle", "eagle-tree"}  # early exit: the target's own norm
    assert all("train" in why and "\n" not in why for why in refused.values())
