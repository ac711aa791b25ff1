"""The GPU twin's benchmark: what scripts/gpu_check.sh measures on a device.

    python -m specdec.measure.gpu_bench [--repeats 3] [--max-new-tokens 128] [--ks 3,5,7]
                    [--out DIR] [--drafter model] [--tree 2,1,1,1] [--no-launches]
    python -m specdec.measure.gpu_bench --count-only  # launch counts and the model: any machine

On the bundled pair, greedy, held-out code prompts, batch 1: tokens/s of the twin's
autoregressive and speculative loops with one drafter of specdec/drafting.py (default: the draft
model; a tree drafter's k rows cut its tree at depth k), device -> host transfers (host
syncs) per generated token, the reference (CPU fast path) with the same drafter at the
twin's best k, and transformers' assisted generation on the same pair on the GPU when torch
sees one (the draft-model drafter only: it has no other). The batch rows always use the
draft model: the batched loop runs chain drafters without the target's state. Every speed
is a median over repeats; every ratio is taken within one repeat. Without a device it runs
the twin in NumPy mode, which exercises the script but measures nothing about a GPU (the
table says which).

Launches (device operations: kernel launches and copies) per generated token and per round
are counted on the stand-in for a device (gpu.device.backend.counting_launches), in one extra
run of the same loops on the same prompts: a count is a property of the code, the same on any
machine, so it is printed next to the measured tokens/s, with what a launch-bound model
predicts from it (a model, not a measurement: docs/gpu.md, "A prediction for the device").
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import gpu
import reference
from gpu.device import kernels
from gpu.device.backend import backend_name, counting_launches, counting_transfers
from gpu.device.batch_drafting import drafts_in_one_pass
from reference.drafters import Draft, Drafter
from reference.sampling import GREEDY
from specdec.bundled import DRAFT_DIR, SELF_DRAFT_DIR, TARGET_DIR, load_bundled_pair
from specdec.drafting import DRAFTERS, TREE_DRAFTERS, generate_function, make_drafter
from specdec.fast_cpu import fast
from specdec.measure.bench import held_out_code_prompts

# what one device operation costs from Python on a GPU, microseconds: the range the
# prediction of docs/gpu.md assumes (a model's assumption, to be held against a device run)
LAUNCH_COST_US = (5.0, 15.0)
# tokens of the batch rows' launch count (a count needs no long run)
BATCH_COUNT_TOKENS = 16


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


def twin_loops(drafter: str = "model", tree_widths=None, max_new_tokens: int = 128):
    # -> (ar, spec): the twin's loops on the bundled pair, built with the array module in
    # force (the device's, or the stand-in's inside counting_launches()); each returns the
    # run's (tokens, rounds): ar(prompt), spec(prompt, k)
    target_ref, draft_ref = load_bundled_pair()
    target = gpu.GPT(target_ref.config, target_ref.params)
    draft = gpu.GPT(draft_ref.config, draft_ref.params)
    spec_drafter, loop = bundled_drafter(gpu, target, draft, drafter, tree_widths)
    kw = dict(max_new_tokens=max_new_tokens, sampling=GREEDY)

    def ar(prompt):
        tokens = gpu.generate(target, prompt, rng=np.random.default_rng(0), **kw)
        return tokens, len(tokens)  # one round per token

    def spec(prompt, k):
        out = loop(target, spec_drafter, prompt, k=k, rng=np.random.default_rng(0), **kw)
        return out.tokens, out.stats.rounds

    return ar, spec


def loop_runs(ks) -> list[tuple[str, object]]:
    # (row name, how to call it): "ar", then one speculative row per k
    return [("ar", lambda loops, p: loops[0](p))] + [
        (f"k={k}", lambda loops, p, k=k: loops[1](p, k)) for k in ks
    ]


def twin_rows(
    prompts, ks, max_new_tokens: int, repeats: int, drafter: str = "model", tree_widths=None
) -> dict:
    loops = twin_loops(drafter, tree_widths, max_new_tokens)
    loops[0](prompts[0]), loops[1](prompts[0], ks[0])  # warm-up: kernels compile on first use
    rows = {"ar": [], **{f"k={k}": [] for k in ks}}
    for _ in range(repeats):
        tally = {name: [0, 0.0, 0] for name in rows}
        for prompt in prompts:
            for name, run in loop_runs(ks):
                n, s, t = timed_run(lambda run=run, p=prompt: run(loops, p)[0])
                tally[name] = [tally[name][0] + n, tally[name][1] + s, tally[name][2] + t]
        for name, (n, s, t) in tally.items():
            rows[name].append({"tokens": n, "seconds": s, "transfers": t})
    return rows


def launch_rows(prompts, ks, max_new_tokens: int, drafter: str = "model", tree_widths=None):
    # name -> {"tokens", "rounds", "launches", "hidden_syncs", "top"}: the loops of twin_rows
    # run once more, on the stand-in for a device, every device operation counted
    rows = {}
    with counting_launches():  # the twin's arrays are made on the stand-in
        loops = twin_loops(drafter, tree_widths, max_new_tokens)
        for name, run in loop_runs(ks):
            tokens = rounds = 0
            with counting_launches() as log:
                for prompt in prompts:
                    out, n_rounds = run(loops, prompt)
                    tokens, rounds = tokens + len(out), rounds + n_rounds
            rows[name] = {
                "tokens": tokens,
                "rounds": rounds,
                "launches": log.count,
                "hidden_syncs": sum(log.hidden_syncs.values()),
                "top": log.by_name.most_common(8),
            }
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
        return Draft(np.zeros(0, np.int64), np.zeros((0, self.n_vocab), np.float32))

    def commit(self, n_accepted: int) -> None:
        pass

    def rollback(self) -> None:
        pass


def batch_rows(prompts, k: int, batches: list[int], max_new_tokens: int, repeats: int) -> dict:
    # B -> {"ar": (tok/s, transfers/token), "spec": (...)}: B sequences decoded together
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


def batch_launches(prompts, k: int, batches: list[int], max_new_tokens: int) -> dict:
    # B -> launches per batched round and per token of the batched speculative loop (the
    # draft model at k), counted on the stand-in for a device over one short run
    rows = {}
    with counting_launches():
        target_ref, draft_ref = load_bundled_pair()
        target = gpu.GPT(target_ref.config, target_ref.params)
        draft = gpu.GPT(draft_ref.config, draft_ref.params)
        for B in batches:
            batch = [prompts[b % len(prompts)] for b in range(B)]
            drafters = [gpu.ModelDrafter(draft) for _ in batch]
            with counting_launches() as log:
                results = gpu.speculative_generate_batch(
                    target,
                    drafters,
                    batch,
                    k=k,
                    max_new_tokens=max_new_tokens,
                    rng=np.random.default_rng(0),
                    sampling=GREEDY,
                )
            rounds = max(r.stats.rounds for r in results)  # batched rounds: the longest row's
            tokens = sum(len(r.tokens) for r in results)
            drafting = "batched" if drafts_in_one_pass(drafters) else "per row"
            rows[B] = {"launches": log.count, "rounds": rounds, "tokens": tokens}
            rows[B]["drafting"] = drafting  # one draft pass for all rows, or each row's own
    return rows


def launch_model(launches_per_token: float, costs_us=LAUNCH_COST_US) -> tuple[float, float]:
    # a launch-bound model, not a measurement: a step of a model this small costs its
    # launches, c microseconds each, so tokens/s = 1e6 / (launches per token * c) -> the
    # range (slowest, fastest) over c in costs_us
    return tuple(1e6 / (launches_per_token * c) for c in sorted(costs_us, reverse=True))


def fast_path_tricks() -> str:
    # the CPU fast path measures which tricks pay on this machine through threadpoolctl
    # (specdec/fast_cpu/plan.py); a machine without it (a device's bare python3) runs the fast
    # path's layout with every trick off, and the row's label says so
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return "none"
    return "measure"


def optional_row(name: str, compute):
    # an extra row (the reference on the CPU, transformers on the GPU) must not cost the
    # twin's figures: a failure is printed and recorded as n/a
    try:
        return compute()
    except Exception as error:  # a missing package, another library version's API, ...
        print(f"- {name}: n/a ({type(error).__name__}: {error})")
        return None


def reference_rate(
    prompts, k: int, max_new_tokens: int, drafter: str = "model", tree_widths=None
) -> float:
    target, draft = (fast(m, fast_path_tricks()) for m in load_bundled_pair())
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


def unfused_rate(prompts, k: int, max_new_tokens: int, drafter: str, tree_widths) -> float | None:
    # the twin's speculative tok/s at k with its fused kernels off (SPECDEC_GPU_FUSED=0's
    # path, one repeat): against the twin's own row, what the kernels bought on this device.
    # None where they never run (NumPy mode, or turned off)
    if not kernels.kernels_on():
        return None
    with kernels.kernels_off("the bench's unfused row"):
        rows = twin_rows(prompts, [k], max_new_tokens, 1, drafter, tree_widths)[f"k={k}"]
    return sum(r["tokens"] for r in rows) / sum(r["seconds"] for r in rows)


def transformers_rate(prompts, k: int, max_new_tokens: int) -> float | None:
    # assisted generation (greedy) on the GPU with the same pair; None without CUDA torch
    # (asked before transformers' model classes are imported: that import alone takes seconds)
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
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
    parser = argparse.ArgumentParser(
        prog="python -m specdec.measure.gpu_bench", description=__doc__
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--n-prompts", type=int, default=6)
    parser.add_argument("--ks", default="3,5,7")
    parser.add_argument("--batches", default="1,8,64", help="batch sizes for the scaling rows")
    parser.add_argument("--drafter", default="model", choices=DRAFTERS, help="specdec/drafting.py")
    parser.add_argument("--tree", default=None, help="a tree drafter's widths, e.g. 2,1,1,1")
    parser.add_argument("--out", default=os.environ.get("OUT") or None)
    parser.add_argument(
        "--count-only",
        action="store_true",
        help="count launches on the stand-in and print the launch-bound model; time nothing",
    )
    parser.add_argument(
        "--no-launches",
        action="store_true",
        help="skip the launch counts (one more run of every loop on the stand-in, on the CPU)",
    )
    args = parser.parse_args(argv)
    if args.tree is not None and args.drafter not in TREE_DRAFTERS:
        parser.error(f"--tree shapes a tree drafter ({', '.join(TREE_DRAFTERS)})")
    ks = [int(k) for k in args.ks.split(",")]
    widths = None if args.tree is None else tuple(int(b) for b in args.tree.split(","))
    prompts = held_out_code_prompts(args.n_prompts)
    if args.count_only:
        return count_only(args, prompts, ks, widths)
    rows = twin_rows(prompts, ks, args.max_new_tokens, args.repeats, args.drafter, widths)
    table = summarise(rows)
    best = max(ks, key=lambda k: table[f"k={k}"][0])
    twin_best = table[f"k={best}"][0]
    reference_label = "reference (CPU fast path) tok/s at best k"
    if fast_path_tricks() == "none":
        reference_label = "reference (CPU fast path, tricks off: no threadpoolctl) tok/s at best k"
    extra = {
        reference_label: optional_row(
            reference_label,
            lambda: reference_rate(prompts, best, args.max_new_tokens, args.drafter, widths),
        ),
        "the twin without its fused kernels (SPECDEC_GPU_FUSED=0) tok/s at best k": optional_row(
            "the twin without its fused kernels",
            lambda: unfused_rate(prompts, best, args.max_new_tokens, args.drafter, widths),
        ),
        "transformers assisted generation (GPU) tok/s at best k": (
            optional_row(
                "transformers assisted generation",
                lambda: transformers_rate(prompts, best, args.max_new_tokens),
            )
            if args.drafter == "model"
            else None  # assisted generation drafts with a second model only
        ),
    }
    batches = [int(b) for b in args.batches.split(",")]
    scaling = batch_rows(prompts, best, batches, args.max_new_tokens, args.repeats)
    launches, batch_counts = {}, {}
    if not args.no_launches:
        launches = launch_rows(prompts, ks, args.max_new_tokens, args.drafter, widths)
        count_tokens = min(args.max_new_tokens, BATCH_COUNT_TOKENS)
        batch_counts = batch_launches(prompts, best, batches, count_tokens)
    result = {
        "backend": backend_name(),
        "fused_kernels": kernels.kernel_state(),  # on, or off (why): gpu/device/kernels.py
        "date": time.strftime("%Y-%m-%d"),
        "settings": vars(args)
        | {"prompts": len(prompts), "sampling": "greedy", "batch of the k rows": 1},
        "runs": rows,
        "table": table,
        "extra": extra,
        "batches": {str(B): row for B, row in scaling.items()},
        "launches": launches,  # counted on the stand-in for a device: the same on any machine
        "launch_cost_us": LAUNCH_COST_US,  # the model's assumption, not a measurement
        "batch_launches": {str(B): row for B, row in batch_counts.items()},
    }
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gpu_bench.json").write_text(json.dumps(result, indent=2))
    print(
        f"backend: {result['backend']}; fused kernels: {result['fused_kernels']}; "
        f"drafter: {args.drafter}; {len(prompts)} prompts x "
        f"{args.max_new_tokens} tokens, greedy, batch 1, medians of {args.repeats} repeats"
    )
    print_loop_table(table, launches)
    for what, rate in extra.items():
        ratio = f" (twin / it: {twin_best / rate:.2f}x)" if rate else ""
        print(f"- {what}: {'n/a' if rate is None else f'{rate:.1f}'}{ratio}")
    print(
        f"\nbatches (greedy, the draft model at k={best} for speculative; AR = the same batched "
        "loop drafting nothing):"
    )
    print_batch_table(scaling, batch_counts)
    if launches:
        print_launch_model(launches)
    if args.out:
        print(f"\nwrote {Path(args.out) / 'gpu_bench.json'}")


def count_only(args, prompts, ks, widths) -> None:
    # --count-only: the launch counts and the model's prediction, no timing (any machine)
    launches = launch_rows(prompts, ks, args.max_new_tokens, args.drafter, widths)
    batches = [int(b) for b in args.batches.split(",")]
    k_batch = 5 if 5 in ks else ks[0]
    counts = batch_launches(prompts, k_batch, batches, min(args.max_new_tokens, BATCH_COUNT_TOKENS))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        record = {"date": time.strftime("%Y-%m-%d"), "settings": vars(args), "launches": launches}
        record["batch_launches"] = {str(B): row for B, row in counts.items()}
        (Path(args.out) / "launch_counts.json").write_text(json.dumps(record, indent=2))
    print(
        "launch counts on the stand-in for a device (gpu.device.backend.counting_launches); "
        f"drafter: {args.drafter}; {len(prompts)} prompts x {args.max_new_tokens} tokens, "
        "greedy, batch 1"
    )
    print("| loop | tokens | rounds | launches / token | launches / round | hidden syncs |")
    print("|---|---|---|---|---|---|")
    for name, row in launches.items():
        print(
            f"| {name} | {row['tokens']} | {row['rounds']} | {per(row, 'tokens'):.0f} | "
            f"{per(row, 'rounds'):.0f} | {row['hidden_syncs']} |"
        )
    print(f"\nbatched speculative loop (the draft model, k={k_batch}, a short run):")
    print("| batch | drafting | launches / round | launches / token |")
    print("|---|---|---|---|")
    for B, row in counts.items():
        print(f"| {B} | {row['drafting']} | {per(row, 'rounds'):.0f} | {per(row, 'tokens'):.0f} |")
    print_launch_model(launches)


def per(row: dict, what: str) -> float:
    # launches per token or per round of a launch row
    return row["launches"] / max(row[what], 1)


def print_loop_table(table: dict, launches: dict) -> None:
    print(
        "| loop | tokens/s | transfers / token | launches / token | launches / round | "
        "speedup vs AR |"
    )
    print("|---|---|---|---|---|---|")
    for name, (rate, per_token, speedup) in table.items():
        row = launches.get(name)
        counted = f"{per(row, 'tokens'):.0f} | {per(row, 'rounds'):.0f}" if row else "- | -"
        print(f"| {name} | {rate:.1f} | {per_token:.2f} | {counted} | {speedup:.2f}x |")
    if launches:
        print(
            "(launches: device operations counted on the stand-in for a device, "
            "gpu.device.backend.counting_launches; hidden host syncs: "
            f"{sum(row['hidden_syncs'] for row in launches.values())})"
        )


def print_batch_table(scaling: dict, batch_counts: dict) -> None:
    print(
        "| batch | AR tok/s | spec tok/s | spec / AR | spec tok/s vs batch 1 | "
        "transfers / token (spec) | launches / round (spec) |"
    )
    print("|---|---|---|---|---|---|---|")
    one = next(iter(scaling.values()))["spec"][0]
    for B, row in scaling.items():
        (ar_rate, _), (spec_rate, per_token) = row["ar"], row["spec"]
        counted = f"{per(batch_counts[B], 'rounds'):.0f}" if B in batch_counts else "-"
        print(
            f"| {B} | {ar_rate:.1f} | {spec_rate:.1f} | {spec_rate / ar_rate:.2f}x | "
            f"{spec_rate / one:.2f}x | {per_token:.3f} | {counted} |"
        )


def print_launch_model(launches: dict) -> None:
    # the launch-bound model's prediction for a device, from the counted launches
    low, high = LAUNCH_COST_US
    ar = per(launches["ar"], "tokens")
    print(
        f"\nlaunch-bound model for a GPU (a MODEL, not a measurement; docs/gpu.md): each "
        f"launch costs {low:g}-{high:g} us, nothing else does"
    )
    print("| loop | launches / token | model tokens/s | model speedup vs AR |")
    print("|---|---|---|---|")
    for name, row in launches.items():
        slow, fast = launch_model(per(row, "tokens"))
        speedup = ar / per(row, "tokens")
        print(f"| {name} | {per(row, 'tokens'):.0f} | {slow:.0f}-{fast:.0f} | {speedup:.2f}x |")


if __name__ == "__main__":
    main()
