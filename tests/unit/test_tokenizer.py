"""The byte-level tokenizer of the bundled pair, directly: every string round-trips, EOS
cuts the text, each token prints readably; and the same tokenizer behind specdec/text.py's
common interface, picked for a folder without tokenizer.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reference.tokenizer import EOS, VOCAB_SIZE, decode, encode, token_text
from reference.weights import CheckpointError
from specdec.text import ByteTokenizer, tokenizer_of


@pytest.mark.parametrize("text", ["", "def f(x):\n\treturn x\n", "naïve café ✓ 中文", "\x00\x7f"])
def test_every_string_round_trips(text):
    ids = encode(text)
    assert ids.dtype == np.int64 and ids.tolist() == list(text.encode("utf-8"))
    assert decode(ids) == text


def test_bytes_encode_as_themselves():
    assert encode(b"\xff\x00A").tolist() == [255, 0, 65]


def test_decode_stops_at_the_first_eos():
    assert decode([*encode("ab"), EOS, *encode("cd")]) == "ab"
    assert VOCAB_SIZE == EOS + 1 == 257


def test_a_cut_multibyte_character_decodes_to_the_replacement_mark():
    ids = encode("é")[:1]  # half of a two-byte character
    assert decode(ids) == "\ufffd"


@pytest.mark.parametrize(
    ("token", "shown"),
    [(65, "A"), (10, "\\n"), (9, "\\t"), (0, "\\x00"), (200, "\\xc8"), (EOS, "<eos>")],
)
def test_each_token_prints_on_one_line(token, shown):
    assert token_text(token) == shown


def test_the_common_interface_agrees_with_the_module():
    tok = ByteTokenizer()
    text = "x = [1, 2]\n"
    assert tok.encode(text).tolist() == encode(text).tolist()
    assert tok.decode([*encode(text), EOS, 65]) == text
    assert tok.eos_id == EOS and tok.vocab_size == VOCAB_SIZE
    assert tok.piece(10) == "\n" and tok.piece(0) == "\\x00" and tok.token_text(10) == "\\n"


def test_a_folder_without_tokenizer_json_is_byte_level_with_the_configs_eos(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 256}))
    assert tokenizer_of(tmp_path).same_as(ByteTokenizer())
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": None}))
    assert tokenizer_of(tmp_path).eos_id is None  # a model without EOS runs to the limit
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": "256"}))
    with pytest.raises(CheckpointError, match="eos_token_id must be an id >= 0 or null"):
        tokenizer_of(tmp_path)
