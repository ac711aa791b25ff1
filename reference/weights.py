"""GPT-2 checkpoints on disk: ``config.json`` + ``model.safetensors``.

The safetensors format, in one paragraph: an 8-byte little-endian integer n, then n bytes
of JSON (the header) mapping each tensor name to ``{"dtype", "shape", "data_offsets"}``,
then one flat block of raw bytes. ``data_offsets = [begin, end]`` are byte positions in
that block, relative to its start; the tensors tile it exactly, without gaps or overlaps.
Nothing in the file is code, so loading one cannot run anything (a pickled ``.bin`` can).

The bytes are read by the ``safetensors`` library (its NumPy API; small, no torch). We
still read the header ourselves first, for two reasons: a malformed header then gets an
error that names the file and says what is wrong (the library's own messages are terse),
and the config can be compared with the tensors' shapes *before* anything is allocated
(a config that claims a billion layers is refused, not obeyed).

Hugging Face names (``transformer.h.0.attn.c_attn.weight``) map to ours by dropping the
``transformer.`` prefix; ``lm_head.weight`` is the tied token embedding.

The Llama family (llama, qwen2, mistral: `read_llama`, `load_llama`) keeps the checkpoint's
names as they are, reads sharded folders (``model.safetensors.index.json``) and widens
bfloat16 to float32 by hand (`read_bfloat16`); `load_model` picks the reader by model_type.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

import numpy as np

# The one third-party import of the core besides numpy: checkpoint I/O is the core's edge
# (tests/unit/test_layout.py names this exception).
import safetensors.numpy
from safetensors import SafetensorError

from reference.config import LLAMA_TYPES, GPTConfig, LlamaConfig
from reference.eagle import FILES as EAGLE_FILES
from reference.eagle import TRAIN_COMMAND as TRAIN_EAGLE
from reference.eagle import EagleDrafter
from reference.llama import Llama, expected_llama_param_shapes
from reference.model import GPT, expected_param_shapes

# the dtypes we load (each becomes float32); bf16 has no NumPy dtype, see `read_bfloat16`
# (for bf16, uint16 stands in for its two bytes: `read_bfloat16` widens them to float32)
SAFETENSORS_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64}
NUMPY_TO_SAFETENSORS = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}
# buffers that some transformers versions store next to the weights; they are not parameters
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
SUPPORTED_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")
REQUIRED_CONFIG_KEYS = ("vocab_size", "n_positions", "n_embd", "n_head", "n_layer")
# a header larger than this is not a GPT-2 header (gpt2-xl's is ~60 KB): refuse to read it
MAX_HEADER_BYTES = 100 * 2**20
HF_PREFIX = "transformer."
BLOCK_NAME = re.compile(r"h\.(\d+)\.")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message says why."""


# ------------------------------------------------------------------ the safetensors header


def read_header(path: str | Path, bfloat16: bool = False) -> dict[str, dict]:
    """The tensor entries of a .safetensors header, checked; nothing of the data is read.
    bfloat16: whether BF16 entries are accepted (the Llama family's reader widens them).

    -> {name: {"dtype": str, "shape": [ints], "data_offsets": [begin, end]}}"""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path} is truncated: {size} bytes, not even a header length")
        (header_len,) = struct.unpack("<Q", head)
        if header_len > min(size - 8, MAX_HEADER_BYTES):
            raise CheckpointError(
                f"{path} is truncated or corrupt: its header length says {header_len} bytes, "
                f"the file holds {size - 8} after the length"
            )
        raw = f.read(header_len)
    header = parse_header_json(path, raw)
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{path} is corrupt: __metadata__ must map names to strings")
    entries = {name: info for name, info in header.items() if name != "__metadata__"}
    for name, info in entries.items():
        check_entry(path, name, info, bfloat16)
    check_tiling(path, entries, size - 8 - header_len)
    return entries


def parse_header_json(path: Path, raw: bytes) -> dict:
    # JSON text -> a dict; a name that appears twice is an error (json.loads would keep the
    # last one silently, and the library's message does not say which)
    def no_duplicates(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise CheckpointError(f"{path} is corrupt: tensor {key!r} appears twice")
            seen[key] = value
        return seen

    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path} is corrupt: its header is not JSON ({err})") from None
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{path} is corrupt: its header must be a JSON object of tensors, "
            f"got a {type(header).__name__}"
        )
    return header


