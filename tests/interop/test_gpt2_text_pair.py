"""A Hugging Face GPT-2 pair with its own tokenizer, end to end and offline: a tiny BPE
tokenizer trained here with `tokenizers`, two tiny random GPT-2s saved with transformers
next to it (what `save_pretrained` of gpt2 + distilgpt2 gives, in miniature), then the
Python API and `specdec demo --target DIR --draft DIR` on them."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from reference import ModelDrafter, generate, speculative_generate
from reference.sampling import GREEDY
from reference.weights import CheckpointError
from specdec.cli import main
from specdec.text import HFTokenizer, load_text_pair, tokenizer_of

from .conftest import make_hf_gpt2

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The cat sat on the mat. The dog sat on the log.\n",
    "for i in range(10):\n    print(i * i)\n",
    "Speculative decoding drafts tokens and the target verifies them in one pass.\n",
] * 20
EOS_TEXT = "<|endoftext|>"
TEXTS = ["def mul(a, b):\n    return a * b\n", "The dog sat on the mat.", "naïve café ✓"]


def train_tokenizer(corpus, vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer like GPT-2's (every string encodes), trained locally."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def save_model_with_tokenizer(directory, seed, n_layer, n_embd, n_head, tok) -> None:
    model = make_hf_gpt2(seed, n_layer, n_embd, n_head, vocab=tok.get_vocab_size())
    eos = tok.token_to_id(EOS_TEXT)
    model.config.eos_token_id = model.config.bos_token_id = eos  # as gpt2's config does
    model.save_pretrained(directory, safe_serialization=True)
    tok.save(str(directory / "tokenizer.json"))


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=320)


@pytest.fixture(scope="module")
def text_pair_dirs(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("gpt2-text")
    save_model_with_tokenizer(root / "target", 0, 3, 48, 4, tokenizer)
    save_model_with_tokenizer(root / "draft", 1, 1, 16, 2, tokenizer)
    return root / "target", root / "draft"


def copy_pair(text_pair_dirs, tmp_path):
    target, draft = (tmp_path / "target", tmp_path / "draft")
    shutil.copytree(text_pair_dirs[0], target)
    shutil.copytree(text_pair_dirs[1], draft)
    return target, draft


def test_the_pair_loads_with_its_tokenizer_and_eos_from_the_config(text_pair_dirs, tokenizer):
    pair = load_text_pair(*text_pair_dirs)
    assert isinstance(pair.tokenizer, HFTokenizer)
    assert pair.tokenizer.eos_id == tokenizer.token_to_id(EOS_TEXT)
    assert pair.target.n_vocab == pair.draft.n_vocab == tokenizer.get_vocab_size()


@pytest.mark.parametrize("text", TEXTS)
def test_text_round_trips_through_the_checkpoints_tokenizer(text_pair_dirs, tokenizer, text):
    tok = load_text_pair(*text_pair_dirs).tokenizer
    ids = tok.encode(text)
    assert ids.tolist() == tokenizer.encode(text).ids  # the library's own ids
    assert tok.decode(ids) == text
    eos = tok.eos_id
    assert tok.decode([*ids.tolist(), eos, *ids.tolist()]) == text  # cut at EOS


@pytest.mark.parametrize("text", TEXTS[:2])
def test_greedy_speculative_equals_greedy_autoregressive_in_text(text_pair_dirs, text):
    pair = load_text_pair(*text_pair_dirs)
    prompt, eos = pair.tokenizer.encode(text), pair.tokenizer.eos_id
    rng = np.random.default_rng(0)
    ar = generate(pair.target, prompt, max_new_tokens=24, rng=rng, sampling=GREEDY, eos_id=eos)
    for k in (1, 3, 5):
        spec = speculative_generate(
            pair.target,
            ModelDrafter(pair.draft),
            prompt,
            k=k,
            max_new_tokens=24,
            rng=np.random.default_rng(1),
            sampling=GREEDY,
            eos_id=eos,
        )
        assert spec.tokens == ar, k
    library = Tokenizer.from_file(str(text_pair_dirs[0] / "tokenizer.json"))
    cut = ar.index(eos) if eos in ar else len(ar)  # the text ends at EOS
    assert pair.tokenizer.decode(ar) == library.decode(ar[:cut])


def test_the_demo_runs_on_the_pair(text_pair_dirs, capsys):
    target, draft = text_pair_dirs
    argv = ["demo", "--target", str(target), "--draft", str(draft), "--prompt", "def add(a"]
    assert main(argv + ["--max-new-tokens", "16", "--no-colour", "--plain"]) == 0
    out = capsys.readouterr().out
    assert f"tokenizer: {target / 'tokenizer.json'} (tokenizers, 320 ids)" in out
    assert "speculative output identical to autoregressive output: yes" in out


def test_a_pair_whose_tokenizers_differ_is_refused(text_pair_dirs, tmp_path, capsys):
    target, draft = copy_pair(text_pair_dirs, tmp_path)
    other = train_tokenizer([t.upper() for t in CORPUS], vocab_size=320)
    other.save(str(draft / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="do not share a tokenizer"):
        load_text_pair(target, draft)
    with pytest.raises(SystemExit) as info:
        main(["demo", "--target", str(target), "--draft", str(draft)])
    assert info.value.code == 2
    assert "do not share a tokenizer" in capsys.readouterr().err


def test_a_pair_of_a_tokenizer_folder_and_a_byte_level_folder_is_refused(text_pair_dirs, tmp_path):
    target, draft = copy_pair(text_pair_dirs, tmp_path)
    (draft / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="do not share a tokenizer"):
        load_text_pair(target, draft)


def test_an_eos_outside_the_vocabulary_is_refused(text_pair_dirs, tmp_path):
    """transformers' GPT2Config default eos_token_id (50256) with a small vocabulary."""
    target, draft = copy_pair(text_pair_dirs, tmp_path)
    for directory in (target, draft):
        config = json.loads((directory / "config.json").read_text())
        config["eos_token_id"] = 50256
        (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="eos_token_id 50256 is not one of the 320"):
        load_text_pair(target, draft)


def test_a_folder_with_vocab_json_but_no_tokenizer_json_says_how_to_fix_it(tmp_path):
    (tmp_path / "vocab.json").write_text("{}")
    with pytest.raises(CheckpointError, match="no tokenizer.json"):
        tokenizer_of(tmp_path)


def test_the_bundled_pair_stays_byte_level_without_tokenizers(monkeypatch):
    """No tokenizer.json next to the bundled pair: the byte tokenizer, no library needed."""
    import sys

    from specdec.bundled import DRAFT_DIR, TARGET_DIR
    from specdec.text import ByteTokenizer

    monkeypatch.setitem(sys.modules, "tokenizers", None)  # importing it would fail
    pair = load_text_pair(TARGET_DIR, DRAFT_DIR)
    assert isinstance(pair.tokenizer, ByteTokenizer) and pair.tokenizer.eos_id == 256


def test_without_the_tokenizers_library_the_error_says_what_to_install(text_pair_dirs, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ValueError, match="needs the `tokenizers` library: pip install tokenizers"):
        load_text_pair(*text_pair_dirs)
