"""Train the self-drafting parts on the frozen bundled target: exit heads and extra heads.

    python -m specdec.training.train_heads --out models/self_draft
    python -m specdec.training.train_heads --target DIR --out DIR2 --exit-layers 8,16

--target may be any checkpoint folder reference/weights.py reads: GPT-2, or the Llama family
(llama, qwen2, mistral: a Hugging Face folder, or one of this project's). For a Llama-family
target the exit norm is an RMSNorm ("exit.norm.weight", from its model.norm; no bias), the
output layer its lm_head (or the tied embedding), the corpus its own tokens (its
tokenizer.json), and its states come from the NumPy reference (llama_states.py); the rest
below is the same.

* Exit head at layer L' (reference/early_exit.py): a LayerNorm (initialised from the
  target's ln_f) after a residual adapter x + x W + b (W = 0, b = 0 at the start), read by
  the tied embedding. Trained to match the target's own distribution at every position:
  loss = KL(p || q_exit), with p the target's softmax at T = 1.
* Extra heads (reference/heads.py): head i maps the final hidden state h_t to
  z = h_t + SiLU(h_t W_i + b_i), read by the tied embedding, and is trained to match the
  target's distribution for the token i + 2 places after t: KL(p_{t+1+i} || q_i(h_t)).
  W_i = 0 at the start, so every head starts as the target's own output layer.

Distilling p (rather than fitting the text's next tokens) is what acceptance rewards:
verify accepts x with probability min(1, p(x)/q(x)), so alpha = sum_x min(p(x), q(x)).
The target never changes: its hidden states and probabilities are computed once, with
torch, on windows of the training split, then only the small heads are optimised.
Weights ship in float16 next to the pair; metadata.json records how they were made.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from reference.llama import Llama
from reference.weights import load_model, write_safetensors
from specdec.training.corpus import load_corpus, sample_windows
from specdec.training.llama_states import (
    check_state_room,
    corpus_tokens,
    llama_states,
    output_matrix,
    rms_norm,
)
from specdec.training.train_pair import load_exported

TARGET_DIR = Path(__file__).resolve().parents[2] / "models" / "target"


@torch.no_grad()
def target_states(model, windows: np.ndarray, layers: list[int], batch: int = 8) -> dict:
    # windows [W, T] -> {"x{L'}": [W, T, C] residual after L' blocks, "h": [W, T, C] final
    # hidden (after ln_f), "logp": [W, T, V] the target's log-probabilities at T = 1}
    out = {f"x{L}": [] for L in layers} | {"h": [], "logp": []}
    for i in range(0, len(windows), batch):
        x = torch.from_numpy(windows[i : i + batch].astype(np.int64))
        r = model(x, output_hidden_states=True)
        for L in layers:
            out[f"x{L}"].append(r.hidden_states[L])
        out["h"].append(r.hidden_states[-1])  # HF applies ln_f before the last entry
        out["logp"].append(F.log_softmax(r.logits.float(), -1))
    return {name: torch.cat(parts) for name, parts in out.items()}


def kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    # KL(p || q) per row, averaged: sum_x p(x) (log p(x) - log q(x))
    return (logp.exp() * (logp - logq)).sum(-1).mean()


def overlap(logp: torch.Tensor, logq: torch.Tensor) -> tuple[float, float]:
    # -> (alpha = mean sum_x min(p, q), greedy agreement = mean [argmax p == argmax q])
    alpha = torch.minimum(logp.exp(), logq.exp()).sum(-1).mean().item()
    agree = (logp.argmax(-1) == logq.argmax(-1)).float().mean().item()
    return alpha, agree


class ExitHead(torch.nn.Module):
    def __init__(self, ln_f: torch.nn.LayerNorm, wte: torch.Tensor) -> None:
        super().__init__()
        C = wte.shape[1]
        self.ln = torch.nn.LayerNorm(C, eps=ln_f.eps)
        self.ln.load_state_dict(ln_f.state_dict())
        self.proj = torch.nn.Linear(C, C)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)
        self.register_buffer("wte", wte)

    def forward(self, x):  # [N, C] -> log q [N, V]
        return F.log_softmax(self.ln(x + self.proj(x)) @ self.wte.T, -1)

    def arrays(self) -> dict[str, np.ndarray]:
        # the names reference/early_exit.py reads; Linear stores W^T, the reference x @ W
        return {
            "exit.ln.weight": self.ln.weight,
            "exit.ln.bias": self.ln.bias,
            "exit.proj.weight": self.proj.weight.T,
            "exit.proj.bias": self.proj.bias,
        }


class LlamaExitHead(torch.nn.Module):
    # a Llama-family target's exit: RMSNorm (gain initialised from its model.norm, the
    # target's eps) after the same residual adapter, read by its output layer
    def __init__(self, norm: torch.Tensor, eps: float, output: torch.Tensor) -> None:
        super().__init__()
        C = output.shape[1]
        self.norm, self.eps = torch.nn.Parameter(norm.clone()), eps
        self.proj = torch.nn.Linear(C, C)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)
        self.register_buffer("output", output)

    def forward(self, x):  # [N, C] -> log q [N, V]
        return F.log_softmax(rms_norm(x + self.proj(x), self.norm, self.eps) @ self.output.T, -1)

    def arrays(self) -> dict[str, np.ndarray]:
        # the names reference/early_exit.py reads for a Llama-family target (EXIT_RMS_NORM)
        return {
            "exit.norm.weight": self.norm,
            "exit.proj.weight": self.proj.weight.T,
            "exit.proj.bias": self.proj.bias,
        }


class ExtraHead(torch.nn.Module):
    def __init__(self, wte: torch.Tensor) -> None:
        super().__init__()
        C = wte.shape[1]
        self.proj = torch.nn.Linear(C, C)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)
        self.register_buffer("wte", wte)

    def forward(self, h):  # [N, C] -> log q [N, V]:  z = h + SiLU(h W + b)
        return F.log_softmax((h + F.silu(self.proj(h))) @ self.wte.T, -1)


def fit(module: torch.nn.Module, inputs, targets, steps: int, batch: int, lr: float, seed: int):
    # inputs [N, C], targets log p [N, V] -> the module trained on KL(p || q); returns the
    # final loss
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(
        [p for p in module.parameters() if p.requires_grad], lr=lr, weight_decay=0.0
    )
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        idx = torch.randint(0, len(inputs), (batch,), generator=gen)
        for group in opt.param_groups:  # cosine decay to 10 %
            group["lr"] = lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * step / steps)))
        loss = kl(targets[idx], module(inputs[idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


def pairs_for_head(states: dict, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    # head i reads h at t and is judged against the target's row at t + 1 + i
    h, logp = states["h"], states["logp"]
    T = h.shape[1]
    C, V = h.shape[-1], logp.shape[-1]
    return h[:, : T - 1 - i].reshape(-1, C), logp[:, 1 + i :].reshape(-1, V)


def relative(path: Path) -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def to_numpy(arrays: dict) -> dict[str, np.ndarray]:
    return {name: a.detach().float().numpy().astype(np.float16) for name, a in arrays.items()}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("models/self_draft"),
        help="output folder (default: %(default)s)",
    )
    ap.add_argument(
        "--target",
        type=Path,
        default=TARGET_DIR,
        help="the frozen target (default: the bundled one)",
    )
    ap.add_argument(
        "--exit-layers",
        default="2,3",
        help="exit layers L' to train heads for (default: %(default)s)",
    )
    ap.add_argument(
        "--heads", type=int, default=4, help="extra heads to train (default: %(default)s)"
    )
    ap.add_argument(
        "--windows", type=int, default=256, help="training windows (default: %(default)s)"
    )
    ap.add_argument(
        "--length", type=int, default=256, help="tokens per window (default: %(default)s)"
    )
    ap.add_argument(
        "--steps", type=int, default=1500, help="optimiser steps per head (default: %(default)s)"
    )
    ap.add_argument(
        "--batch", type=int, default=1024, help="positions per step (default: %(default)s)"
    )
    ap.add_argument(
        "--lr", type=float, default=2e-3, help="peak learning rate (default: %(default)s)"
    )
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=1234, help="(default: %(default)s)")
    return ap.parse_args(argv)


def gpt2_parts(args, layers):
    # the bundled target's family: its states from Hugging Face's GPT-2 (the float16 export
    # as float32), the exit a LayerNorm, the output layer the tied embedding
    model = load_exported(args.target)
    for p in model.parameters():
        p.requires_grad_(False)
    wte, ln_f = model.transformer.wte.weight.detach(), model.transformer.ln_f
    corpus = load_corpus()
    rng = np.random.default_rng(args.seed)
    train = sample_windows(corpus.train, args.windows, args.length - 1, rng)  # [W, T]
    held = sample_windows(corpus.held_out, max(16, args.windows // 8), args.length - 1, rng)
    states = target_states(model, train, layers), target_states(model, held, layers)
    return states, lambda: ExitHead(ln_f, wte), wte, (train.size, held.size)


def llama_parts(args, target: Llama, layers):
    # a Llama-family target: its states from the NumPy reference on its own tokens of the
    # corpus, the exit an RMSNorm, the output layer lm_head (or the tied embedding)
    n_held = max(16, args.windows // 8)
    check_state_room(args.windows + n_held, args.length, target, layers)
    train_stream, held_stream = corpus_tokens(args.target, target.n_vocab)
    rng = np.random.default_rng(args.seed)
    train = sample_windows(train_stream, args.windows, args.length - 1, rng)
    held = sample_windows(held_stream, n_held, args.length - 1, rng)
    states = tuple(exit_inputs(llama_states(target, w, layers), layers) for w in (train, held))
    norm = torch.from_numpy(np.asarray(target.params["model.norm.weight"], np.float32)).clone()
    output, eps = output_matrix(target), target.config.rms_norm_eps
    return states, lambda: LlamaExitHead(norm, eps, output), output, (train.size, held.size)


def exit_inputs(states: dict, layers) -> dict:
    # llama_states' names -> target_states': "x{L'}" the residual after L' blocks, "h", "logp"
    return {f"x{L}": states[f"f{L}"] for L in layers} | {"h": states["h"], "logp": states["logp"]}


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    layers = [int(s) for s in args.exit_layers.split(",") if s]
    target = load_model(args.target)
    n_layer = target.config.n_layer
    if any(not 1 <= L < n_layer for L in layers):
        raise ValueError(
            f"--exit-layers {args.exit_layers}: each exit layer L' must be 1..{n_layer - 1} "
            f"(the target has {n_layer} blocks)"
        )
    if isinstance(target, Llama):
        parts = llama_parts(args, target, layers)
    else:
        parts = gpt2_parts(args, layers)
    (states, held_states), make_exit, wte, (train_positions, held_positions) = parts
    seconds = time.perf_counter() - started
    print(
        f"target states: {train_positions} + {held_positions} held-out positions, {seconds:.0f} s"
    )

    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"exit_heads": {}, "extra_heads": {}}
    C, V = wte.shape[1], wte.shape[0]
    for L in layers:
        head = make_exit()
        untrained = overlap(
            held_states["logp"].reshape(-1, V), head(held_states[f"x{L}"].reshape(-1, C))
        )
        loss = fit(
            head,
            states[f"x{L}"].reshape(-1, C),
            states["logp"].reshape(-1, V),
            args.steps,
            args.batch,
            args.lr,
            args.seed + L,
        )
        with torch.no_grad():
            alpha, agree = overlap(
                held_states["logp"].reshape(-1, V), head(held_states[f"x{L}"].reshape(-1, C))
            )
        write_safetensors(args.out / f"exit-{L}.safetensors", to_numpy(head.arrays()))
        report["exit_heads"][L] = {
            "final_kl": round(loss, 4),
            "held_out_alpha_T1": round(alpha, 4),
            "held_out_greedy_agreement": round(agree, 4),
            "untrained_alpha_T1": round(untrained[0], 4),
            "untrained_greedy_agreement": round(untrained[1], 4),
        }
        print(f"exit at L'={L}: {report['exit_heads'][L]}")

    arrays = {}
    for i in range(args.heads):
        head = ExtraHead(wte)
        loss = fit(
            head, *pairs_for_head(states, i), args.steps, args.batch, args.lr, args.seed + 100 + i
        )
        with torch.no_grad():
            h, logp = pairs_for_head(held_states, i)
            alpha, agree = overlap(logp, head(h))
        arrays |= {f"heads.{i}.weight": head.proj.weight.T, f"heads.{i}.bias": head.proj.bias}
        report["extra_heads"][i] = {
            "predicts": f"{i + 2} places after h",
            "final_kl": round(loss, 4),
            "held_out_alpha_T1": round(alpha, 4),
            "held_out_greedy_agreement": round(agree, 4),
        }
        print(f"head {i}: {report['extra_heads'][i]}")
    write_safetensors(args.out / "heads.safetensors", to_numpy(arrays))

    metadata = {
        "what": "self-drafting parts of the target: exit heads (early exit) and extra heads",
        "target": str(args.target.name),
        "target_family": getattr(target.config, "model_type", "gpt2"),
        "command": "python -m specdec.training.train_heads "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "hyperparameters": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
        },
        "train_positions": int(train_positions),
        "held_out_positions": int(held_positions),
        "minutes": round((time.perf_counter() - started) / 60, 2),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "weights_dtype": "float16",
        **report,
    }
    (args.out / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    print(f"wrote {args.out} in {metadata['minutes']} min")


if __name__ == "__main__":
    main()
