"""Train the bundled target/draft pair on the stdlib corpus and export them for `reference/`.

    python -m specdec.training.train_pair --out models --minutes-target 41 --minutes-draft 14

Two phases, each bounded by wall-clock minutes *and* by a step count:

1. target p: a GPT-2 trained with next-byte cross-entropy;
2. draft q: a much smaller GPT-2, loss = w * KL(p || q) + (1 - w) * CE(q) on the same
   training stream; w = 0 (the default) is plain cross-entropy and never runs the target.

Why w = 0 by default: speculative decoding accepts a drafted token with probability
min(1, p(x)/q(x)), so the per-token acceptance is alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q),
and KL(p || q) pulls q straight towards p. But every distillation step also runs the target
(teacher) forward, which costs four draft steps here; under a wall-clock budget the draft then
sees a quarter of the data. Measured on the 2-core machine (3 minutes each, same target):
cross-entropy reached a greedy agreement of 0.654, distillation with w = 0.9 only 0.488.

Checkpoints go to specdec/training/runs/ (git-ignored) every few minutes; `--resume` continues
from them.
Dimension letters: B batch, T sequence length, V vocabulary (257), C embedding width.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import math
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import GPT2Config, GPT2LMHeadModel

from reference.tokenizer import EOS, VOCAB_SIZE
from specdec.training.corpus import Corpus, load_corpus, sample_windows, tile_windows

PHASE_IDS = {"target": 1, "draft": 2}  # mixed into the batch seed so the two phases differ


@dataclass
class PhaseConfig:
    name: str  # "target" or "draft"
    n_layer: int  # transformer blocks
    n_embd: int  # C, residual stream width
    n_head: int  # attention heads (C // n_head = head size)
    n_positions: int  # longest context the model supports (learned position table)
    batch: int  # B, windows per optimiser step
    seq: int  # T, tokens per window; == n_positions so every position embedding is trained
    lr: float  # peak learning rate (AdamW)
    min_lr_frac: float  # the cosine decays to lr * min_lr_frac
    warmup_steps: int  # linear warm-up from 0
    weight_decay: float  # on matrices only, not on biases / LayerNorm gains
    max_steps: int  # hard step bound
    minutes: float  # wall-clock bound; whichever bound comes first ends the phase
    kl_weight: float  # draft only: w in w*KL(p||q) + (1-w)*CE; unused for the target


# ---------------------------------------------------------------------------- model


def gpt2_config(cfg: PhaseConfig) -> GPT2Config:
    """A GPT-2 config the NumPy reference can load: gelu_new, tied embeddings, no dropout."""
    return GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=cfg.n_positions,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        activation_function="gelu_new",
        resid_pdrop=0.0,  # why no dropout: < 1 epoch of data, nothing to regularise against,
        embd_pdrop=0.0,  # and the exported config must describe a deterministic forward
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=EOS,
        eos_token_id=EOS,
    )


def make_model(cfg: PhaseConfig, seed: int) -> GPT2LMHeadModel:
    # HF initialises from torch's global generator; seeding it right here, at the edge,
    # is the only way to make that initialisation reproducible.
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(gpt2_config(cfg))
    model.config._attn_implementation = "sdpa"
    return model


def count_params(model: torch.nn.Module) -> int:
    """Unique parameters (the tied embedding / LM head counted once)."""
    return sum(p.numel() for p in model.parameters())


def logits_of(model: GPT2LMHeadModel, x: torch.Tensor, bf16: bool) -> torch.Tensor:
    # [B, T] ids -> [B, T, V] float32 logits
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=x).logits
    return logits.float()


# ---------------------------------------------------------------------------- losses


def next_token_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # [B, T, V], [B, T] -> scalar, mean nats per token
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def distillation_loss(
    draft_logits: torch.Tensor, target_logits: torch.Tensor, y: torch.Tensor, kl_weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # [B, T, V], [B, T, V], [B, T] -> (loss, KL) scalars
    # KL(p || q) = sum_x p(x) (log p(x) - log q(x)), averaged over the B*T positions
    log_q = F.log_softmax(draft_logits, dim=-1)
    log_p = F.log_softmax(target_logits, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1).mean()
    loss = kl_weight * kl
    if kl_weight < 1.0:
        loss = loss + (1.0 - kl_weight) * next_token_loss(draft_logits, y)
    return loss, kl


# ---------------------------------------------------------------------------- schedule


def budget_fraction(step: int, elapsed_s: float, cfg: PhaseConfig) -> float:
    """How much of the phase's budget is spent: steps or minutes, whichever runs out first."""
    return max(step / cfg.max_steps, elapsed_s / (60.0 * cfg.minutes))


