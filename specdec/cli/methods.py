"""`specdec bench --drafter a,b,...` (or `all`): the method table, every drafter measured
against one autoregressive baseline per prompt set (specdec/measure/methods.py runs it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import reference
from specdec.cli.inputs import bench_prompts, eagle_dir, load_pair, self_draft_dir
from specdec.cli.options import parse_list, prompt_set_names, write_atomically
from specdec.costs import measure_costs
from specdec.drafting import refusal
from specdec.machine import describe_machine
from specdec.measure.methods import METHOD_KS, methods_markdown, parse_drafters, run_methods


def cmd_methods(args) -> int:
    # several drafters: the method table, every drafter against one AR baseline per set
    from tqdm import tqdm

    drafters = parse_drafters(args.drafter)
    target, draft, tokenizer, source = load_pair(args)
    options = {
        "self_draft_dir": self_draft_dir(args),
        "eagle_dir": eagle_dir(args, drafters),
        "eagle_seed": args.seed,
    }
    drafters, refused = runnable(drafters, args.drafter == "all", target, draft, options)
    sets = {}
    for name in prompt_set_names(args, several=True):
        one = argparse.Namespace(**{**vars(args), "prompts": name})
        sets[name] = bench_prompts(one, tokenizer)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"models: {source}")
    for name, why in refused.items():
        print(f"not run: {name}: {why}")
    context = np.concatenate([next(iter(sets.values()))[0]] * 8)[: target.config.n_ctx // 2]
    max_T = max(max(METHOD_KS[d]) for d in drafters) + 1
    costs = measure_costs(target, draft, context, max_T)
    temperatures = parse_list(args.temperatures, float, "--temperatures")
    total = sum(len(p) for p in sets.values()) * len(temperatures) * args.repeats
    total *= sum(len(METHOD_KS[d]) for d in drafters)
    command = "specdec bench " + " ".join(sys.argv[2:])
    reports = {}
    with tqdm(total=total, desc="methods", unit="run") as bar:
        for name, prompts in sets.items():  # each set written as soon as it is measured
            reports |= run_methods(
                target,
                draft,
                {name: prompts},
                drafters,
                temperatures,
                args.max_new_tokens,
                args.repeats,
                costs,
                seed=args.seed,
                progress=bar,
                drafter_options=options,
            )
            text = methods_markdown(reports, machine_description(), command.strip(), refused)
            write_atomically(out / "methods.md", text)  # each set, as soon as it is measured
    print(text)
    print(f"written: {out}/methods.md")
    return 0


def runnable(drafters: list[str], every: bool, target, draft, options: dict):
    # -> (the drafters this pair can run, {refused name: why}). A drafter made of parts
    # trained on this target (extra heads, EAGLE; early exit's head is optional) runs on
    # either family when they are given (--self-draft DIR, --eagle DIR: train_heads and
    # train_eagle take GPT-2 and Llama-family targets). With --drafter all, one whose parts
    # are not given is left out by name with make_drafter's reason (how to train them);
    # named one by one, it is an error, before anything is measured
    refused = {}
    for name in drafters:
        why = refusal(name, reference, target, draft, **options)
        if why is not None:
            refused[name] = why
    if refused and not every:
        name, why = next(iter(refused.items()))
        raise ValueError(f"--drafter {name}: {why}")
    kept = [name for name in drafters if name not in refused]
    if not kept:
        raise ValueError(f"no drafter of --drafter {','.join(drafters)} runs on this pair")
    return kept, refused


def machine_description() -> str:
    # the machine a report's numbers came from: CPU, BLAS, its kernel, threads (specdec/machine.py)
    return describe_machine().line()
