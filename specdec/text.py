"""Text in and text out: the tokenizer a checkpoint pair is read and written with.

Two kinds, picked by what the checkpoint folder holds:

* byte-level (reference/tokenizer.py), for a folder without ``tokenizer.json`` such as the
  bundled pair: ids 0..255 are bytes, 256 ends a sequence. No file, no library.
* the folder's ``tokenizer.json`` (GPT-2, distilgpt2, SmolLM2, Qwen2.5, ...), read with the
  ``tokenizers`` library. It lives here at the edge, not in the core: the core only ever
  sees token ids.

EOS comes from the checkpoint's ``config.json`` (``eos_token_id``). A pair must share one
tokenizer: the target verifies the draft's *ids*, so an id has to mean the same text on both
sides; a pair whose tokenizers differ is refused, and so is a model with fewer output rows
than the tokenizer has ids (it would be fed ids it has no row for). More rows are padding
(Qwen2.5's), allowed; target and draft must have the same number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reference import tokenizer as byte_tokenizer
from reference.config import GPTConfig, LlamaConfig
from reference.llama import Llama, expected_llama_param_shapes
from reference.model import GPT, expected_param_shapes
from reference.weights import CheckpointError, load_model, read_json_object


class ByteTokenizer:
    """The bundled pair's tokenizer (reference/tokenizer.py) behind the common interface."""

    name = "byte-level (ids 0..255 are bytes, 256 is EOS)"
    vocab_size = byte_tokenizer.VOCAB_SIZE  # V
    shows_unused = False  # a model with more rows than 257 is refused (check_fits)

    def __init__(self, eos_id: int | None = byte_tokenizer.EOS) -> None:
        self.eos_id = eos_id

    def encode(self, text: str) -> np.ndarray:  # -> [T] int64 ids, no EOS appended
        return byte_tokenizer.encode(text)

    def decode(self, ids) -> str:  # [T] ids -> text, cut at the first EOS
        return byte_tokenizer.decode(ids)

    def piece(self, i: int) -> str:
        # one token as it appears in running text: layout bytes stay real, others readable
        return chr(i) if i in (9, 10) or 32 <= i < 127 else byte_tokenizer.token_text(i)

    def token_text(self, i: int) -> str:  # one token on one line, escaped
        return byte_tokenizer.token_text(i)

    def same_as(self, other) -> bool:
        return isinstance(other, ByteTokenizer) and other.eos_id == self.eos_id


class HFTokenizer:
    """A checkpoint's ``tokenizer.json``, read with the ``tokenizers`` library."""

    shows_unused = True  # ids past its table (padded output rows) print as <unused id N>

    def __init__(self, path: Path, eos_id: int | None) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ValueError(
                f"{path} needs the `tokenizers` library: pip install tokenizers "
                "(or the project's lab extra: pip install -e '.[lab]')"
            ) from None
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:  # the library raises its own exception types
            raise CheckpointError(f"{path} cannot be read by tokenizers: {err}") from None
        self.path = path
        self.eos_id = eos_id
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)  # V
        self.name = f"{path} (tokenizers, {self.vocab_size} ids)"
        # what decides which text an id stands for: the vocabulary (special tokens too) and
        # the decoder. Merges only decide how text is split, and only the target's
        # tokenizer ever splits text, so two files may differ there (or in whitespace).
        self.definition = {
            "vocab": self.tokenizer.get_vocab(with_added_tokens=True),
            "decoder": read_json_object(path).get("decoder"),
        }

    def encode(self, text: str) -> np.ndarray:  # -> [T] int64 ids, no special tokens added
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return np.asarray(ids, dtype=np.int64)

    def decode(self, ids) -> str:  # [T] ids -> text, cut at the first EOS
        ids = [int(i) for i in ids]
        if self.eos_id is not None and self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        # an id past the tokenizer's table (a padded output row, see check_fits) would be
        # dropped silently by the library: it is shown instead, between the runs around it
        text, run = [], []
        for i in ids + [None]:
            if i is not None and i < self.vocab_size:
                run.append(i)
                continue
            text.append(self.tokenizer.decode(run, skip_special_tokens=False))
            run = []
            if i is not None:
                text.append(unused(i))
        return "".join(text)

    def piece(self, i: int) -> str:
        # one token's text; a character split over two byte-level tokens shows as U+FFFD
        if i == self.eos_id:
            return "<eos>"
        return self.tokenizer.decode([i]) if i < self.vocab_size else unused(i)

    def token_text(self, i: int) -> str:
        return self.piece(i).replace("\n", "\\n").replace("\t", "\\t")

    def same_as(self, other) -> bool:
        return (
            isinstance(other, HFTokenizer)
            and other.definition == self.definition
            and other.eos_id == self.eos_id
        )


def unused(i: int) -> str:  # the text shown for an id the tokenizer does not have
    return f"<unused id {i}>"


def eos_of(directory: Path, default: int | None) -> int | None:
    # config.json's eos_token_id (an int, or null for none); the tokenizer's default if absent
    path = directory / "config.json"
    config = read_json_object(path)
    if "eos_token_id" not in config:
        return default
    eos = config["eos_token_id"]
    if isinstance(eos, list):  # an instruct model's several stop ids (end of turn, of text)
        raise CheckpointError(
            f"{path}: eos_token_id is a list of {len(eos)} ids {eos}; the loops stop at one "
            "id. Use the base model, or write the one stop id to use in config.json"
        )
    if eos is not None and (isinstance(eos, bool) or not isinstance(eos, int) or eos < 0):
        raise CheckpointError(f"{path}: eos_token_id must be an id >= 0 or null, got {eos!r}")
    return eos


