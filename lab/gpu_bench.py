"""The GPU twin's benchmark: what scripts/gpu_check.sh measures on a device.

    python -m lab.gpu_bench [--repeats 3] [--max-new-tokens 128] [--ks 3,5,7] [--out DIR]
                            [--drafter model] [--tree 2,1,1,1]

On the bundled pair, greedy, held-out code prompts, batch 1: tokens/s of the twin's
autoregressive and speculative loops with one drafter of lab/drafting.py (default: the draft
model; a tree drafter's k rows cut its tree at depth k), device -> host transfers (host
syncs) per generated token, the reference (CPU fast path) with the same drafter at the
twin's best k, and transformers' assisted generation on the same pair on the GPU when torch
sees one (the draft-model drafter only: it has no other). The batch rows always use the
draft model: the batched loop runs chain drafters without the target's state. Every speed
is a median over repeats; every ratio is taken within one repeat. Without a device it runs
the twin in NumPy mode, which exercises the script but measures nothing about a GPU (the
table says which).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from gpu.backend import backend_name, counting_transfers
from lab.bench import held_out_code_prompts
from lab.bundled import DRAFT_DIR, SELF_DRAFT_DIR, TARGET_DIR, load_bundled_pair
from lab.drafting import DRAFTERS, TREE_DRAFTERS, generate_function, make_drafter
from lab.fast_cpu import fast
from reference.drafters import Drafter
from reference.sampling import GREEDY


def timed_run(fn) -> tuple[int, float, int]:
    # fn() -> tokens; -> (tokens generated, seconds, device -> host transfers)
    with counting_transfers() as log:
        start = time.perf_counter()
        tokens = fn()  # every loop ends on a transfer, so the device has finished by then
        seconds = time.perf_counter() - start
    return len(tokens), seconds, log.count


def bundled_drafter(core, target, draft, drafter: str, tree_widths=None):
    # the lab's drafter `drafter` of `core` (reference or gpu) for the bundled pair, with
    # the self-drafting parts trained on its target -> (drafter, the loop that runs it)
    d = make_drafter(drafter, core, target, draft, None, SELF_DRAFT_DIR, tree_widths=tree_widths)
    return d, generate_function(core, d)


def twin_rows(
    prompts, ks, max_new_tokens: int, repeats: int, drafter: str = "model", tree_widths=None
) -> dict:
    import gpu

    target_ref, draft_ref = load_bundled_pair()
    target = gpu.GPT(target_ref.config, target_ref.params)
    draft = gpu.GPT(draft_ref.config, draft_ref.params)
    spec_drafter, loop = bundled_drafter(gpu, target, draft, drafter, tree_widths)
    kw = dict(max_new_tokens=max_new_tokens, sampling=GREEDY)

    def ar(prompt):
        return gpu.generate(target, prompt, rng=np.random.default_rng(0), **kw)

    def spec(prompt, k):
        return loop(target, spec_drafter, prompt, k=k, rng=np.random.default_rng(0), **kw).tokens

    ar(prompts[0]), spec(prompts[0], ks[0])  # warm-up: kernels compile on first use
    rows = {"ar": [], **{f"k={k}": [] for k in ks}}
    for _ in range(repeats):
        tally = {name: [0, 0.0, 0] for name in rows}
        for prompt in prompts:
            for name, fn in [("ar", lambda p=prompt: ar(p))] + [
                (f"k={k}", lambda p=prompt, k=k: spec(p, k)) for k in ks
            ]:
                n, s, t = timed_run(fn)
                tally[name] = [tally[name][0] + n, tally[name][1] + s, tally[name][2] + t]
        for name, (n, s, t) in tally.items():
            rows[name].append({"tokens": n, "seconds": s, "transfers": t})
    return rows


class NoDrafter(Drafter):
    """Proposes nothing: every round is then one target step for each sequence, so a batch
    decodes autoregressively through the same batched loop (the batch's AR baseline)."""

    def __init__(self, n_vocab: int, n_ctx: int) -> None:
        self.n_vocab, self.n_ctx = n_vocab, n_ctx

    def reset(self) -> None:
        pass

    def prefill(self, tokens) -> None:
        pass

    def propose(self, context, k, sampling, rng):
        from reference.drafters import Draft

        return Draft(np.zeros(0, np.int64), np.zeros((0, self.n_vocab), np.float32))

    def commit(self, n_accepted: int) -> None:
        pass

    def rollback(self) -> None:
        pass


def batch_rows(prompts, k: int, batches: list[int], max_new_tokens: int, repeats: int) -> dict:
    # B -> {"ar": (tok/s, transfers/token), "spec": (...)}: B sequences decoded together
    import gpu

    target_ref, draft_ref = load_bundled_pair()
    target = gpu.GPT(target_ref.config, target_ref.params)
    draft = gpu.GPT(draft_ref.config, draft_ref.params)
    rows = {}
    for B in batches:
        batch = [prompts[b % len(prompts)] for b in range(B)]
        spec_drafters = [gpu.ModelDrafter(draft) for _ in batch]
        ar_drafters = [NoDrafter(target.n_vocab, target.config.n_ctx) for _ in batch]

        def run(drafters, k_run, batch=batch):
            results = gpu.speculative_generate_batch(
                target,
                drafters,
                batch,
                k=k_run,
                max_new_tokens=max_new_tokens,
                rng=np.random.default_rng(0),
                sampling=GREEDY,
            )
            return [t for r in results for t in r.tokens]

        run(spec_drafters, k)  # warm-up
        rows[B] = {}
        for name, drafters in (("ar", ar_drafters), ("spec", spec_drafters)):
            runs = [timed_run(lambda d=drafters: run(d, k)) for _ in range(repeats)]
            rates = [n / s for n, s, _ in runs]
            per_token = sum(t for _, _, t in runs) / sum(n for n, _, _ in runs)
            rows[B][name] = (float(np.median(rates)), per_token)
    return rows


def reference_rate(
    prompts, k: int, max_new_tokens: int, drafter: str = "model", tree_widths=None
) -> float:
    import reference

    target, draft = (fast(m) for m in load_bundled_pair())
    spec_drafter, loop = bundled_drafter(reference, target, draft, drafter, tree_widths)
    n, s = 0, 0.0
    for prompt in prompts:
        start = time.perf_counter()
        out = loop(
            target,
            spec_drafter,
            prompt,
            k=k,
            max_new_tokens=max_new_tokens,
            rng=np.random.default_rng(0),
            sampling=GREEDY,
        )
        n, s = n + len(out.tokens), s + time.perf_counter() - start
    return n / s


def transformers_rate(prompts, k: int, max_new_tokens: int) -> float | None:
    # assisted generation (greedy) on the GPU with the same pair; None without CUDA torch
    try:
        import torch
        from transformers import GPT2LMHeadModel
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    target = GPT2LMHeadModel.from_pretrained(TARGET_DIR, dtype=torch.float32).cuda().eval()
    draft = GPT2LMHeadModel.from_pretrained(DRAFT_DIR, dtype=torch.float32).cuda().eval()
    draft.generation_config.num_assistant_tokens = k
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    n, s = 0, 0.0
    for prompt in prompts:
        ids = torch.tensor([prompt.tolist()], device="cuda")
        with torch.no_grad():
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = target.generate(
                ids,
                assistant_model=draft,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,
                pad_token_id=256,
                attention_mask=torch.ones_like(ids),
            )
            torch.cuda.synchronize()
        n, s = n + out.shape[1] - ids.shape[1], s + time.perf_counter() - start
    return n / s


def summarise(rows: dict) -> dict:
    # name -> (median tokens/s, transfers per token, speedup over AR: median of per-repeat)
    ar_rate = np.array([r["tokens"] / r["seconds"] for r in rows["ar"]])
    table = {}
    for name, runs in rows.items():
        rate = np.array([r["tokens"] / r["seconds"] for r in runs])
        per_token = sum(r["transfers"] for r in runs) / sum(r["tokens"] for r in runs)
        table[name] = (float(np.median(rate)), per_token, float(np.median(rate / ar_rate)))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.gpu_bench", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--n-prompts", type=int, default=6)
    parser.add_argument("--ks", default="3,5,7")
    parser.add_argument("--batches", default="1,8,64", help="batch sizes for the scaling rows")
    parser.add_argument("--drafter", default="model", choices=DRAFTERS, help="lab/drafting.py")
    parser.add_argument("--tree", default=None, help="a tree drafter's widths, e.g. 2,1,1,1")
    parser.add_argument("--out", default=os.environ.get("OUT") or None)
    args = parser.parse_args(argv)
    if args.tree is not None and args.drafter not in TREE_DRAFTERS:
        parser.error(f"--tree shapes a tree drafter ({', '.join(TREE_DRAFTERS)})")
    ks = [int(k) for k in args.ks.split(",")]
    widths = None if args.tree is None else tuple(int(b) for b in args.tree.split(","))
    prompts = held_out_code_prompts(args.n_prompts)
    rows = twin_rows(prompts, ks, args.max_new_tokens, args.repeats, args.drafter, widths)
    table = summarise(rows)
    best = max(ks, key=lambda k: table[f"k={k}"][0])
    twin_best = table[f"k={best}"][0]
    extra = {
        "reference (CPU fast path) tok/s at best k": reference_rate(
            prompts, best, args.max_new_tokens, args.drafter, widths
        ),
        "transformers assisted generation (GPU) tok/s at best k": (
            transformers_rate(prompts, best, args.max_new_tokens)
            if args.drafter == "model"
            else None  # assisted generation drafts with a second model only
        ),
    }
    batches = [int(b) for b in args.batches.split(",")]
    scaling = batch_rows(prompts, best, batches, args.max_new_tokens, args.repeats)
    result = {
        "backend": backend_name(),
        "date": time.strftime("%Y-%m-%d"),
        "settings": vars(args)
        | {"prompts": len(prompts), "sampling": "greedy", "batch of the k rows": 1},
        "runs": rows,
        "table": table,
        "extra": extra,
        "batches": {str(B): row for B, row in scaling.items()},
    }
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gpu_bench.json").write_text(json.dumps(result, indent=2))
    print(
        f"backend: {result['backend']}; drafter: {args.drafter}; {len(prompts)} prompts x "
        f"{args.max_new_tokens} tokens, greedy, batch 1, medians of {args.repeats} repeats"
    )
    print("| loop | tokens/s | transfers / token | speedup vs AR |")
    print("|---|---|---|---|")
    for name, (rate, per_token, speedup) in table.items():
        print(f"| {name} | {rate:.1f} | {per_token:.2f} | {speedup:.2f}x |")
    for what, rate in extra.items():
        ratio = f" (twin / it: {twin_best / rate:.2f}x)" if rate else ""
        print(f"- {what}: {'n/a' if rate is None else f'{rate:.1f}'}{ratio}")
    print(
        f"\nbatches (greedy, the draft model at k={best} for speculative; AR = the same batched "
        "loop drafting nothing):"
    )
    print(
        "| batch | AR tok/s | spec tok/s | spec / AR | spec tok/s vs batch 1 | "
        "transfers / token (spec) |"
    )
    print("|---|---|---|---|---|---|")
    one = scaling[batches[0]]["spec"][0]
    for B, row in scaling.items():
        (ar_rate, _), (spec_rate, per_token) = row["ar"], row["spec"]
        print(
            f"| {B} | {ar_rate:.1f} | {spec_rate:.1f} | {spec_rate / ar_rate:.2f}x | "
            f"{spec_rate / one:.2f}x | {per_token:.3f} |"
        )


if __name__ == "__main__":
    main()