def is_count(x) -> bool:
    # a JSON non-negative integer (a bool is not one, although Python says it is an int)
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def check_entry(path: Path, name: str, info, bfloat16: bool = False) -> None:
    # one header entry: a dtype we read, a shape of counts, [begin, end] that fit the shape
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise CheckpointError(f"{where} must be a JSON object, got {info!r}")
    missing = [key for key in ("dtype", "shape", "data_offsets") if key not in info]
    if missing:
        raise CheckpointError(f"{where} has no {' or '.join(missing)}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype == "BF16" and not bfloat16:
        raise CheckpointError(
            f"{where} is bfloat16, which NumPy cannot hold; save the model in float32 or "
            f"float16 (e.g. model.float().save_pretrained(...)) and load that"
        )
    if dtype not in SAFETENSORS_DTYPES:
        known = "BF16, F16, F32 or F64" if bfloat16 else "F16, F32 or F64"
        raise CheckpointError(f"{where} has unsupported dtype {dtype!r} ({known})")
    if not isinstance(shape, list) or not all(is_count(n) for n in shape):
        raise CheckpointError(f"{where}: shape must be a list of integers >= 0, got {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(is_count, offsets))):
        raise CheckpointError(
            f"{where}: data_offsets must be [begin, end], two integers >= 0, got {offsets!r}"
        )
    begin, end = offsets
    expected = math.prod(shape) * np.dtype(SAFETENSORS_DTYPES[dtype]).itemsize
    if end - begin != expected:
        raise CheckpointError(
            f"{where}: data_offsets {offsets} span {end - begin} bytes, but shape {shape} "
            f"of {dtype} needs {expected}"
        )


def check_tiling(path: Path, entries: dict[str, dict], body_size: int) -> None:
    # the byte ranges must tile the data block: each starts where the previous one ended.
    # An overlap would read another tensor's bytes (checked first: it is the worse fault);
    # a gap hides bytes no tensor owns.
    spans = sorted((*info["data_offsets"], name) for name, info in entries.items())
    for (_, end_a, a), (begin_b, end_b, b) in zip(spans, spans[1:], strict=False):
        if begin_b < end_a:
            raise CheckpointError(
                f"{path} is corrupt: tensor {b!r} (bytes {begin_b}..{end_b}) overlaps tensor "
                f"{a!r} (which ends at byte {end_a})"
            )
    position = 0
    for begin, end, name in spans:
        if begin != position:
            raise CheckpointError(
                f"{path} is corrupt: tensor {name!r} starts at byte {begin}, but the data "
                f"before it ends at byte {position}: {begin - position} bytes no tensor owns"
            )
        position = end
    if position != body_size:
        raise CheckpointError(
            f"{path} is truncated or corrupt: its tensors need {position} bytes of data, "
            f"the file holds {body_size}"
        )


# ------------------------------------------------------------------ reading and writing


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as a float32 NumPy array (header checked first)."""
    path = Path(path)
    read_header(path)
    try:
        tensors = safetensors.numpy.load_file(path)
    except (SafetensorError, OSError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path} cannot be read by safetensors: {err}") from None
    return {name: arr.astype(np.float32) for name, arr in tensors.items()}


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray], metadata=None) -> None:
    """Write float16 / float32 arrays as one .safetensors file (metadata: str -> str)."""
    for name, arr in tensors.items():
        if np.asarray(arr).dtype not in NUMPY_TO_SAFETENSORS:
            raise ValueError(f"tensor {name!r} is {np.asarray(arr).dtype}; write float16/32")
    arrays = {name: np.ascontiguousarray(arr) for name, arr in tensors.items()}
    meta = {str(k): str(v) for k, v in metadata.items()} if metadata else None
    safetensors.numpy.save_file(arrays, str(path), metadata=meta)


# ------------------------------------------------------------------ config.json


def read_json_object(path: Path) -> dict:
    # a JSON file that must hold an object; every failure names the file
    if not path.is_file():
        raise CheckpointError(f"{path.name} not found in {path.parent}")
    try:
        d = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path} is not UTF-8 text ({err})") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is not JSON ({err})") from None
    if not isinstance(d, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got a {type(d).__name__}")
    return d


def read_config(directory: Path) -> GPTConfig:
    path = directory / "config.json"
    d = read_json_object(path)
    arch = d.get("model_type")
    if arch != "gpt2":
        raise CheckpointError(
            f"{path}: model_type {arch!r} is not GPT-2 (`load_model` reads every family)"
        )
    missing = [key for key in REQUIRED_CONFIG_KEYS if key not in d]
    if missing:
        raise CheckpointError(
            f"{path} has no {', '.join(missing)} (a GPT-2 config has all of them)"
        )
    act = d.get("activation_function", "gelu_new")
    if act not in SUPPORTED_ACTIVATIONS:
        raise CheckpointError(f"{path}: activation_function {act!r} is not supported (gelu_new)")
    try:
        cfg = GPTConfig.from_hf_dict(d)
    except (TypeError, ValueError) as err:  # GPTConfig's own checks say which field
        raise CheckpointError(f"{path}: {err}") from None
    n_inner = d.get("n_inner")
    if n_inner is not None and (isinstance(n_inner, bool) or n_inner != 4 * cfg.n_embd):
        raise CheckpointError(f"{path}: n_inner={n_inner!r} is not supported (4 * n_embd)")
    return cfg


# ------------------------------------------------------------------ config against tensors


def our_names(hf_names, source: str) -> dict[str, str]:
    # {our name: the file's name}: drop "transformer." and the buffers that are not
    # parameters; a name stored both with and without the prefix is refused (which one
    # would the model get?)
    mapping: dict[str, str] = {}
    for hf_name in hf_names:
        if hf_name.endswith(IGNORED_SUFFIXES):
            continue
        name = hf_name.removeprefix(HF_PREFIX)
        if name in mapping:
            raise CheckpointError(
                f"{source}: tensor {name!r} is stored twice, as {mapping[name]!r} and "
                f"{hf_name!r}; keep one of them"
            )
        mapping[name] = hf_name
    return mapping


def check_against_config(cfg: GPTConfig, shapes: dict[str, tuple], source: str) -> None:
    # shapes: {our name: shape} from the header. Count the blocks first, so that a config
    # claiming far more layers than the file holds never builds its table of shapes.
    blocks = {int(m.group(1)) for name in shapes if (m := BLOCK_NAME.match(name))}
    if len(blocks) != cfg.n_layer:
        raise CheckpointError(
            f"{source}: config.json says n_layer={cfg.n_layer}, the file holds "
            f"{len(blocks)} transformer blocks"
        )
    expected = expected_param_shapes(cfg)
    for name, shape in expected.items():
        if name not in shapes:
            raise CheckpointError(f"{source}: tensor {name!r} is missing")
        if shapes[name] != shape:
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {shapes[name]}, config.json implies {shape}"
            )
    unknown = sorted(set(shapes) - set(expected) - {"lm_head.weight"})
    if unknown:
        raise CheckpointError(f"{source}: unexpected tensors {unknown[:5]} (not a GPT-2 model?)")


def check_finite_weights(params: dict[str, np.ndarray], source: str) -> None:
    # a NaN or inf weight would surface hundreds of tokens later as "bad logits": name it now
    for name, arr in params.items():
        if not np.all(np.isfinite(arr)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise CheckpointError(
                f"{source}: tensor {name!r} holds {bad} NaN or infinite values; the "
                f"checkpoint is broken (re-save or re-train it)"
            )


def params_from_hf(tensors: dict[str, np.ndarray], cfg: GPTConfig, source: str) -> dict:
    # {file name: array} -> {our name: array}, every shape checked against the config
    names = our_names(tensors, source)
    params = {name: tensors[hf_name] for name, hf_name in names.items()}
    check_against_config(cfg, {name: arr.shape for name, arr in params.items()}, source)
    check_finite_weights(params, source)
    lm_head = params.pop("lm_head.weight", None)
    if lm_head is not None and not np.array_equal(lm_head, params["wte.weight"]):
        raise CheckpointError(f"{source}: lm_head.weight is not tied to wte.weight (unsupported)")
    return params


def load_gpt2(directory: str | Path) -> GPT:
    """Load a GPT-2 checkpoint directory (config.json + model.safetensors).

    Order matters: config and header are checked against each other before the tensors'
    bytes are read, so a bad checkpoint is refused without allocating its claims."""
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
    source = str(weights)
    header = read_header(weights)
    names = our_names(header, source)
    check_against_config(cfg, {n: tuple(header[h]["shape"]) for n, h in names.items()}, source)
    return GPT(cfg, params_from_hf(read_safetensors(weights), cfg, source))


def save_gpt2(model: GPT, directory: str | Path, dtype=np.float16, metadata=None) -> None:
    """Write config.json + model.safetensors in the Hugging Face GPT-2 layout."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(model.config.to_hf_dict(), indent=2) + "\n")
    tensors = {HF_PREFIX + k: v.astype(dtype) for k, v in model.params.items()}
    write_safetensors(directory / "model.safetensors", tensors, metadata or {"format": "pt"})


# ------------------------------------------------------------------ the Llama family

# rotary tables that some conversions saved beside the weights; they are not parameters (the
# model computes its rotations from rope_theta), so they are skipped, never compared
LLAMA_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
LLAMA_BLOCK_NAME = re.compile(r"model\.layers\.(\d+)\.")
EMBEDDING, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"
SINGLE_FILE, INDEX_FILE = "model.safetensors", "model.safetensors.index.json"


def read_bfloat16(path: Path, info: dict) -> np.ndarray:
    """One bfloat16 tensor of a .safetensors file, widened to float32.

    NumPy has no bfloat16, so the library's NumPy API cannot hand one over. bfloat16 is the
    top half of a float32 (sign, the same 8 exponent bits, 7 of the 23 mantissa bits), so
    shifting its 16 bits left by 16 gives the float32 of exactly the same value: the widening
    is exact, needs no new dependency, and the model computes in float32 anyway."""
    with path.open("rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        begin, end = info["data_offsets"]
        f.seek(8 + header_len + begin)
        raw = f.read(end - begin)
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32).reshape(info["shape"])


def read_tensors(path: Path, header: dict[str, dict], names) -> dict[str, np.ndarray]:
    # the named tensors of one file as float32: bfloat16 widened by hand, the others through
    # the library (float16 / float32 / float64, as for GPT-2)
    bf16 = [name for name in names if header[name]["dtype"] == "BF16"]
    out = {name: read_bfloat16(path, header[name]) for name in bf16}
    rest = [name for name in names if name not in out]
    try:
        with safetensors.safe_open(path, framework="np") as f:
            out.update({name: f.get_tensor(name).astype(np.float32) for name in rest})
    except (SafetensorError, OSError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path} cannot be read by safetensors: {err}") from None
    return out


def read_llama_config(directory: Path) -> LlamaConfig:
    path = directory / "config.json"
    d = read_json_object(path)
    arch = d.get("model_type")
    if arch not in LLAMA_TYPES:
        raise CheckpointError(
            f"{path}: model_type {arch!r} is not of the Llama family ({', '.join(LLAMA_TYPES)})"
        )
    try:  # LlamaConfig refuses, by name, what the code does not implement (sliding windows, ...)
        return LlamaConfig.from_hf_dict(d)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: {err}") from None


def shard_headers(directory: Path) -> dict[Path, dict[str, dict]]:
    """{weights file: its checked header}: model.safetensors, or every shard an index
    names; each tensor the index lists must be in the shard it names, and no other."""
    single, index = directory / SINGLE_FILE, directory / INDEX_FILE
    if single.is_file():
        return {single: read_header(single, bfloat16=True)}
    if not index.is_file():
        bins = sorted(p.name for p in directory.glob("*.bin"))
        hint = f" (found {bins}: pickled weights are never loaded; convert to safetensors)"
        message = f"neither {SINGLE_FILE} nor {INDEX_FILE} found in {directory}"
        raise CheckpointError(message + (hint if bins else ""))
    weight_map = read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(v, str) and v == Path(v).name and v not in ("", ".", "..")
        for v in weight_map.values()
    ):
        raise CheckpointError(
            f'{index}: "weight_map" must map each tensor name to a file name in {directory}'
        )
    headers = {}
    for shard in sorted(set(weight_map.values())):
        if not (directory / shard).is_file():
            listed = sum(v == shard for v in weight_map.values())
            raise CheckpointError(
                f"{index} lists shard {shard!r} ({listed} tensors), which is not in {directory}"
            )
        headers[directory / shard] = read_header(directory / shard, bfloat16=True)
    for path, header in headers.items():
        for name in header:
            if weight_map.get(name) != path.name:
                raise CheckpointError(
                    f"{path} holds tensor {name!r}, which {index.name} places in "
                    f"{weight_map.get(name)!r}"
                )
    for name, shard in weight_map.items():
        if name not in headers[directory / shard]:
            raise CheckpointError(f"{index.name} places tensor {name!r} in {shard}, which lacks it")
    return headers


def check_llama_shapes(cfg: LlamaConfig, shapes: dict[str, tuple], source: str) -> None:
    # as `check_against_config`: blocks counted before the table of shapes is built
    blocks = {int(m.group(1)) for name in shapes if (m := LLAMA_BLOCK_NAME.match(name))}
    if len(blocks) != cfg.n_layer:
        raise CheckpointError(
            f"{source}: config.json says num_hidden_layers={cfg.n_layer}, the files hold "
            f"{len(blocks)} decoder layers"
        )
    expected = expected_llama_param_shapes(cfg)
    # a tied model's output layer is its embedding: a file may still store it (checked equal)
    optional = {LM_HEAD: expected[EMBEDDING]} if LM_HEAD not in expected else {}
    missing = sorted(set(expected) - set(shapes))
    if missing:
        raise CheckpointError(f"{source}: tensors missing: {missing[:5]} ({len(missing)} in all)")
    for name, shape in {**expected, **optional}.items():
        if name in shapes and tuple(shapes[name]) != tuple(shape):
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {list(shapes[name])}, config.json "
                f"implies {list(shape)}"
            )
    unknown = sorted(set(shapes) - set(expected) - set(optional))
    if unknown:
        raise CheckpointError(
            f"{source}: unexpected tensors {unknown[:5]} ({len(unknown)} in all) that "
            f"{type(cfg).__name__} has no place for"
        )