def tokenizer_of(directory: str | Path):
    """The tokenizer a checkpoint folder is meant to be read with (see the module doc)."""
    directory = Path(directory)
    path = directory / "tokenizer.json"
    if path.is_file():
        return HFTokenizer(path, eos_of(directory, None))
    for other in ("vocab.json", "merges.txt", "tokenizer.model"):
        if (directory / other).is_file():
            raise CheckpointError(
                f"{directory} has {other} but no tokenizer.json; save one with "
                "transformers: AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)"
            )
    return ByteTokenizer(eos_of(directory, byte_tokenizer.EOS))


def check_same_tokenizer(target_tok, draft_tok, target_dir, draft_dir) -> None:
    if not target_tok.same_as(draft_tok):
        raise CheckpointError(
            f"target and draft do not share a tokenizer: {target_dir} uses {target_tok.name} "
            f"(EOS {target_tok.eos_id}), {draft_dir} uses {draft_tok.name} (EOS "
            f"{draft_tok.eos_id}). The target verifies the draft's token ids, so both must "
            "read text the same way (e.g. gpt2-medium + gpt2, gpt2 + distilgpt2)"
        )


def check_fits(model: GPT | Llama, tokenizer, source) -> None:
    """Refuse a model whose vocabulary does not cover the tokenizer's, before any text is made.

    A model may score MORE ids than its tokenizer has: Qwen2.5 pads its 151,665 ids to
    151,936 output rows (a multiple of 128, for the hardware). Those rows were never trained
    to win, so they get a tiny probability, and the model's law over them is left as the
    checkpoint defines it (transformers keeps them too); one drawn anyway is shown as
    `<unused id N>` by the tokenizer (a tokenizer.json's; the byte-level tokenizer has no such
    marker, so there padding is refused). FEWER rows than the tokenizer's ids is refused: the
    tokenizer could hand the model an id it has no embedding for."""
    V = model.n_vocab
    if V > tokenizer.vocab_size and not tokenizer.shows_unused:
        raise CheckpointError(
            f"{source}: the model scores {V} token ids, but its tokenizer, {tokenizer.name}, "
            f"has {tokenizer.vocab_size}; the ids past them could not be written as text. "
            "Put the model's tokenizer.json next to its config.json, or use a model trained "
            "for this tokenizer"
        )
    if V < tokenizer.vocab_size:
        raise CheckpointError(
            f"{source}: the model scores {V} token ids, but its tokenizer, {tokenizer.name}, "
            f"has {tokenizer.vocab_size}; the ids from {V} on have no row in the model. "
            "Put the model's tokenizer.json next to its config.json, or use a model trained "
            "for this tokenizer"
        )
    eos = tokenizer.eos_id
    if eos is not None and not 0 <= eos < V:
        raise CheckpointError(f"{source}: eos_token_id {eos} is not one of the {V} token ids")


def check_same_vocabulary(target: GPT | Llama, draft: GPT | Llama, target_dir, draft_dir):
    # the target verifies the draft's q row by row against its own p: both over the same ids
    # (padding rows included), else no acceptance ratio p(x)/q(x) is defined
    if target.n_vocab != draft.n_vocab:
        raise CheckpointError(
            f"target and draft score different numbers of ids: {target_dir} has "
            f"{target.n_vocab} output rows, {draft_dir} has {draft.n_vocab}; speculative "
            "decoding compares their probabilities id by id, so they must be equal"
        )


@dataclass(frozen=True)
class TextPair:
    target: GPT | Llama
    draft: GPT | Llama
    tokenizer: ByteTokenizer | HFTokenizer  # shared by both models


def load_text_pair(target_dir: str | Path, draft_dir: str | Path) -> TextPair:
    """A target/draft checkpoint pair (GPT-2 or the Llama family, by each config.json's
    model_type) and the one tokenizer they share, every check done (checkpoints, shared
    tokenizer, vocabularies) before a token is generated.

        pair = load_text_pair("gpt2-medium", "gpt2")
        res = speculative_generate(pair.target, ModelDrafter(pair.draft),
                                   pair.tokenizer.encode("Hello"), ...,
                                   eos_id=pair.tokenizer.eos_id)
        print(pair.tokenizer.decode(res.tokens))
    """
    target_dir, draft_dir = Path(target_dir), Path(draft_dir)
    target_tok, draft_tok = tokenizer_of(target_dir), tokenizer_of(draft_dir)
    check_same_tokenizer(target_tok, draft_tok, target_dir, draft_dir)
    target, draft = load_model(target_dir), load_model(draft_dir)
    check_fits(target, target_tok, target_dir)
    check_fits(draft, target_tok, draft_dir)
    check_same_vocabulary(target, draft, target_dir, draft_dir)
    return TextPair(target, draft, target_tok)


def parameter_count(cfg: GPTConfig | LlamaConfig) -> int:
    """How many numbers a model of this config holds (a tied output layer counted once)."""
    family = expected_llama_param_shapes if isinstance(cfg, LlamaConfig) else expected_param_shapes
    return sum(math.prod(shape) for shape in family(cfg).values())


def memory_to_run(target: GPTConfig | LlamaConfig, draft: GPTConfig | LlamaConfig, tokens: int):
    """Bytes a pair needs in memory: both models' weights as float32 (the project computes in
    float32, so a bfloat16 checkpoint doubles on load) and both caches at `tokens` positions
    (keys and values of n_kv_head heads per layer, float32). Activations are a few rows and
    are left out; loading adds, for a moment, the largest tensor in its stored form."""
    weights = 4 * (parameter_count(target) + parameter_count(draft))

    def per_token(cfg):  # K and V, every layer, the heads the cache holds
        return 2 * cfg.n_layer * cfg.n_kv_head * cfg.head_size * 4

    return weights + tokens * (per_token(target) + per_token(draft))
