"""specdec/training/train_eagle.py on a tiny random target: its torch forward is the
reference's, its unrolled drafter is reference.eagle.EagleDrafter's (same q, same alignment),
and what it exports is what the NumPy drafter reads. Skipped where torch is not installed
(the `train` and `dev` extras have it)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="train_eagle needs torch (the train / dev extras)")

from reference.config import GPTConfig  # noqa: E402
from reference.eagle import EagleDrafter, eagle_param_shapes  # noqa: E402
from reference.model import GPT, init_params  # noqa: E402
from reference.sampling import SamplingParams  # noqa: E402
from reference.speculative import prefill  # noqa: E402
from reference.weights import read_header, read_safetensors, write_safetensors  # noqa: E402
from specdec.training import train_eagle as te  # noqa: E402

CFG = GPTConfig(n_vocab=16, n_ctx=64, n_embd=16, n_head=2, n_layer=2)
EAGLE_1, EAGLE_3 = (2,), (1, 2)  # for a 2-block target: the top; a low and the top


@pytest.fixture(scope="module")
def target() -> GPT:
    return GPT(CFG, init_params(CFG, np.random.default_rng(0), std=0.3))


def states_of(target, windows, layers) -> dict:
    P = te.torch_params(target.params)
    states = te.target_states(P, CFG, windows, layers)
    states["tokens"] = torch.from_numpy(windows.astype(np.int64))
    return states


def trained(target, layers, steps: int):
    # a drafter after a few steps on random windows, and its training record
    torch.manual_seed(0)
    windows = np.random.default_rng(1).integers(0, CFG.n_vocab, size=(8, 24))
    states = states_of(target, windows, layers)
    args = argparse.Namespace(
        seed=0,
        lr=1e-2,
        steps=steps,
        minutes=5.0,
        batch=4,
        unroll=3,
        chains=8,
        kl_weight=1.0,
        bf16=False,
    )
    variant = "eagle-1" if len(layers) == 1 else "eagle-3"
    P = te.torch_params(target.params)
    model = te.Eagle(P, CFG, layers, torch.Generator().manual_seed(0))
    return model, te.train(model, states, args, variant)


def test_the_torch_forward_and_its_chains_are_the_reference_models(target):
    """Pass 1 is the reference's residual (pre-ln_f); pass 2 of a chain scores the context
    plus the chain's first token exactly as a fresh reference forward of that sequence."""
    P = te.torch_params(target.params)
    windows = np.random.default_rng(2).integers(0, CFG.n_vocab, size=(2, 12))
    te.check_against_reference(target, P, CFG, windows[0])
    chain = te.target_chain(P, CFG, windows, 3, te.greedy_pick)
    for c in (0, 5, 11):
        seq = list(windows[1, : c + 1])
        for j in range(3):  # position j + 1 of chain c: context + y_1..y_j
            logits = target.forward(np.asarray(seq))[-1]
            ref = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
            np.testing.assert_allclose(chain["logp"][1, j, c].numpy(), ref, atol=1e-4)
            seq.append(int(chain["y"][1, j, c]))


def test_true_chain_tokens_are_the_window_shifted_by_the_step():
    tokens = torch.arange(10)[None]
    steps = te.true_chain_tokens(tokens, 3)  # chain c reads x(c + j - 1) at step j
    assert steps[0].tolist() == [list(range(1, 10))]
    assert steps[1].tolist() == [list(range(2, 10)) + [0]]


@pytest.mark.parametrize("layers", [EAGLE_1, EAGLE_3], ids=["eagle-1", "eagle-3"])
def test_training_lowers_the_loss_and_reports_every_step_of_the_unroll(target, layers):
    _, record = trained(target, layers, steps=30)
    first, last = record["curve"][0], record["final"]
    assert record["steps"] == 30 and np.isfinite(record["final_loss"])
    assert len(last["kl"]) == (1 if len(layers) == 1 else 3)
    assert ("reg" in last) == (len(layers) == 1)  # EAGLE-3 drops the feature regression
    assert record["final_loss"] < first["loss"]


@pytest.mark.parametrize("layers", [EAGLE_1, EAGLE_3], ids=["eagle-1", "eagle-3"])
def test_the_export_is_what_reference_eagle_reads(target, layers, tmp_path):
    model, _ = trained(target, layers, steps=2)
    arrays = te.export_arrays(model)
    assert {n: a.shape for n, a in arrays.items()} == eagle_param_shapes(CFG, layers)
    write_safetensors(tmp_path / "eagle.safetensors", arrays)
    back = read_safetensors(tmp_path / "eagle.safetensors")
    header = read_header(tmp_path / "eagle.safetensors")
    assert {header[n]["dtype"] for n in arrays} == {"F16"}
    for n, a in arrays.items():
        np.testing.assert_array_equal(back[n], a.astype(np.float32))
    EagleDrafter(target, {n: a.astype(np.float32) for n, a in back.items()}, feature_layers=layers)


@pytest.mark.parametrize("layers", [EAGLE_1, EAGLE_3], ids=["eagle-1", "eagle-3"])
def test_the_torch_drafter_drafts_the_numpy_drafters_q(target, layers):
    """The unrolled torch drafter (step 1 from true features, then its own f^, tokens the
    chain's) gives the q rows reference.eagle.EagleDrafter proposes in a real round."""
    model, _ = trained(target, layers, steps=3)
    params = {n: a.detach().numpy().copy() for n, a in model.arrays().items()}
    drafter = EagleDrafter(target, params, feature_layers=layers)
    context = np.random.default_rng(3).integers(0, CFG.n_vocab, size=10)
    prefill(target, target.new_cache(), drafter, context)
    k = 4
    draft = drafter.propose(context, k, SamplingParams(1.0), np.random.default_rng(4))

    n = len(context)  # chain c = n - 1: the last committed token; one dummy token after it
    windows = np.concatenate([context, [0]])[None]
    feats = te.features_of(states_of(target, windows, layers), layers)
    y = torch.zeros(1, k, n + 1, dtype=torch.int64)
    y[0, :, n - 1] = torch.from_numpy(draft.tokens)
    logq = te.eagle_chain_logq(model, windows, feats, {"y": y})  # [1, k, n, V]
    np.testing.assert_allclose(logq[0, :, n - 1].exp().numpy(), draft.q, atol=2e-5)


def test_the_numpy_check_redoes_every_round_with_the_torch_drafter(target):
    """numpy_check runs reference speculative_generate with the exported weights and redoes
    each round's q with the torch drafter holding the same float16 values."""
    model, _ = trained(target, EAGLE_3, steps=2)
    prompts = [np.random.default_rng(5).integers(0, CFG.n_vocab, size=6)]
    check = te.numpy_check(target, te.export_arrays(model), EAGLE_3, prompts, 3, 10, 0.8)
    assert check["torch_vs_numpy_max_abs_q_difference"] < 1e-4
    assert check["torch_argmax_equals_numpy_greedy_draft"] == 1.0
    assert len(check["greedy"]) == len(check["T0.8"]) == 3
