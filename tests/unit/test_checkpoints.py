"""Checkpoints through the safetensors library: a round trip, and a `CheckpointError` that
names the file and what is wrong for every malformed checkpoint (never a raw KeyError /
TypeError, never a silent load). No torch: the checkpoints are written by `save_gpt2`."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import reference.weights as weights
from reference import GPT, GPTConfig, init_params
from reference.weights import CheckpointError, load_gpt2, read_safetensors, save_gpt2

CFG = GPTConfig(n_vocab=11, n_ctx=16, n_embd=8, n_head=2, n_layer=2)


@pytest.fixture
def model():
    return GPT(CFG, init_params(CFG, np.random.default_rng(0), std=0.3))


@pytest.fixture
def ckpt(model, tmp_path):
    directory = tmp_path / "ckpt"
    save_gpt2(model, directory, dtype=np.float32)
    return directory


def write_raw(path, header, body: bytes = b"") -> None:
    # a .safetensors file with exactly this header (any JSON value, or raw bytes)
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + body)


def file_tensors(ckpt) -> tuple[dict, bytes]:
    # (the header as a dict, the data block) of the checkpoint's weights file
    data = (ckpt / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def rewrite_header(ckpt, edit) -> None:
    header, body = file_tensors(ckpt)
    edit(header)
    write_raw(ckpt / "model.safetensors", header, body)


def edit_config(ckpt, **changes) -> None:
    path = ckpt / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def refused(ckpt, *words: str) -> str:
    with pytest.raises(CheckpointError) as info:
        load_gpt2(ckpt)
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)
    return message


# ---------------------------------------------------------------- what loads


def test_a_saved_model_loads_back_with_the_same_weights(model, ckpt):
    loaded = load_gpt2(ckpt)
    assert loaded.config == model.config
    for name, arr in model.params.items():
        np.testing.assert_array_equal(loaded.params[name], arr)


def test_the_file_is_the_safetensors_library_format(ckpt):
    """What we write, the library reads with its own NumPy API, names and all."""
    from safetensors.numpy import load_file

    theirs = load_file(ckpt / "model.safetensors")
    assert "transformer.wte.weight" in theirs
    ours = read_safetensors(ckpt / "model.safetensors")
    assert set(ours) == set(theirs)


def test_the_bundled_pair_still_loads():
    from specdec.bundled import bundled_pair_available, load_bundled_pair

    assert bundled_pair_available()
    target, draft = load_bundled_pair()
    assert target.n_vocab == draft.n_vocab == 257


def test_the_gpu_twin_loads_the_same_checkpoint_and_refuses_the_same_damage(model, ckpt):
    import gpu.weights

    twin = gpu.weights.load_gpt2(ckpt)
    assert twin.config == model.config
    edit_config(ckpt, n_layer=1_000_000_000)
    with pytest.raises(CheckpointError, match="n_layer=1000000000"):
        gpu.weights.load_gpt2(ckpt)


# ---------------------------------------------------------------- the header


@pytest.mark.parametrize("header", [[1, 2], 3, "tensors"])
def test_a_header_that_is_not_an_object(ckpt, header):
    write_raw(ckpt / "model.safetensors", header)
    refused(ckpt, "model.safetensors", "must be a JSON object")


def test_an_entry_that_is_not_an_object(ckpt):
    rewrite_header(ckpt, lambda h: h.update({"transformer.wte.weight": [0, 4]}))
    refused(ckpt, "model.safetensors", "'transformer.wte.weight'", "must be a JSON object")


@pytest.mark.parametrize("key", ["data_offsets", "shape", "dtype"])
def test_an_entry_missing_a_field(ckpt, key):
    rewrite_header(ckpt, lambda h: h["transformer.ln_f.bias"].pop(key))
    refused(ckpt, "model.safetensors", "'transformer.ln_f.bias'", f"has no {key}")


def test_offsets_given_as_strings(ckpt):
    def stringify(h):
        begin, end = h["transformer.ln_f.bias"]["data_offsets"]
        h["transformer.ln_f.bias"]["data_offsets"] = [str(begin), str(end)]

    rewrite_header(ckpt, stringify)
    refused(ckpt, "model.safetensors", "data_offsets must be [begin, end]")


def test_negative_offsets(ckpt):
    def shift(h):
        begin, end = h["transformer.ln_f.bias"]["data_offsets"]
        h["transformer.ln_f.bias"]["data_offsets"] = [begin - 10**6, end - 10**6]

    rewrite_header(ckpt, shift)
    refused(ckpt, "model.safetensors", "'transformer.ln_f.bias'", "integers >= 0")


def test_overlapping_offsets_never_load_another_tensors_bytes(ckpt):
    """Two tensors of the same size pointing at the same bytes: refused, not loaded twice."""

    def overlap(h):
        h["transformer.ln_f.bias"]["data_offsets"] = list(
            h["transformer.ln_f.weight"]["data_offsets"]
        )

    rewrite_header(ckpt, overlap)
    refused(ckpt, "model.safetensors", "overlaps")


@pytest.mark.parametrize("metadata", [["format", "pt"], {"format": 1}])
def test_metadata_that_is_not_names_to_strings(ckpt, metadata):
    rewrite_header(ckpt, lambda h: h.update({"__metadata__": metadata}))
    refused(ckpt, "model.safetensors", "__metadata__ must map names to strings")


def test_a_shape_that_does_not_match_its_bytes(ckpt):
    rewrite_header(ckpt, lambda h: h["transformer.ln_f.bias"].update(shape=[3]))
    refused(ckpt, "'transformer.ln_f.bias'", "needs 12")


def test_a_name_stored_twice_in_the_header(ckpt):
    _, body = file_tensors(ckpt)
    entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    write_raw(ckpt / "model.safetensors", f'{{"a":{entry},"a":{entry}}}'.encode(), body[:4])
    refused(ckpt, "model.safetensors", "'a' appears twice")


def test_a_name_present_with_and_without_the_transformer_prefix(ckpt):
    """Today's bug: the second copy silently replaced the first."""
    header, body = file_tensors(ckpt)
    entry = header["transformer.ln_f.bias"]
    extra = np.full(entry["shape"], 7.0, dtype=np.float32).tobytes()
    header["ln_f.bias"] = {**entry, "data_offsets": [len(body), len(body) + len(extra)]}
    write_raw(ckpt / "model.safetensors", header, body + extra)
    refused(ckpt, "'ln_f.bias' is stored twice", "'transformer.ln_f.bias'")


