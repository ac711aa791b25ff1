"""GPT-2 checkpoints on disk: ``config.json`` + ``model.safetensors``.

safetensors is a plain format: an 8-byte little-endian header length, a JSON header
mapping each tensor name to its dtype, shape and byte range, then the raw bytes. We read
it with NumPy alone -- nothing is ever unpickled, so a checkpoint cannot run code.

Hugging Face names (``transformer.h.0.attn.c_attn.weight``) map to ours by dropping the
``transformer.`` prefix; ``lm_head.weight`` is the tied token embedding.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from reference.config import GPTConfig
from reference.model import GPT, expected_param_shapes

SAFETENSORS_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "BF16": np.uint16}
NUMPY_TO_SAFETENSORS = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}
# buffers that some transformers versions store next to the weights; they are not parameters
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
SUPPORTED_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message says why."""


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as a NumPy array (bf16 widened to float32)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    data = path.read_bytes()
    if len(data) < 8:
        raise CheckpointError(f"{path} is truncated: {len(data)} bytes, not even a header length")
    (header_len,) = struct.unpack("<Q", data[:8])
    if 8 + header_len > len(data):
        raise CheckpointError(f"{path} is truncated or corrupt: header says {header_len} bytes")
    try:
        header = json.loads(data[8 : 8 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path} is corrupt: its header is not JSON ({err})") from None
    body = memoryview(data)[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = decode_tensor(path, name, info, body)
    return tensors


def decode_tensor(path: Path, name: str, info: dict, body: memoryview) -> np.ndarray:
    dtype = SAFETENSORS_DTYPES.get(info.get("dtype"))
    if dtype is None:
        raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {info.get('dtype')}")
    begin, end = info["data_offsets"]
    shape = tuple(info["shape"])
    expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if end > len(body) or end - begin != expected:
        raise CheckpointError(
            f"{path} is truncated or corrupt: tensor {name!r} needs {expected} bytes at "
            f"{begin}..{end}, the file holds {len(body)} bytes of data"
        )
    arr = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape)
    if info["dtype"] == "BF16":  # bfloat16 = the high 16 bits of a float32
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray], metadata=None) -> None:
    header, offset, chunks = {}, 0, []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        raw = arr.tobytes()
        header[name] = {
            "dtype": NUMPY_TO_SAFETENSORS[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)  # align the data to 8 bytes, as the format recommends
    Path(path).write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(chunks))


def read_config(directory: Path) -> GPTConfig:
    path = directory / "config.json"
    if not path.is_file():
        raise CheckpointError(f"config.json not found in {directory}")
    d = json.loads(path.read_text())
    arch = d.get("model_type")
    if arch != "gpt2":
        raise CheckpointError(
            f"{path}: model_type {arch!r} is not supported; only GPT-2 checkpoints load"
        )
    act = d.get("activation_function", "gelu_new")
    if act not in SUPPORTED_ACTIVATIONS:
        raise CheckpointError(f"{path}: activation_function {act!r} is not supported (gelu_new)")
    if d.get("n_inner") not in (None, 4 * d["n_embd"]):
        raise CheckpointError(f"{path}: n_inner={d['n_inner']} is not supported (4 * n_embd)")
    return GPTConfig.from_hf_dict(d)


def params_from_hf(tensors: dict[str, np.ndarray], cfg: GPTConfig, source: str) -> dict:
    params = {}
    for name, arr in tensors.items():
        if name.endswith(IGNORED_SUFFIXES):
            continue
        params[name.removeprefix("transformer.")] = arr
    lm_head = params.pop("lm_head.weight", None)
    expected = expected_param_shapes(cfg)
    for name, shape in expected.items():
        if name not in params:
            raise CheckpointError(f"{source}: tensor {name!r} is missing")
        if params[name].shape != shape:
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {params[name].shape}, "
                f"config.json implies {shape}"
            )
    unknown = sorted(set(params) - set(expected))
    if unknown:
        raise CheckpointError(f"{source}: unexpected tensors {unknown[:5]} (not a GPT-2 model?)")
    if lm_head is not None and not np.array_equal(lm_head, params["wte.weight"]):
        raise CheckpointError(f"{source}: lm_head.weight is not tied to wte.weight (unsupported)")
    return params


def load_gpt2(directory: str | Path) -> GPT:
    """Load a GPT-2 checkpoint directory (config.json + model.safetensors)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {directory}")
    cfg = read_config(directory)
    weights = directory / "model.safetensors"
    if not weights.is_file():
        bins = sorted(p.name for p in directory.glob("*.bin"))
        hint = f" (found {bins}: pickled weights are never loaded; convert to safetensors)"
        message = f"model.safetensors not found in {directory}"
        raise CheckpointError(message + (hint if bins else ""))
    return GPT(cfg, params_from_hf(read_safetensors(weights), cfg, str(weights)))


def save_gpt2(model: GPT, directory: str | Path, dtype=np.float16, metadata=None) -> None:
    """Write config.json + model.safetensors in the Hugging Face GPT-2 layout."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(model.config.to_hf_dict(), indent=2) + "\n")
    tensors = {"transformer." + k: v.astype(dtype) for k, v in model.params.items()}
    write_safetensors(directory / "model.safetensors", tensors, metadata or {"format": "pt"})
