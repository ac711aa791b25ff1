"""One forward for every pass (issue 20): a sequence, a tree and a ragged batch run the one
block of reference/model.py and differ only in their `Placement`; the fast path and the GPU
twin replace kernels, so their kernels run in tree and batch passes too. (The twin's fused
block, gpu/model.py, is the same block regrouped into fused launches, for every kind of pass.)"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import gpu
from gpu import model as twin_model
from gpu.device.backend import to_host
from reference import GPT, GPTConfig, init_params
from reference import model as plain_model
from reference.batch import batch_placement, batched_forward, new_batch_cache
from reference.model import causal_placement
from reference.tree import chain_parents, tree_forward
from reference.tree.forward import tree_placement
from specdec.fast_cpu import fast
from specdec.fast_cpu import model as fast_model

from .helpers import assert_close_scaled

ROOT = Path(__file__).resolve().parents[2]
CFG = GPTConfig(n_vocab=48, n_ctx=64, n_embd=64, n_head=4, n_layer=2)
PARENTS = np.array([-1, 0, 1, 1, 2, 2, 3])  # a root, then a small tree below it


@pytest.fixture(scope="module")
def plain():
    return GPT(CFG, init_params(CFG, np.random.default_rng(0), std=0.1))


def test_one_attention_per_backend():
    """`grep "def .*attention"` over the core and the twin: each architecture's own, nothing
    else (the tree and batch copies of the block are gone)."""
    found = []
    for path in sorted([*(ROOT / "reference").rglob("*.py"), *(ROOT / "gpu").rglob("*.py")]):
        for line in path.read_text().splitlines():
            # a mask builder (batch_attention_mask) is a placement, not a copy of attention
            if re.match(r"\s*def \w*(attention|_block)\w*\(", line) and "_mask(" not in line:
                found.append(f"{path.relative_to(ROOT)}: {line.strip()[:40]}")
    names = sorted(f.split(": ")[0] for f in found)
    assert names == [
        "gpu/device/fused.py",
        "gpu/device/fused.py",
        "gpu/device/fused.py",
        "gpu/device/fused.py",
        "gpu/device/fused.py",
        "gpu/device/layers.py",
        "gpu/llama.py",
        "gpu/llama.py",
        "gpu/model.py",
        "reference/llama.py",
        "reference/llama.py",
        "reference/llama.py",
        "reference/model.py",
        "reference/model.py",
        "reference/model.py",
    ], found
    # reference: attention, GPT.attention_block, GPT.multi_head_attention (the hook both
    # kinds of pass go through); gpu: attention (layers.py), the fused kernel's entry
    # (fused.cached_attention) whose body calls it, with its limits, body, plan and the plan's
    # constants of a shape (attention_fixed), and
    # GPT.multi_head_attention choosing between them; the Llama family's block (a second
    # architecture, not a copy): grouped_attention, Llama.attention_block and
    # Llama.rotary_attention (RoPE and the GQA heads, before the shared attention function),
    # and the twin Llama's grouped_attention and rotary_attention (the same with `xp`)


def test_a_chain_placed_as_a_tree_is_the_plain_forward(plain):
    """A chain (parents -1, 0, 1, ..) through the tree's placement gives GPT.forward's rows."""
    tokens = np.random.default_rng(1).integers(0, CFG.n_vocab, 9)
    cache_a, cache_b = plain.new_cache(), plain.new_cache()
    plain.forward(tokens[:4], cache_a)
    cache_a.commit(4)
    tree_forward(plain, tokens[:4], chain_parents(4), cache_b)
    cache_b.commit(4)
    np.testing.assert_array_equal(
        tree_forward(plain, tokens[4:], chain_parents(5), cache_b),
        plain.forward(tokens[4:], cache_a),
    )


def masked_attention_inputs(rng, lead=()):
    nh, T, S, hs = 4, 7, 12, 16
    q = rng.standard_normal((*lead, nh, T, hs), dtype=np.float32)
    k, v = (rng.standard_normal((*lead, nh, S, hs), dtype=np.float32) for _ in range(2))
    mask = rng.random((*lead, 1, T, S)) < 0.6
    mask[..., -1] = True  # every row sees at least one key
    return q, k, v, mask


@pytest.mark.parametrize("lead", [(), (3,)], ids=["tree mask [T, S]", "batch mask [B, 1, T, S]"])
def test_keys_first_attention_takes_a_mask(lead):
    q, k, v, mask = masked_attention_inputs(np.random.default_rng(len(lead)), lead)
    np.testing.assert_allclose(
        fast_model.attention_keys_first(q, k, v, mask),
        plain_model.attention(q, k, v, mask),
        rtol=0,
        atol=2e-6,
    )


def test_the_fast_paths_attention_runs_in_tree_and_batch_passes(plain, monkeypatch):
    """With every trick on, a tree pass and a batch pass go through the fast attention, and
    their logits equal the plain model's."""
    calls = []
    real = fast_model.attention_keys_first
    monkeypatch.setattr(
        fast_model, "attention_keys_first", lambda *a: calls.append(a[3] is not None) or real(*a)
    )
    quick = fast(plain, tricks="all")
    tokens = np.random.default_rng(2).integers(0, CFG.n_vocab, len(PARENTS))
    assert_close_scaled(
        tree_forward(quick, tokens, PARENTS), tree_forward(plain, tokens, PARENTS), "tree pass"
    )
    assert any(calls), "the tree pass never reached the fast attention with its mask"
    calls.clear()
    rows = np.random.default_rng(3).integers(0, CFG.n_vocab, (2, 5))
    n_new = np.array([5, 3])
    ours = batched_forward(plain, rows, n_new, new_batch_cache(plain, 2))
    theirs = batched_forward(quick, rows, n_new, new_batch_cache(quick, 2))
    assert np.isnan(theirs[1, 3:]).all()
    assert_close_scaled(theirs[0], ours[0], "batch row 0")
    assert_close_scaled(theirs[1, :3], ours[1, :3], "batch row 1")
    assert any(calls), "the batch pass never reached the fast attention with its mask"


