"""A checkpoint that cannot be loaded gets an error that says what is wrong with it."""

import json
import shutil

import numpy as np
import pytest

from reference.weights import CheckpointError, load_gpt2, read_safetensors


@pytest.fixture
def checkpoint(hf_pair, tmp_path):
    _, _, target_dir, _ = hf_pair
    copy = tmp_path / "ckpt"
    shutil.copytree(target_dir, copy)
    return copy


def edit_config(directory, **changes):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="directory not found"):
        load_gpt2(tmp_path / "nope")


def test_missing_config(checkpoint):
    (checkpoint / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json not found"):
        load_gpt2(checkpoint)


def test_missing_weights_never_falls_back_to_pickle(checkpoint):
    (checkpoint / "model.safetensors").rename(checkpoint / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="never loaded"):
        load_gpt2(checkpoint)


def test_shape_mismatch_names_the_tensor(checkpoint):
    edit_config(checkpoint, n_positions=128)
    with pytest.raises(CheckpointError, match="wpe.weight"):
        load_gpt2(checkpoint)


def test_unsupported_architecture(checkpoint):
    edit_config(checkpoint, model_type="llama")
    with pytest.raises(CheckpointError, match="llama"):
        load_gpt2(checkpoint)


def test_unsupported_activation(checkpoint):
    edit_config(checkpoint, activation_function="relu")
    with pytest.raises(CheckpointError, match="relu"):
        load_gpt2(checkpoint)


@pytest.mark.parametrize("keep", [4, 100, -10])
def test_truncated_safetensors(checkpoint, keep):
    path = checkpoint / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    with pytest.raises(CheckpointError, match="truncated|corrupt"):
        load_gpt2(checkpoint)


def test_corrupt_header(checkpoint):
    path = checkpoint / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:16] = b"\xff" * 8
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_gpt2(checkpoint)


def test_reader_agrees_with_the_safetensors_library(checkpoint):
    from safetensors.numpy import load_file

    ours = read_safetensors(checkpoint / "model.safetensors")
    theirs = load_file(checkpoint / "model.safetensors")
    assert set(ours) == set(theirs)
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name].astype(np.float32))
