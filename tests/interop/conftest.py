"""Fixtures for the checks against Hugging Face transformers (torch on the CPU, one thread).

Every model here is created and saved inside the test: nothing is downloaded.
"""

import numpy as np
import pytest
import torch  # the dev extra installs the CPU build (torch>=2.2,<2.14)
import transformers

torch.set_num_threads(1)  # two threads showed large timing outliers on these machines


def make_hf_gpt2(seed: int, n_layer: int, n_embd: int, n_head: int, vocab: int = 61):
    """A small random GPT2LMHeadModel whose weights are spread enough to give peaked logits."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=64,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    config._attn_implementation = "eager"  # the plain softmax path, no fused kernel
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("weight") and param.dim() == 2:
                param.normal_(0.0, 0.3)  # default 0.02 gives near-uniform logits
    return model


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    """(hf_target, hf_draft, target_dir, draft_dir): saved as config.json + model.safetensors."""
    target = make_hf_gpt2(0, n_layer=3, n_embd=48, n_head=4)
    draft = make_hf_gpt2(1, n_layer=1, n_embd=16, n_head=2)
    root = tmp_path_factory.mktemp("hf")
    target.save_pretrained(root / "target", safe_serialization=True)
    draft.save_pretrained(root / "draft", safe_serialization=True)
    return target, draft, root / "target", root / "draft"


@pytest.fixture
def rng():
    return np.random.default_rng(0)