def read_llama(directory: str | Path) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """A Llama-family folder (config.json + model.safetensors or a sharded index) ->
    (config, {checkpoint key: float32 array}), keys as the file names them.

    The order is load_gpt2's: config, headers, config against headers, and only then the
    bytes, so a bad checkpoint is refused before its claims are allocated."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {directory}")
    cfg = read_llama_config(directory)
    headers = shard_headers(directory)
    source = str(next(iter(headers)) if len(headers) == 1 else directory / INDEX_FILE)
    kept = {
        path: [name for name in header if not name.endswith(LLAMA_IGNORED_SUFFIXES)]
        for path, header in headers.items()
    }
    shapes = {name: tuple(headers[p][name]["shape"]) for p, names in kept.items() for name in names}
    check_llama_shapes(cfg, shapes, source)
    params = {}
    for path, names in kept.items():
        params.update(read_tensors(path, headers[path], names))
    check_finite_weights(params, source)
    if LM_HEAD in params and LM_HEAD not in expected_llama_param_shapes(cfg):
        if not np.array_equal(params.pop(LM_HEAD), params[EMBEDDING]):
            raise CheckpointError(
                f"{source}: config.json ties the output layer to the embedding, but "
                f"{LM_HEAD} differs from {EMBEDDING}"
            )
    return cfg, params


def load_llama(directory: str | Path) -> Llama:
    """A Llama-family checkpoint folder (llama, qwen2, mistral) as a `Llama`."""
    cfg, params = read_llama(directory)
    return Llama(cfg, params)


def load_model(directory: str | Path) -> GPT | Llama:
    """Any checkpoint folder this project reads: GPT-2 or the Llama family, by config.json's
    model_type."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {directory}")
    arch = read_json_object(directory / "config.json").get("model_type")
    if arch == "gpt2":
        return load_gpt2(directory)
    if arch in LLAMA_TYPES:
        return load_llama(directory)
    raise CheckpointError(
        f"{directory / 'config.json'}: model_type {arch!r} is not supported "
        f"(gpt2, {', '.join(LLAMA_TYPES)})"
    )