def test_the_twin_runs_a_tree_pass_through_its_own_kernels(plain, monkeypatch):
    """A tree pass on the twin's model (NumPy mode in CI) uses the twin's fused attention
    (one launch per layer on a device; its body in NumPy mode) and gives the reference's rows."""
    calls = []
    real = twin_model.cached_attention
    monkeypatch.setattr(twin_model, "cached_attention", lambda *a: calls.append(1) or real(*a))
    twin = gpu.GPT(plain.config, plain.params)
    tokens = np.random.default_rng(4).integers(0, CFG.n_vocab, len(PARENTS))
    got = to_host(tree_forward(twin, tokens, PARENTS, twin.new_cache()))
    np.testing.assert_allclose(got, tree_forward(plain, tokens, PARENTS), rtol=0, atol=1e-5)
    assert len(calls) == CFG.n_layer


def test_every_placement_field_has_one_type(plain):
    """A sequence, a tree and a batch fill the same fields with the same types (issue 30):
    no slice-or-array, int-or-array, or None switching between two cache signatures."""
    cache = plain.new_cache()
    placements = {
        "sequence": causal_placement(3, 4),
        "tree": tree_placement(PARENTS, len(PARENTS), cache),
        "batch": batch_placement(np.array([0, 5]), np.array([3, 1]), 3),
    }
    for name, at in placements.items():
        rows = at.shape[0] if len(at.shape) == 2 else 1
        assert isinstance(at.positions, np.ndarray) and at.positions.shape == at.shape, name
        assert np.issubdtype(at.positions.dtype, np.integer), name
        for field in (at.start, at.n_new):
            assert isinstance(field, np.ndarray) and field.shape == (rows,), name
            assert np.issubdtype(field.dtype, np.integer), name
        assert isinstance(at.stop, int), name
        assert at.mask is None or at.mask.dtype == bool, name
    np.testing.assert_array_equal(placements["sequence"].positions, [3, 4, 5, 6])
