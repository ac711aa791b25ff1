"""The NumPy GPT-2 against Hugging Face's GPT2LMHeadModel: same logits, same greedy text,
and our speculative loop against transformers' assisted generation."""

import numpy as np
import pytest
import torch

from reference import ModelDrafter, generate, speculative_generate
from reference.sampling import GREEDY
from reference.weights import load_gpt2


def hf_logits(model, tokens) -> np.ndarray:  # [T] -> [T, V]
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].numpy()


def relative_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def test_uncached_logits_match_transformers(hf_pair, rng):
    hf_target, _, target_dir, _ = hf_pair
    ours = load_gpt2(target_dir)
    tokens = rng.integers(0, ours.n_vocab, size=40).tolist()
    assert relative_error(ours.forward(tokens), hf_logits(hf_target, tokens)) <= 1e-5


def test_cached_logits_match_transformers_step_by_step(hf_pair, rng):
    """Prefill, then a 3-token append, then single tokens: each row equals HF's full pass."""
    hf_target, _, target_dir, _ = hf_pair
    ours = load_gpt2(target_dir)
    tokens = rng.integers(0, ours.n_vocab, size=30).tolist()
    reference = hf_logits(hf_target, tokens)
    cache = ours.new_cache()
    pieces = [(0, 20), (20, 23)] + [(i, i + 1) for i in range(23, 30)]
    for start, stop in pieces:
        rows = ours.forward(tokens[start:stop], cache)
        cache.commit(stop - start)
        assert relative_error(rows, reference[start:stop]) <= 1e-5, (start, stop)


def test_greedy_generation_matches_transformers(hf_pair):
    hf_target, _, target_dir, _ = hf_pair
    ours = load_gpt2(target_dir)
    for prompt in ([1, 2, 3], [40, 7], [5] * 9):
        with torch.no_grad():
            theirs = hf_target.generate(
                torch.tensor([prompt]),
                max_new_tokens=24,
                do_sample=False,
                pad_token_id=0,
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            )[0, len(prompt) :].tolist()
        mine = generate(
            ours, prompt, max_new_tokens=24, rng=np.random.default_rng(0), sampling=GREEDY
        )
        assert mine == theirs


def test_greedy_speculative_matches_assisted_generation(hf_pair):
    """transformers' assisted generation with the same pair gives the same tokens as ours."""
    hf_target, hf_draft, target_dir, draft_dir = hf_pair
    target, draft = load_gpt2(target_dir), load_gpt2(draft_dir)
    for prompt, k in (([1, 2, 3], 3), ([40, 7], 5), ([9, 9, 9, 2], 1)):
        hf_draft.generation_config.num_assistant_tokens = k
        hf_draft.generation_config.num_assistant_tokens_schedule = "constant"
        with torch.no_grad():
            theirs = hf_target.generate(
                torch.tensor([prompt]),
                assistant_model=hf_draft,
                max_new_tokens=20,
                do_sample=False,
                pad_token_id=0,
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            )[0, len(prompt) :].tolist()
        ours = speculative_generate(
            target,
            ModelDrafter(draft),
            prompt,
            k=k,
            max_new_tokens=20,
            rng=np.random.default_rng(0),
            sampling=GREEDY,
        )
        assert ours.tokens == theirs
        assert ours.tokens == generate(
            target, prompt, max_new_tokens=20, rng=np.random.default_rng(0), sampling=GREEDY
        )


def test_fp16_checkpoint_loads_close_to_float32(hf_pair, tmp_path, rng):
    """Shipped weights are fp16 on disk; loading widens them to float32."""
    hf_target, _, _, _ = hf_pair
    hf_target.half().save_pretrained(tmp_path, safe_serialization=True)
    hf_target.float()
    ours = load_gpt2(tmp_path)
    assert all(w.dtype == np.float32 for w in ours.params.values())
    tokens = rng.integers(0, ours.n_vocab, size=16).tolist()
    assert relative_error(ours.forward(tokens), hf_logits(hf_target, tokens)) < 2e-2


@pytest.mark.parametrize("bad_vocab", [60, 62])
def test_pair_with_different_vocabularies_is_refused(hf_pair, tmp_path, bad_vocab):
    from tests.interop.conftest import make_hf_gpt2

    _, _, target_dir, _ = hf_pair
    make_hf_gpt2(2, 1, 16, 2, vocab=bad_vocab).save_pretrained(tmp_path, safe_serialization=True)
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(
            load_gpt2(target_dir),
            ModelDrafter(load_gpt2(tmp_path)),
            [1, 2],
            k=2,
            max_new_tokens=4,
            rng=np.random.default_rng(0),
        )
