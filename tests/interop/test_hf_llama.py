"""The NumPy Llama family against transformers' LlamaForCausalLM, Qwen2ForCausalLM and
MistralForCausalLM (without a sliding window): small random models written with
`save_pretrained` (float32, bfloat16, sharded), read back by `load_model`, give transformers'
logits, uncached and through appends and a rollback.

Each case prints its largest absolute difference (pytest -s shows them; docs/checkpoints.md
quotes them)."""

import copy
import json

import numpy as np
import pytest
import torch
import transformers

from reference.llama import Llama
from reference.weights import CheckpointError, load_model, read_header
from specdec.text import load_text_pair

from .test_gpt2_text_pair import CORPUS, TEXTS, train_tokenizer

TOLERANCE = 1e-4  # absolute, on logits up to 4..9 (float32 throughout; measured: <= 4e-5)
VOCAB, SEQUENCES = 96, [[1, 2, 3], list(range(5, 45)), [7] * 12]
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,  # short, so that 40 positions cross it
}

# (name, family, n_kv_head of 4 heads, tied, rope scaling, saved dtype, max shard size)
CASES = [
    ("llama-mha-untied", "llama", 4, False, None, torch.float32, None),
    ("llama-gqa2-tied-llama3", "llama", 2, True, LLAMA3_SCALING, torch.float32, None),
    ("llama-gqa4-bf16-sharded", "llama", 1, False, LLAMA3_SCALING, torch.bfloat16, "40KB"),
    ("qwen2-gqa2-bias-sharded", "qwen2", 2, False, None, torch.float32, "40KB"),
    ("qwen2-gqa4-bias-tied-bf16", "qwen2", 1, True, None, torch.bfloat16, None),
    ("mistral-gqa2-untied", "mistral", 2, False, None, torch.float32, None),
    # a head width apart from hidden / heads (12, not 8): q/k/v are 48 wide, o_proj 48 -> 32
    ("mistral-head-dim-12", "mistral-head-dim", 2, False, None, torch.float32, None),
]