def learning_rate(step: int, fraction: float, cfg: PhaseConfig) -> float:
    # lr = peak * warmup(step) * (m + (1 - m) * (1 + cos(pi * fraction)) / 2)
    # Why the cosine runs on the budget fraction, not on steps: the phase is bounded by
    # wall-clock time, and the decay must reach its floor when the time runs out.
    warmup = min(1.0, (step + 1) / cfg.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(fraction, 1.0)))
    return cfg.lr * warmup * (cfg.min_lr_frac + (1.0 - cfg.min_lr_frac) * cosine)


def make_optimizer(model: torch.nn.Module, cfg: PhaseConfig) -> torch.optim.AdamW:
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": matrices, "weight_decay": cfg.weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)


def batch_at(stream: np.ndarray, cfg: PhaseConfig, step: int, seed: int) -> tuple:
    # -> x [B, T], y [B, T] int64
    # A fresh generator per (seed, phase, step): batches are reproducible and a resumed run
    # sees exactly the batches it would have seen, with no generator state to checkpoint.
    rng = np.random.default_rng([seed, PHASE_IDS[cfg.name], step])
    windows = torch.from_numpy(sample_windows(stream, cfg.batch, cfg.seq, rng).astype(np.int64))
    return windows[:, :-1], windows[:, 1:]


# ---------------------------------------------------------------------------- bf16 or fp32


