"""The trained pair that ships in models/: it loads, matches torch, and decodes exactly."""

import json

import numpy as np
import torch
from transformers import GPT2LMHeadModel

from reference import ModelDrafter, generate, speculative_generate
from reference.sampling import GREEDY
from specdec.bundled import DRAFT_DIR, MODELS_DIR, TARGET_DIR, load_bundled_pair
from specdec.measure.bench import held_out_code_prompts


def test_shipped_weights_stay_small():
    total = sum(p.stat().st_size for p in MODELS_DIR.rglob("*") if p.is_file())
    assert total < 32 * 2**20, f"models/ holds {total / 2**20:.1f} MiB; the limit is 32 MiB"


def test_metadata_records_how_the_weights_were_made():
    for directory in (TARGET_DIR, DRAFT_DIR):
        meta = json.loads((directory / "metadata.json").read_text())
        for key in ("command", "steps", "bits_per_byte_held_out", "corpus", "date"):
            assert key in meta, f"{directory.name}/metadata.json lacks {key!r}"


def test_numpy_logits_equal_torch_on_held_out_code():
    target, draft = load_bundled_pair()
    snippet = held_out_code_prompts(1, length=200)[0]
    for ours, directory in ((target, TARGET_DIR), (draft, DRAFT_DIR)):
        hf = GPT2LMHeadModel.from_pretrained(directory, dtype=torch.float32).eval()
        with torch.no_grad():
            theirs = hf(torch.tensor([snippet.tolist()])).logits[0].numpy()
        mine = ours.forward(snippet)
        rel = np.abs(mine - theirs).max() / np.abs(theirs).max()
        assert rel <= 1e-5, f"{directory.name}: relative error {rel:.2e}"


def test_greedy_speculative_equals_greedy_autoregressive_on_the_pair():
    target, draft = load_bundled_pair()
    for prompt in held_out_code_prompts(2, length=120):
        ar = generate(
            target, prompt, max_new_tokens=40, rng=np.random.default_rng(0), sampling=GREEDY
        )
        spec = speculative_generate(
            target,
            ModelDrafter(draft),
            prompt,
            k=4,
            max_new_tokens=40,
            rng=np.random.default_rng(0),
            sampling=GREEDY,
        )
        assert spec.tokens == ar
        assert spec.stats.alpha > 0.3  # a trained pair agrees far more often than chance


def test_the_self_drafting_parts_load_and_decode_exactly():
    """models/self_draft: the exit heads and extra heads fit the bundled target, their
    metadata says how they were made, and greedy decoding with them equals generate."""
    from reference import EarlyExitDrafter, HeadsDrafter
    from specdec.bundled import SELF_DRAFT_DIR, load_exit_head, load_heads

    meta = json.loads((SELF_DRAFT_DIR / "metadata.json").read_text())
    for key in ("command", "exit_heads", "extra_heads", "date", "hyperparameters"):
        assert key in meta, f"self_draft/metadata.json lacks {key!r}"
    assert not meta["hyperparameters"]["target"].startswith("/"), "no local path in metadata"
    target, _ = load_bundled_pair()
    prompt = held_out_code_prompts(1, length=120)[0]
    want = generate(
        target, prompt, max_new_tokens=24, rng=np.random.default_rng(0), sampling=GREEDY
    )
    drafters = [EarlyExitDrafter(target, L, load_exit_head(L)) for L in (2, 3)]
    drafters.append(HeadsDrafter(target, load_heads()))
    for drafter in drafters:
        out = speculative_generate(
            target,
            drafter,
            prompt,
            k=4,
            max_new_tokens=24,
            rng=np.random.default_rng(0),
            sampling=GREEDY,
        )
        assert out.tokens == list(want), type(drafter).__name__
        assert out.stats.alpha > 0.3, f"{type(drafter).__name__}: trained parts accept little"