def make_hf(family: str, n_kv_head: int, tied: bool, rope_scaling, seed=0, vocab=VOCAB):
    """A small random model whose weights, biases and norm gains are spread enough that a
    wrong term shows (the defaults give near-uniform logits, zero biases and unit gains)."""
    torch.manual_seed(seed)
    sizes = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=n_kv_head,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
    )
    if family == "llama":
        config = transformers.LlamaConfig(**sizes, rope_theta=5e5, rope_scaling=rope_scaling)
        model_class = transformers.LlamaForCausalLM
    elif family == "qwen2":  # q, k and v have biases
        config = transformers.Qwen2Config(**sizes, rope_theta=1e4)
        model_class = transformers.Qwen2ForCausalLM
    else:  # "mistral", or "mistral-head-dim": head_dim 12 where 32 / 4 heads would give 8
        head_dim = {"head_dim": 12} if family == "mistral-head-dim" else {}
        config = transformers.MistralConfig(
            **sizes, **head_dim, rope_theta=1e4, sliding_window=None
        )
        model_class = transformers.MistralForCausalLM
    config._attn_implementation = "eager"  # the plain softmax path, no fused kernel
    model = model_class(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            else:
                param.normal_(0.0, 0.3)
    return model


def hf_logits(model, tokens) -> np.ndarray:  # [T] -> [T, V]
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float().numpy()


@pytest.fixture(scope="module", params=CASES, ids=[case[0] for case in CASES])
def case(request, tmp_path_factory):
    """(our model, transformers' model in float32 with the very weights that were saved)."""
    name, family, n_kv_head, tied, scaling, dtype, shard = request.param
    hf = make_hf(family, n_kv_head, tied, scaling)
    with torch.no_grad():  # the weights the file will hold, kept in float32 (exact)
        for param in hf.parameters():
            param.copy_(param.to(dtype).to(torch.float32))
    folder = tmp_path_factory.mktemp(name)
    # a copy is cast and saved: casting `hf` itself would round its rotary frequencies too
    # (a float32 buffer, not saved), and our model computes those in float64 from the config
    copy.deepcopy(hf).to(dtype).save_pretrained(folder, max_shard_size=shard or "1GB")
    written = sorted(folder.glob("*.safetensors"))
    assert (len(written) > 1) == (shard is not None), written
    stored = {e["dtype"] for path in written for e in read_header(path, bfloat16=True).values()}
    assert stored == {"BF16" if dtype == torch.bfloat16 else "F32"}
    return load_model(folder), hf


def test_logits_match_transformers(case):
    ours, hf = case
    worst = 0.0
    for tokens in SEQUENCES:
        theirs = hf_logits(hf, tokens)
        worst = max(worst, float(np.abs(ours.forward(tokens) - theirs).max()))
        assert np.abs(theirs).max() > 1.0  # peaked enough that a wrong term would show
    print(f"max abs diff of logits, uncached: {worst:.2e}")
    assert worst < TOLERANCE


def test_cached_appends_and_a_rollback_match_transformers(case):
    """Prefill 10, append 1, append 3, then 3 tokens of which only the first is kept (the
    others rolled back), then the true continuation: every row equals the full pass."""
    ours, hf = case
    tokens = SEQUENCES[1]
    reference = hf_logits(hf, tokens)
    cache = ours.new_cache()
    worst = 0.0
    for start, stop in [(0, 10), (10, 11), (11, 14)]:
        rows = ours.forward(tokens[start:stop], cache)
        cache.commit(stop - start)
        worst = max(worst, float(np.abs(rows - reference[start:stop]).max()))
    rows = ours.forward([tokens[14], 0, 1], cache)  # two wrong guesses after a right one
    cache.commit(1)
    cache.rollback()
    worst = max(worst, float(np.abs(rows[0] - reference[14]).max()))
    rows = ours.forward(tokens[15:18], cache)
    worst = max(worst, float(np.abs(rows - reference[15:18]).max()))
    print(f"max abs diff of logits, cached: {worst:.2e}")
    assert worst < TOLERANCE


def test_a_llama_pair_reads_with_the_tokenizer_it_shares(tmp_path):
    """Two Llama-family folders with one tokenizer.json load as a text pair; a draft whose
    tokenizer.json differs is refused (its ids would mean other text)."""
    tokenizer = train_tokenizer(CORPUS, vocab_size=320)
    for name, seed, n_kv_head in (("target", 0, 2), ("draft", 1, 1)):
        make_hf("llama", n_kv_head, True, None, seed, vocab=320).save_pretrained(tmp_path / name)
        tokenizer.save(str(tmp_path / name / "tokenizer.json"))
    pair = load_text_pair(tmp_path / "target", tmp_path / "draft")
    assert isinstance(pair.target, Llama) and isinstance(pair.draft, Llama)
    assert pair.draft.config.n_kv_head == 1 and pair.tokenizer.vocab_size == 320
    assert pair.tokenizer.decode(pair.tokenizer.encode(TEXTS[0])) == TEXTS[0]
    other = train_tokenizer([text.upper() for text in CORPUS], vocab_size=320)
    other.save(str(tmp_path / "draft" / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="do not share a tokenizer"):
        load_text_pair(tmp_path / "target", tmp_path / "draft")


def save_pair(tmp_path, target_vocab: int, draft_vocab: int, tokenizer) -> None:
    # a Qwen2 pair (biases, tied) whose output rows may outnumber the tokenizer's ids
    for name, seed, vocab in (("target", 0, target_vocab), ("draft", 1, draft_vocab)):
        make_hf("qwen2", 2, True, None, seed, vocab=vocab).save_pretrained(tmp_path / name)
        tokenizer.save(str(tmp_path / name / "tokenizer.json"))


def test_padded_output_rows_load_and_an_id_past_the_tokenizer_shows_as_unused(tmp_path):
    """Qwen2.5 pads its 151,665 ids to 151,936 rows: a pair with more rows than ids loads
    (both models padded alike), and a padded id reads as a marker, not as nothing."""
    tokenizer = train_tokenizer(CORPUS, vocab_size=320)
    save_pair(tmp_path, 384, 384, tokenizer)
    pair = load_text_pair(tmp_path / "target", tmp_path / "draft")
    assert pair.target.n_vocab == pair.draft.n_vocab == 384 > pair.tokenizer.vocab_size == 320
    ids = list(pair.tokenizer.encode(TEXTS[0]))
    cut = len(ids) // 2
    text = pair.tokenizer.decode(ids[:cut] + [350] + ids[cut:])
    assert "<unused id 350>" in text
    assert text.replace("<unused id 350>", "") == TEXTS[0]
    assert pair.tokenizer.piece(383) == "<unused id 383>"


def test_fewer_rows_than_ids_or_two_paddings_are_refused(tmp_path):
    tokenizer = train_tokenizer(CORPUS, vocab_size=320)
    save_pair(tmp_path, 256, 256, tokenizer)
    with pytest.raises(CheckpointError, match="the ids from 256 on have no row"):
        load_text_pair(tmp_path / "target", tmp_path / "draft")
    save_pair(tmp_path, 384, 320, tokenizer)
    with pytest.raises(CheckpointError, match="384 output rows.*320"):
        load_text_pair(tmp_path / "target", tmp_path / "draft")


def test_a_list_of_stop_ids_is_refused_by_name(tmp_path):
    """An instruct model's config.json may list several eos ids; the loops stop at one."""
    tokenizer = train_tokenizer(CORPUS, vocab_size=320)
    save_pair(tmp_path, 320, 320, tokenizer)
    path = tmp_path / "target" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps(config | {"eos_token_id": [1, 2]}))
    with pytest.raises(CheckpointError, match="eos_token_id is a list of 2 ids"):
        load_text_pair(tmp_path / "target", tmp_path / "draft")
