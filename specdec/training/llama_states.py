"""What the drafter-training scripts read from a frozen Llama-family target (train_heads,
train_eagle): its training text as its own token ids, and its states on windows of it.

A GPT-2 target is read by torch copies of its forward (train_eagle.py) or by Hugging Face's
GPT-2 class (train_heads.py). A Llama-family target is read by the NumPy reference itself
(reference/llama.py, checked against transformers' LlamaForCausalLM and Qwen2ForCausalLM in
tests/interop): its states are then exactly the ones the NumPy drafters are handed at
inference, with no second implementation of RoPE, GQA or SwiGLU to keep equal. They are
computed once, before any training step, so the speed of the forward matters little.

    features  f_l(t)  the residual stream after l blocks (l = n_layer: before model.norm)
    h(t)              model.norm(f_L(t)): what the output layer (and the extra heads) read
    log p(t)          the target's log-probabilities at T = 1, [V] per position

The log-probabilities take W x T x V float32 numbers: with a real vocabulary (49 152 for
SmolLM2, 151 936 for Qwen2.5) that is what limits --windows and --length (`state_bytes`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from reference.llama import Llama
from specdec.text import ByteTokenizer, tokenizer_of
from specdec.training.corpus import is_held_out, join_documents, list_sources, stdlib_dir

STATE_LIMIT_BYTES = 16 * 2**30  # refuse to hold more target states than this in memory


def corpus_tokens(folder: Path, n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
    # -> (train [N], held out [N']) int64 streams: the stdlib corpus (corpus.py, the same
    # files and the same split as for the bundled pair) in the target folder's own tokens:
    # its tokenizer.json when it has one, else bytes (a model trained on this project's byte
    # vocabulary). Documents are joined by the tokenizer's end-of-text id where it has one.
    tokenizer = tokenizer_of(folder)
    root = stdlib_dir()
    train, held = [], []
    for path in list_sources(root):
        (held if is_held_out(path.relative_to(root).as_posix()) else train).append(
            path.read_bytes()
        )
    if isinstance(tokenizer, ByteTokenizer):
        streams = join_documents(train), join_documents(held)
    else:
        streams = tuple(join_tokens(tokenizer, docs) for docs in (train, held))
    streams = tuple(s.astype(np.int64) for s in streams)
    top = max(int(s.max()) for s in streams)
    if top >= n_vocab:
        raise ValueError(
            f"{folder}: its tokenizer gives id {top}, but the model has {n_vocab} tokens; "
            f"the tokenizer.json next to config.json must be the model's own"
        )
    return streams


def join_tokens(tokenizer, documents: list[bytes]) -> np.ndarray:
    # [doc bytes, ...] -> [N] ids: each document's text encoded, then the end-of-text id
    # (none where the tokenizer has none)
    eos = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    pieces = [
        np.concatenate([tokenizer.encode(d.decode("utf-8", "replace")), eos]) for d in documents
    ]
    return np.concatenate(pieces).astype(np.int64)


def state_bytes(windows: int, length: int, target: Llama, layers) -> int:
    # the memory the states of `windows` windows of `length` tokens take (float32)
    cfg = target.config
    return 4 * windows * length * (cfg.n_vocab + (len(layers) + 1) * cfg.n_embd)


def check_state_room(windows: int, length: int, target: Llama, layers) -> None:
    need = state_bytes(windows, length, target, layers)
    if need > STATE_LIMIT_BYTES:
        raise ValueError(
            f"the target's states on {windows} windows of {length} tokens take "
            f"{need / 2**30:.1f} GiB (its vocabulary has {target.n_vocab} tokens); the limit "
            f"is {STATE_LIMIT_BYTES / 2**30:.0f} GiB: lower --windows or --length"
        )


def llama_states(target: Llama, windows: np.ndarray, layers) -> dict[str, torch.Tensor]:
    # windows [W, T] -> {"f{l}": [W, T, C] residual after l blocks for each l in `layers`
    # (the top, pre-norm, when l = n_layer), "h": [W, T, C] after model.norm, "logp":
    # [W, T, V] at T = 1, "tokens": [W, T] int64}, computed by the NumPy reference
    layers = tuple(layers)
    top = target.config.n_layer
    read = layers if layers and layers[-1] == top else (*layers, top)
    C = target.config.n_embd
    out: dict[str, list] = {f"f{l}": [] for l in read} | {"h": [], "logp": []}
    for window in windows:
        feats = target.layer_features(np.asarray(window, np.int64), layers=read)  # [T, L C]
        for j, l in enumerate(read):
            out[f"f{l}"].append(feats[:, j * C : (j + 1) * C])
        h = target.norm(feats[:, -C:], "ln_f")
        logits = target.logits(h).astype(np.float64)
        logits -= logits.max(-1, keepdims=True)
        out["h"].append(h)
        out["logp"].append(logits - np.log(np.exp(logits).sum(-1, keepdims=True)))
    states = {n: torch.from_numpy(np.stack(v).astype(np.float32)) for n, v in out.items()}
    return states | {"tokens": torch.from_numpy(np.asarray(windows, np.int64))}


def output_matrix(target: Llama) -> torch.Tensor:
    # [V, C]: the target's output layer (lm_head, or the tied token embedding), frozen
    name = "model.embed_tokens" if target.config.tie_word_embeddings else "lm_head"
    return torch.from_numpy(np.asarray(target.params[name + ".weight"], np.float32)).clone()


def rms_norm(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    # [..., C] -> [..., C]: reference/llama.py's rms_norm, in float32 whatever autocast does
    x32 = x.float()
    return g * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps))