@pytest.mark.parametrize("keep", [4, 100, -10])
def test_a_truncated_file(ckpt, keep):
    path = ckpt / "model.safetensors"
    path.write_bytes(path.read_bytes()[:keep])
    refused(ckpt, "model.safetensors", "truncated")


def test_trailing_bytes_no_tensor_owns(ckpt):
    path = ckpt / "model.safetensors"
    path.write_bytes(path.read_bytes() + b"\0" * 8)
    refused(ckpt, "model.safetensors", "holds")


def test_a_header_that_is_not_json(ckpt):
    path = ckpt / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:16] = b"\xff" * 8
    path.write_bytes(bytes(data))
    refused(ckpt, "model.safetensors", "not JSON")


def test_bfloat16_says_how_to_convert(ckpt):
    rewrite_header(ckpt, lambda h: h["transformer.ln_f.bias"].update(dtype="BF16"))
    refused(ckpt, "bfloat16", "float32")


# ---------------------------------------------------------------- config.json


@pytest.mark.parametrize("key", ["n_embd", "n_head", "n_layer", "vocab_size", "n_positions"])
def test_config_missing_a_key(ckpt, key):
    config = json.loads((ckpt / "config.json").read_text())
    del config[key]
    (ckpt / "config.json").write_text(json.dumps(config))
    refused(ckpt, "config.json", key)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{not json", "is not JSON"),
        (b"[1, 2, 3]", "must hold a JSON object"),
        (b'"gpt2"', "must hold a JSON object"),
        ('{"model_type": "gpt2", "n_embd": "é"}'.encode("latin-1"), "is not UTF-8"),
    ],
)
def test_config_that_is_not_a_json_object(ckpt, content, words):
    (ckpt / "config.json").write_bytes(content)
    refused(ckpt, str(ckpt / "config.json"), words)


def test_config_value_of_the_wrong_type_names_the_file(ckpt):
    edit_config(ckpt, n_embd="8")
    refused(ckpt, "config.json", "n_embd")


def test_an_absurd_n_layer_is_refused_before_anything_is_allocated(ckpt, monkeypatch):
    """A billion layers: the config is compared with the file's blocks before a table of
    shapes (or any weight) is built for it."""
    real = weights.expected_param_shapes

    def guarded(cfg):
        assert cfg.n_layer < 1000, "built a shape table for the config's claim"
        return real(cfg)

    monkeypatch.setattr(weights, "expected_param_shapes", guarded)
    edit_config(ckpt, n_layer=1_000_000_000)
    refused(ckpt, "n_layer=1000000000", "holds 2 transformer blocks")


@pytest.mark.parametrize("eps", [0, -1e-5, "1e-5", True, float("nan"), float("inf"), None])
def test_a_bad_layer_norm_epsilon(ckpt, eps):
    edit_config(ckpt, layer_norm_epsilon=eps)
    refused(ckpt, "config.json", "layer_norm_epsilon must be a positive finite number")


def test_config_and_tensors_disagree_names_the_tensor(ckpt):
    edit_config(ckpt, n_positions=32)
    refused(ckpt, "'wpe.weight'", "config.json implies")


# ---------------------------------------------------------------- the weights themselves


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused_at_load_naming_the_tensor(model, tmp_path, bad):
    model.params["h.1.mlp.c_fc.weight"][2, 3] = bad
    save_gpt2(model, tmp_path / "broken", dtype=np.float32)
    refused(tmp_path / "broken", "'h.1.mlp.c_fc.weight'", "NaN or infinite")


def test_an_untied_lm_head_is_refused(model, tmp_path):
    save_gpt2(model, tmp_path / "c", dtype=np.float32)
    header, body = file_tensors(tmp_path / "c")
    wte = header["transformer.wte.weight"]
    extra = np.ones(wte["shape"], dtype=np.float32).tobytes()
    header["lm_head.weight"] = {**wte, "data_offsets": [len(body), len(body) + len(extra)]}
    write_raw(tmp_path / "c" / "model.safetensors", header, body + extra)
    refused(tmp_path / "c", "lm_head.weight is not tied")