# ------------------------------------------------------------------ an EAGLE drafter's folder


def read_eagle(folder: str | Path, n_layer: int) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
    """The trained drafter in `folder` (models/eagle/): its parameters from eagle.safetensors
    (float16 or float32, as float32) and its "feature_layers" from metadata.json, both
    written by `python -m specdec.training.train_eagle`; shapes are checked by the drafter."""
    folder = Path(folder)
    for name in EAGLE_FILES:
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"no trained EAGLE drafter in {folder}: {name} is missing; `{TRAIN_EAGLE}` "
                f"trains one and writes {' and '.join(EAGLE_FILES)} there"
            )
    layers = read_json_object(folder / EAGLE_FILES[1]).get("feature_layers")
    if not isinstance(layers, list):
        raise CheckpointError(
            f'{folder / EAGLE_FILES[1]} must name the drafter\'s "feature_layers" as a list of '
            f"block counts, e.g. [{n_layer}], got {layers!r}"
        )
    return read_safetensors(folder / EAGLE_FILES[0]), tuple(layers)


def load_eagle(folder: str | Path, target: GPT, drafter=EagleDrafter):
    """The trained drafter in `folder` as a `drafter` (the reference's EagleDrafter, or the
    GPU twin's: gpu/weights.py) for `target`; a folder made for another target is refused."""
    params, layers = read_eagle(folder, target.config.n_layer)
    try:
        return drafter(target, params, layers)
    except (TypeError, ValueError) as err:
        raise CheckpointError(
            f"{folder} does not hold an EAGLE drafter for this target: {err}"
        ) from None