def seconds_per_step(step_fn, repeats: int = 3) -> float:
    """Median wall time of a training step (after one warm-up call)."""
    step_fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step_fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure_autocast(model, teacher, stream, cfg: PhaseConfig, seed: int) -> dict:
    """Time a few steps in fp32 and in bf16 autocast on a throw-away copy of the model."""
    import copy

    probe = copy.deepcopy(model)
    optimizer = make_optimizer(probe, cfg)
    x, y = batch_at(stream, cfg, 0, seed)

    def step(bf16: bool):
        loss = phase_loss(probe, teacher, x, y, cfg, bf16)[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    fp32_s = seconds_per_step(lambda: step(False))
    bf16_s = seconds_per_step(lambda: step(True))
    return {"fp32_s_per_step": round(fp32_s, 3), "bf16_s_per_step": round(bf16_s, 3)}


# ---------------------------------------------------------------------------- training


def phase_loss(model, teacher, x, y, cfg: PhaseConfig, bf16: bool) -> tuple:
    # -> (loss to minimise, next-token CE of the model) scalars
    logits = logits_of(model, x, bf16)  # [B, T, V]
    ce = next_token_loss(logits, y)
    if teacher is None or cfg.kl_weight == 0.0:
        return ce, ce  # w = 0: the teacher's logits would be multiplied by zero
    with torch.no_grad():
        target_logits = logits_of(teacher, x, bf16)  # [B, T, V]
    loss, _kl = distillation_loss(logits, target_logits, y, cfg.kl_weight)
    return loss, ce


def save_checkpoint(path: Path, state: dict) -> None:
    """Write atomically, so that a kill in the middle never leaves a broken checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, cfg: PhaseConfig) -> dict | None:
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    # The budget (minutes, max_steps) may change between runs, e.g. to extend training.
    same = {k: v for k, v in asdict(cfg).items() if k not in ("minutes", "max_steps")}
    if {k: v for k, v in state["config"].items() if k not in ("minutes", "max_steps")} != same:
        raise SystemExit(
            f"{path} was written with a different configuration:\n  {state['config']}\n"
            f"now:\n  {asdict(cfg)}\nRerun with the same arguments, or delete it to start afresh."
        )
    return state


def train_phase(
    model: GPT2LMHeadModel,
    teacher: GPT2LMHeadModel | None,
    corpus: Corpus,
    cfg: PhaseConfig,
    args: argparse.Namespace,
) -> dict:
    """Train `model` until the budget is spent; return the record for metadata.json."""
    ckpt_path = Path(args.runs) / f"{cfg.name}.pt"
    state = load_checkpoint(ckpt_path, cfg) if args.resume else None
    optimizer = make_optimizer(model, cfg)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
        print(f"[{cfg.name}] resumed at step {state['step']} ({state['elapsed_s'] / 60:.1f} min)")
        if state["done"] and budget_fraction(state["step"], state["elapsed_s"], cfg) >= 1.0:
            return state["record"]  # finished, and the budget was not extended
        step, elapsed_s, bf16, timing = (
            state["step"],
            state["elapsed_s"],
            state["bf16"],
            state["timing"],
        )
        loss_ema = state["loss_ema"]
    else:
        step, elapsed_s, loss_ema = 0, 0.0, None
        timing = measure_autocast(model, teacher, corpus.train, cfg, args.seed)
        bf16 = {
            "auto": timing["bf16_s_per_step"] < timing["fp32_s_per_step"],
            "bf16": True,
            "fp32": False,
        }[args.autocast]
        print(f"[{cfg.name}] step time {timing} -> {'bf16 autocast' if bf16 else 'fp32'}")

    def checkpoint(done: bool, record: dict | None = None) -> None:
        save_checkpoint(
            ckpt_path,
            {
                "config": asdict(cfg),
                "model": model.state_dict(),
                "optim": optimizer.state_dict(),
                "step": step,
                "elapsed_s": elapsed_s,
                "bf16": bf16,
                "timing": timing,
                "loss_ema": loss_ema,
                "done": done,
                "record": record,
            },
        )

    model.train()
    if teacher is not None:
        teacher.eval()
    tokens_per_step = cfg.batch * cfg.seq
    bar = tqdm(
        total=cfg.max_steps,
        initial=step,
        desc=cfg.name,
        mininterval=20,
        dynamic_ncols=False,
        ncols=110,
    )
    start = time.perf_counter() - elapsed_s  # elapsed time carries over across a resume
    last_checkpoint = time.perf_counter()
    while budget_fraction(step, elapsed_s, cfg) < 1.0:
        lr = learning_rate(step, budget_fraction(step, elapsed_s, cfg), cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batch_at(corpus.train, cfg, step, args.seed)
        loss, ce = phase_loss(model, teacher, x, y, cfg, bf16)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

        step += 1
        elapsed_s = time.perf_counter() - start
        bpb = ce.item() / math.log(2)
        loss_ema = bpb if loss_ema is None else 0.98 * loss_ema + 0.02 * bpb
        bar.update(1)
        bar.set_postfix(
            bpb=f"{loss_ema:.3f}", lr=f"{lr:.1e}", min=f"{elapsed_s / 60:.1f}", refresh=False
        )
        if time.perf_counter() - last_checkpoint > 60 * args.checkpoint_minutes:
            checkpoint(done=False)
            last_checkpoint = time.perf_counter()
            print(
                f"\n[{cfg.name}] step {step}  train bpb (ema) {loss_ema:.3f}  "
                f"{elapsed_s / 60:.1f} min  checkpoint written",
                flush=True,
            )
    bar.close()

    record = {
        "steps": step,
        "max_steps": cfg.max_steps,
        "tokens_seen": step * tokens_per_step,
        "epochs": round(step * tokens_per_step / corpus.train.size, 3),
        "train_minutes": round(elapsed_s / 60, 2),
        "train_bpb_ema": round(loss_ema, 4),
        "precision": "bf16 autocast (fp32 master weights)" if bf16 else "fp32",
        "step_timing_probe": timing,
        "hyperparameters": asdict(cfg),
    }
    checkpoint(done=True, record=record)
    print(
        f"[{cfg.name}] done: {step} steps, {record['tokens_seen']:,} tokens "
        f"({record['epochs']} epochs), {record['train_minutes']} min",
        flush=True,
    )
    return record


# ---------------------------------------------------------------------------- evaluation


@torch.no_grad()
def held_out_bits_per_byte(
    model: GPT2LMHeadModel, held_out: np.ndarray, seq: int, max_windows: int | None, batch: int = 8
) -> float:
    """Mean -log2 q(next token) over the held-out stream, cut into consecutive windows.

    Every token is one byte, except the rare EOS document separators (one per file), which are
    counted like bytes.
    """
    model.eval()
    windows = torch.from_numpy(tile_windows(held_out, seq, max_windows).astype(np.int64))
    total_nats, count = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i : i + batch]  # [b, T+1]
        logits = logits_of(model, w[:, :-1], bf16=False)  # [b, T, V]
        total_nats += F.cross_entropy(
            logits.reshape(-1, VOCAB_SIZE), w[:, 1:].reshape(-1), reduction="sum"
        ).item()
        count += w[:, 1:].numel()
    return total_nats / count / math.log(2)


@torch.no_grad()
def pair_agreement(
    target: GPT2LMHeadModel,
    draft: GPT2LMHeadModel,
    held_out: np.ndarray,
    n_snippets: int = 20,
    length: int = 256,
    seed: int = 0,
) -> dict:
    """Teacher-forced comparison of p and q on held-out snippets, as acceptance proxies.

    greedy_agreement: argmax p == argmax q (the acceptance rate of greedy speculative decoding)
    expected_alpha:   mean over positions of sum_x min(p(x), q(x)), the acceptance probability
                      of sampling at temperature 1
    """
    target.eval()
    draft.eval()
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(sample_windows(held_out, n_snippets, length, rng)[:, :-1].astype(np.int64))
    p = F.softmax(logits_of(target, x, bf16=False), dim=-1)  # [S, T, V]
    q = F.softmax(logits_of(draft, x, bf16=False), dim=-1)  # [S, T, V]
    agree = (p.argmax(-1) == q.argmax(-1)).float().mean().item()
    alpha = torch.minimum(p, q).sum(-1).mean().item()
    return {
        "snippets": n_snippets,
        "snippet_tokens": length,
        "greedy_agreement": round(agree, 4),
        "expected_alpha_temperature_1": round(alpha, 4),
    }


# ---------------------------------------------------------------------------- export


def export_model(model: GPT2LMHeadModel, out_dir: Path) -> None:
    """config.json + model.safetensors in float16 (what the NumPy reference loads)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    half = GPT2LMHeadModel(model.config)
    half.load_state_dict(model.state_dict())
    half = half.to(torch.float16)
    kwargs = {}
    if "safe_serialization" in inspect.signature(half.save_pretrained).parameters:
        kwargs["safe_serialization"] = True  # transformers < 5; v5 writes only safetensors
    half.save_pretrained(out_dir, **kwargs)
    (out_dir / "generation_config.json").unlink(missing_ok=True)  # not used by the reference


def load_exported(out_dir: Path) -> GPT2LMHeadModel:
    """Reload the float16 export as float32: evaluate exactly the weights that ship."""
    model = GPT2LMHeadModel.from_pretrained(out_dir).to(torch.float32)
    model.config._attn_implementation = "sdpa"
    return model.eval()


def write_metadata(out_dir: Path, metadata: dict) -> None:
    (out_dir / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--out", default="models", help="export directory (target/ and draft/)")
    ap.add_argument("--runs", default="specdec/training/runs", help="checkpoint directory")
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoints in --runs")
    ap.add_argument("--minutes-target", type=float, default=41.0)
    ap.add_argument("--minutes-draft", type=float, default=14.0)
    ap.add_argument("--max-steps-target", type=int, default=100_000)
    ap.add_argument("--max-steps-draft", type=int, default=100_000)
    ap.add_argument("--target-layers", type=int, default=6)
    ap.add_argument("--target-embd", type=int, default=384)
    ap.add_argument("--target-heads", type=int, default=6)
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--draft-embd", type=int, default=128)
    ap.add_argument("--draft-heads", type=int, default=2)
    ap.add_argument("--n-positions", type=int, default=512)
    ap.add_argument("--batch-target", type=int, default=8)
    ap.add_argument("--batch-draft", type=int, default=16)
    ap.add_argument("--lr-target", type=float, default=1e-3)
    ap.add_argument("--lr-draft", type=float, default=3e-3)
    ap.add_argument(
        "--kl-weight",
        type=float,
        default=0.0,
        help="w in w*KL(p||q) + (1-w)*CE for the draft; 0 skips the teacher's forward pass",
    )
    ap.add_argument(
        "--autocast",
        choices=["auto", "bf16", "fp32"],
        default="auto",
        help="auto: time a few steps of each and keep the faster",
    )
    ap.add_argument("--checkpoint-minutes", type=float, default=4.0)
    ap.add_argument(
        "--eval-windows",
        type=int,
        default=None,
        help="cap on held-out windows for bits per byte (default: all)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    return ap.parse_args(argv)


def phase_configs(args: argparse.Namespace) -> tuple[PhaseConfig, PhaseConfig]:
    common = dict(
        n_positions=args.n_positions, seq=args.n_positions, min_lr_frac=0.1, weight_decay=0.1
    )
    target = PhaseConfig(
        name="target",
        n_layer=args.target_layers,
        n_embd=args.target_embd,
        n_head=args.target_heads,
        batch=args.batch_target,
        lr=args.lr_target,
        warmup_steps=100,
        max_steps=args.max_steps_target,
        minutes=args.minutes_target,
        kl_weight=0.0,
        **common,
    )
    draft = PhaseConfig(
        name="draft",
        n_layer=args.draft_layers,
        n_embd=args.draft_embd,
        n_head=args.draft_heads,
        batch=args.batch_draft,
        lr=args.lr_draft,
        warmup_steps=50,
        max_steps=args.max_steps_draft,
        minutes=args.minutes_draft,
        kl_weight=args.kl_weight,
        **common,
    )
    return target, draft


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    command = shlex.join(
        ["python", "-m", "specdec.training.train_pair", *(sys.argv[1:] if argv is None else argv)]
    )
    out = Path(args.out)
    corpus = load_corpus()
    print(f"corpus: {corpus.describe()}", flush=True)
    target_cfg, draft_cfg = phase_configs(args)

    # Phase 1: the target p, plain next-byte cross-entropy.
    target = make_model(target_cfg, args.seed)
    print(f"[target] {count_params(target):,} parameters", flush=True)
    target_record = train_phase(target, None, corpus, target_cfg, args)
    export_model(target, out / "target")

    # Phase 2: the draft q. With w > 0 it is distilled from the *exported* target, so that q
    # is pulled towards exactly the p (float16 weights) that speculative decoding verifies with.
    teacher = None
    if draft_cfg.kl_weight > 0.0:
        teacher = load_exported(out / "target")
        for param in teacher.parameters():
            param.requires_grad_(False)
    draft = make_model(draft_cfg, args.seed + 1)
    print(f"[draft] {count_params(draft):,} parameters", flush=True)
    draft_record = train_phase(draft, teacher, corpus, draft_cfg, args)
    export_model(draft, out / "draft")

    # Evaluate the shipped float16 weights (reloaded as float32), not the training copies.
    print("evaluating held-out bits per byte ...", flush=True)
    target_fp, draft_fp = load_exported(out / "target"), load_exported(out / "draft")
    bpb = {
        name: round(
            held_out_bits_per_byte(m, corpus.held_out, args.n_positions, args.eval_windows), 4
        )
        for name, m in (("target", target_fp), ("draft", draft_fp))
    }
    agreement = pair_agreement(
        target_fp,
        draft_fp,
        corpus.held_out,
        length=min(256, args.n_positions),  # snippets must fit the position embeddings
        seed=args.seed,
    )

    common = {
        "corpus": corpus.describe(),
        "command": command,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "seed": args.seed,
        "weights_dtype": "float16",
        "held_out_bits_per_byte": bpb,
        "pair_agreement_held_out": agreement,
    }
    for name, model, record in (
        ("target", target_fp, target_record),
        ("draft", draft_fp, draft_record),
    ):
        write_metadata(
            out / name,
            {
                "role": "target (p)"
                if name == "target"
                else (
                    f"draft (q), loss {draft_cfg.kl_weight:g}*KL(p||q) + "
                    f"{1 - draft_cfg.kl_weight:g}*CE (p = ../target)"
                ),
                "parameters": count_params(model),
                "architecture": {
                    k: getattr(model.config, k)
                    for k in (
                        "n_layer",
                        "n_embd",
                        "n_head",
                        "n_positions",
                        "vocab_size",
                        "activation_function",
                        "tie_word_embeddings",
                    )
                },
                **record,
                "bits_per_byte_held_out": bpb[name],
                **common,
            },
        )
    print(f"held-out bits per byte: target {bpb['target']:.4f}  draft {bpb['draft']:.4f}")
    print(f"pair agreement on held-out snippets: {agreement}")
    print(f"exported to {out}/target and {out}/draft", flush=True)


if __name__ == "__main__":
    main()
