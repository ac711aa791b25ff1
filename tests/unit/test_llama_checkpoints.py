"""Llama-family checkpoints on disk, without torch: files written here byte by byte (header
length, JSON header, data block), read by `read_llama` / `load_model`. bfloat16 is widened
exactly; every malformed folder gets a `CheckpointError` that names what is wrong."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from reference.config import LlamaConfig
from reference.llama import expected_llama_param_shapes
from reference.weights import (
    CheckpointError,
    load_model,
    read_bfloat16,
    read_header,
    read_llama,
)

# a config.json as the Hub's checkpoints write it (rope_theta at the top level)
CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 24,
    "hidden_size": 16,
    "intermediate_size": 40,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    # float32 values whose low 16 bits are zero -> their bfloat16 bit patterns (uint16)
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bfloat16_values(shape, rng) -> np.ndarray:
    # random float32 values that bfloat16 holds exactly (the low 16 bits cleared)
    x = rng.normal(0.0, 0.5, size=shape).astype(np.float32)
    return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def write_file(path, tensors: dict[str, np.ndarray], dtype: str = "F32", header_edit=None):
    """A .safetensors file written by hand: 8-byte length, JSON header, then the data."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        raw = to_bfloat16_bits(arr) if dtype == "BF16" else arr.astype(np.float32)
        blob = raw.tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    if header_edit:
        header_edit(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def random_params(config: dict, rng) -> dict[str, np.ndarray]:
    shapes = expected_llama_param_shapes(LlamaConfig.from_hf_dict(config))
    return {name: bfloat16_values(shape, rng) for name, shape in shapes.items()}


def write_folder(folder, config=CONFIG, params=None, dtype="F32", shards=1, header_edit=None):
    """config.json + model.safetensors (shards=1) or model-0000i-of-0000n + the index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    params = random_params(config, np.random.default_rng(0)) if params is None else params
    if shards == 1:
        write_file(folder / "model.safetensors", params, dtype, header_edit)
        return params
    names, weight_map = list(params), {}
    for i, part in enumerate(np.array_split(np.arange(len(names)), shards)):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_file(folder / shard, {names[j]: params[names[j]] for j in part}, dtype)
        weight_map.update({names[j]: shard for j in part})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return params


def refused(folder, *words: str) -> str:
    with pytest.raises(CheckpointError) as info:
        load_model(folder)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


# ---------------------------------------------------------------- read as written


def test_bfloat16_is_widened_exactly(tmp_path):
    """Every bfloat16 bit pattern class: normal, negative, zero and -0, the smallest
    subnormal, the largest finite value, infinity: float32 of the same value, bit for bit."""
    values = np.array(
        [1.0, -2.5, 0.0, -0.0, 2.0**-133, 3.3895314e38, np.inf, -np.inf], dtype=np.float32
    )
    values = (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).reshape(2, 4)
    path = tmp_path / "bf16.safetensors"
    write_file(path, {"x": values}, dtype="BF16")
    header = read_header(path, bfloat16=True)
    assert header["x"]["dtype"] == "BF16" and header["x"]["data_offsets"] == [0, 16]
    widened = read_bfloat16(path, header["x"])
    assert widened.dtype == np.float32 and widened.shape == (2, 4)
    np.testing.assert_array_equal(widened.view(np.uint32), values.view(np.uint32))


@pytest.mark.parametrize("dtype", ["F32", "BF16"])
@pytest.mark.parametrize("shards", [1, 3])
def test_a_folder_reads_back_exactly(tmp_path, dtype, shards):
    params = write_folder(tmp_path / "m", dtype=dtype, shards=shards)
    cfg, read = read_llama(tmp_path / "m")
    assert cfg == LlamaConfig.from_hf_dict(CONFIG)
    assert set(read) == set(params)
    for name, arr in params.items():
        assert read[name].dtype == np.float32
        np.testing.assert_array_equal(read[name], arr, err_msg=name)
    assert load_model(tmp_path / "m").n_vocab == CONFIG["vocab_size"]


def test_tied_output_layer_may_be_absent_or_equal(tmp_path):
    config = {**CONFIG, "tie_word_embeddings": True}
    params = random_params(config, np.random.default_rng(1))
    assert "lm_head.weight" not in params  # the expected shapes of a tied model lack it
    write_folder(tmp_path / "absent", config, params)
    assert set(read_llama(tmp_path / "absent")[1]) == set(params)
    stored = {**params, "lm_head.weight": params["model.embed_tokens.weight"]}
    write_folder(tmp_path / "equal", config, stored)
    assert set(read_llama(tmp_path / "equal")[1]) == set(params)
    stored["lm_head.weight"] = stored["lm_head.weight"] + 1.0
    write_folder(tmp_path / "differs", config, stored)
    refused(tmp_path / "differs", "lm_head.weight differs from model.embed_tokens.weight")


def test_rotary_buffers_are_skipped(tmp_path):
    params = random_params(CONFIG, np.random.default_rng(2))
    buffers = {f"model.layers.{i}.self_attn.rotary_emb.inv_freq": np.ones(2) for i in range(2)}
    write_folder(tmp_path / "m", params={**params, **buffers})
    assert set(read_llama(tmp_path / "m")[1]) == set(params)


# ---------------------------------------------------------------- refused, by name


def test_sliding_window_is_refused(tmp_path):
    config = {**CONFIG, "model_type": "mistral", "sliding_window": 32}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    refused(tmp_path / "m", "config.json", "sliding")


def test_another_model_type_is_refused(tmp_path):
    write_folder(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps({**CONFIG, "model_type": "gemma"}))
    refused(tmp_path / "m", "'gemma'", "gpt2, llama, qwen2, mistral")


def test_a_missing_shard_is_named(tmp_path):
    write_folder(tmp_path / "m", shards=3)
    (tmp_path / "m" / "model-00002-of-00003.safetensors").unlink()
    refused(tmp_path / "m", "model.safetensors.index.json", "'model-00002-of-00003.safetensors'")


def test_a_shard_outside_the_folder_is_refused(tmp_path):
    write_folder(tmp_path / "m", shards=2)
    index_path = tmp_path / "m" / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["lm_head.weight"] = "../elsewhere.safetensors"
    index_path.write_text(json.dumps(index))
    refused(tmp_path / "m", "weight_map", "a file name in")


def test_a_tensor_in_another_shard_than_the_index_says(tmp_path):
    write_folder(tmp_path / "m", shards=2)
    index_path = tmp_path / "m" / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    weight_map = index["weight_map"]
    elsewhere = ({*weight_map.values()} - {weight_map["lm_head.weight"]}).pop()
    weight_map["lm_head.weight"] = elsewhere
    index_path.write_text(json.dumps(index))
    refused(tmp_path / "m", "'lm_head.weight'", f"places in '{elsewhere}'")


def test_no_weights_file(tmp_path):
    write_folder(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").rename(tmp_path / "m" / "pytorch_model.bin")
    refused(tmp_path / "m", "neither model.safetensors nor", "never loaded")


def test_a_header_shape_that_disagrees_with_the_config(tmp_path):
    write_folder(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps({**CONFIG, "intermediate_size": 48}))
    refused(tmp_path / "m", "model.layers.0.mlp.", "[40, 16]", "config.json implies")


def test_more_layers_than_the_files_hold(tmp_path):
    write_folder(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps({**CONFIG, "num_hidden_layers": 10**9}))
    refused(tmp_path / "m", "num_hidden_layers=1000000000", "2 decoder layers")


def test_missing_and_unexpected_tensors_are_named(tmp_path):
    params = random_params(CONFIG, np.random.default_rng(3))
    del params["lm_head.weight"]  # untied: the output layer is required
    write_folder(tmp_path / "missing", params=params)
    refused(tmp_path / "missing", "missing", "'lm_head.weight'")
    params = random_params(CONFIG, np.random.default_rng(3))
    write_folder(tmp_path / "extra", params={**params, "model.layers.0.extra": np.ones(3)})
    refused(tmp_path / "extra", "unexpected", "'model.layers.0.extra'")


def test_an_unknown_dtype_is_refused(tmp_path):
    def to_int32(header):  # the same byte count as F32, a dtype no weights are read in
        header["model.norm.weight"]["dtype"] = "I32"

    write_folder(tmp_path / "m", header_edit=to_int32)
    refused(tmp_path / "m", "'model.norm.weight'", "unsupported dtype 'I32'", "BF16")
