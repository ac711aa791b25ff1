"""`specdec bench`: autoregressive vs speculative decoding, measured in one run.

Every figure is a median over repeats, and every speedup is a ratio of times measured in
the same repeat (autoregressive and speculative for the same prompt, back to back), so slow
drifts of the machine cancel. Tokens are counted, never characters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

import reference
from reference.autoregressive import generate
from reference.model import GPT
from reference.sampling import SamplingParams
from reference.speculative import SpeculativeStats, speculative_generate
from specdec.costs import CostProfile, expected_tokens_per_round, predicted_speedup
from specdec.drafting import (
    DYNAMIC_TREE_DRAFTERS,
    generate_function,
    make_drafter,
    model_drafter,
)
from specdec.fast_cpu.plan import describe_plan, row_ranges
from specdec.timing import StageClock
from specdec.training.corpus import is_held_out, list_sources, stdlib_dir

CODE_PROMPTS = [
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "    for i, line in enumerate(lines):\n        if ",
]
# Copy-heavy prompts: the likely continuation repeats text the prompt already holds (a
# function re-emitted with one name changed, a table or list of similar lines), the case
# prompt lookup drafting is made for.
COPY_PROMPTS = [
    "def load_config(path):\n    with open(path) as f:\n        data = json.load(f)\n"
    "    return data\n\n\ndef load_settings(path):\n    with open(path) as f:\n",
    "COLOURS = {\n    'red': (255, 0, 0),\n    'green': (0, 255, 0),\n"
    "    'blue': (0, 0, 255),\n    'red_light': (255, 128, 128),\n    'green_light': (",
    "| name | size | owner |\n|------|------|-------|\n| alpha | 10 | root |\n"
    "| beta | 20 | root |\n| gamma | 30 | root |\n| delta |",
    "    def get_name(self):\n        return self._name\n\n    def set_name(self, value):\n"
    "        self._name = value\n\n    def get_size(self):\n        return self._size\n\n",
]
TEXT_PROMPTS = [
    "The weather today is",
    "Once upon a time, in a small village by the sea,",
]


def held_out_code_prompts(n: int = 8, length: int = 160, seed: int = 0) -> list[np.ndarray]:
    """Prompts cut from the training corpus's *held-out* files (stdlib sources the models
    never saw): `length` bytes starting at the beginning of a random line of each file."""
    root = stdlib_dir()
    files = [p for p in list_sources(root) if is_held_out(p.relative_to(root).as_posix())]
    rng = np.random.default_rng(seed)
    prompts = []
    for path in files:
        data = path.read_bytes()
        starts = [0] + [i + 1 for i, b in enumerate(data[: -length - 1]) if b == 10]
        start = starts[rng.integers(len(starts))]
        if len(data) - start > length:
            prompts.append(np.frombuffer(data[start : start + length], np.uint8).astype(np.int64))
        if len(prompts) == n:
            break
    return prompts


@dataclass
class BenchPoint:
    temperature: float
    k: int
    alpha: float  # accepted / examined, pooled over every run of this point
    tokens_per_round: float  # emitted / rounds, pooled
    ar_tps: float  # autoregressive decode tokens/s (median repeat)
    spec_tps: float  # speculative decode tokens/s (median repeat)
    speedups: list[float]  # one per repeat: AR decode time per token / spec decode time per token
    speedups_end_to_end: list[float]  # the same with the prompt's prefill included in both
    histogram: np.ndarray  # [k+1] rounds that accepted 0..k drafts
    # Costs as the run spent them, in units of one autoregressive decode step (pooled):
    c_loop: float = 0.0  # drafting time per drafted token
    v_loop: float = 0.0  # the target pass over k+1 positions, with its k+1 distributions
    overhead_loop: float = 0.0  # verify decision + commit/emit/bookkeeping, per round
    predicted: float = 0.0  # Leviathan: E / (k c + 1), c from the isolated cost profile
    predicted_corrected: float = 0.0  # E / (k c + v(k+1)), both from the isolated profile
    predicted_loop: float = 0.0  # E / (k c_loop + v_loop): the run's own costs, no overhead
    predicted_tokens_per_round: float = 0.0  # E(alpha, k)
    drafter: str = "model"  # specdec/drafting.py name
    drafted_per_round: float = 0.0  # drafts sent to verification per round, pooled
    nodes_per_round: float = 0.0  # candidates verified per round (a chain: its drafts), pooled
    # P(accept position i | examined), i = 1..k (a tree: depth i), pooled; NaN: never examined
    alpha_by_position: list[float] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return float(np.median(self.speedups))

    @property
    def speedup_end_to_end(self) -> float:
        return float(np.median(self.speedups_end_to_end))


@dataclass
class BenchReport:
    points: list[BenchPoint]
    costs: CostProfile
    max_new_tokens: int
    repeats: int
    n_prompts: int
    min_confidence: float | None = None  # the drafter's early-stop threshold (None: off)
    drafter: str = "model"  # specdec/drafting.py: model, lookup or hybrid
    transformers_rows: list[dict] = field(default_factory=list)
    # the CLI's run also measures the plain model's costs (is the fast path faster here?)
    # and keeps the fast path's measured choices (specdec/fast_cpu/plan.py TrickPlan per model)
    plain_costs: CostProfile | None = None
    plans: dict = field(default_factory=dict)
    # the floor of each pass, T -> seconds (specdec/measure/roofline.py), and the two measured rates
    # it comes from, as words; empty where not measured
    floors: dict = field(default_factory=dict)
    rates_text: str = ""

    def best(self, temperature: float) -> BenchPoint:
        return max(
            (p for p in self.points if p.temperature == temperature), key=lambda p: p.speedup
        )


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


# Stages each loop charges to its StageClock (specdec/timing.py); "prefill" is the rest.
AR_DECODE = ("sample", "target")
SPEC_DECODE = ("draft", "target", "verify", "other")


@dataclass
class Tally:
    """Sums over the prompts of one repeat: end-to-end seconds, decode seconds, tokens."""

    seconds: float = 0.0
    decode_seconds: float = 0.0
    tokens: int = 0

    def add(self, seconds: float, decode_seconds: float, tokens: int) -> None:
        self.seconds += seconds
        self.decode_seconds += decode_seconds
        self.tokens += tokens


def run_bench(
    target: GPT,
    draft: GPT,
    prompts: list[np.ndarray],
    ks: list[int],
    temperatures: list[float],
    max_new_tokens: int,
    repeats: int,
    costs: CostProfile,
    seed: int = 0,
    progress=None,
    min_confidence: float | None = None,
    drafter_name: str = "model",
    ks_by_drafter: dict[str, list[int]] | None = None,
    drafter_options: dict | None = None,
    on_point=None,
    shared_baseline: bool = False,
) -> BenchReport:
    """Autoregressive vs speculative decoding of every prompt, for every temperature and
    (drafter, k) cell. Speedup per repeat = AR time per token / spec time per token, over
    the decode phase (after the prompt's prefill, which is the same work in both) and end
    to end. With `min_confidence`, k is the most a round drafts (ModelDrafter).
    `drafter_name` picks the drafter (specdec/drafting.py); `ks_by_drafter` instead runs
    several, each at its own ks; `drafter_options` go to make_drafter (e.g. self_draft_dir).

    Two orders, both pairing each speculative run with autoregressive runs of the same
    prompt timed close to it, so slow drifts of the machine cancel in the ratio:
    - by cell (default): each (temperature, drafter, k) cell runs, per repeat and prompt,
      the autoregressive decode and then the speculative one, back to back; the cell is
      finished before the next starts, and `on_point(point)` is called with it (the CLI
      writes its report there, so an interrupt keeps every finished cell). The
      autoregressive runs are repeated for every cell.
    - `shared_baseline` (the method table): per temperature, repeat and prompt, one
      autoregressive decode, then every cell's speculative one; every cell is measured
      against the same autoregressive runs, and cells finish together, at the end of
      their temperature (`on_point` is called then)."""
    ks_by_drafter = ks_by_drafter or {drafter_name: ks}
    cells = [(name, k) for name, name_ks in ks_by_drafter.items() for k in name_ks]
    # one drafter per cell: eagle-tree's node budget is its k (specdec/drafting.py)
    drafters = {
        cell: make_drafter(
            cell[0],
            reference,
            target,
            draft,
            min_confidence,
            **(drafter_options or {}),
            **cell_options(*cell),
        )
        for cell in cells
    }
    loops = {cell: generate_function(reference, d) for cell, d in drafters.items()}

    def ar_run(prompt, sampling, seed_r, ar: Tally, ar_clock: StageClock) -> None:
        clock = StageClock()  # end to end = its total, decode = its decode stages
        out = generate(
            target,
            prompt,
            max_new_tokens=max_new_tokens,
            rng=np.random.default_rng(seed_r),
            sampling=sampling,
            clock=clock,
        )
        ar.add(clock.total(), clock.total(*AR_DECODE), len(out))
        ar_clock.merge(clock)

    def spec_run(cell, prompt, sampling, seed_r, spec: Tally, spec_clock, stats) -> None:
        clock = StageClock()
        res = loops[cell](
            target,
            drafters[cell],
            prompt,
            k=cell[1],
            max_new_tokens=max_new_tokens,
            rng=np.random.default_rng(seed_r),
            sampling=sampling,
            clock=clock,
        )
        spec.add(clock.total(), clock.total(*SPEC_DECODE), len(res.tokens))
        spec_clock.merge(clock)
        stats.append(res.stats)
        if progress is not None:
            progress.update(1)

    points = []
    for temperature in temperatures:
        sampling = SamplingParams(temperature=temperature)
        measured = []  # (cell, ar tallies, spec tallies, stats, ar clock, spec clock)
        if shared_baseline:
            ar = [Tally() for _ in range(repeats)]
            ar_clock = StageClock()
            spec = {cell: [Tally() for _ in range(repeats)] for cell in cells}
            clocks = {cell: StageClock() for cell in cells}
            stats = {cell: [] for cell in cells}
            for r in range(repeats):
                for j, prompt in enumerate(prompts):
                    ar_run(prompt, sampling, (seed, r, j), ar[r], ar_clock)
                    for cell in cells:
                        spec_run(
                            cell,
                            prompt,
                            sampling,
                            (seed, r, j),
                            spec[cell][r],
                            clocks[cell],
                            stats[cell],
                        )
            measured = [(c, ar, spec[c], stats[c], ar_clock, clocks[c]) for c in cells]
        for cell in [] if shared_baseline else cells:
            ar, ar_clock = [Tally() for _ in range(repeats)], StageClock()
            spec, clock, stats = [Tally() for _ in range(repeats)], StageClock(), []
            for r in range(repeats):
                for j, prompt in enumerate(prompts):
                    ar_run(prompt, sampling, (seed, r, j), ar[r], ar_clock)
                    spec_run(cell, prompt, sampling, (seed, r, j), spec[r], clock, stats)
            measured = [(cell, ar, spec, stats, ar_clock, clock)]
            points.append(finished_point(temperature, *measured[0], costs, on_point))
        if shared_baseline:
            points += [finished_point(temperature, *m, costs, on_point) for m in measured]
    return BenchReport(
        points,
        costs,
        max_new_tokens,
        repeats,
        len(prompts),
        min_confidence,
        ",".join(ks_by_drafter),
    )


def cell_options(name: str, k: int) -> dict:
    # make_drafter's options that follow the cell's k: a dynamic tree's node budget
    return {"tree_nodes": k} if name in DYNAMIC_TREE_DRAFTERS else {}


def finished_point(temperature, cell, ar, spec, stats, ar_clock, spec_clock, costs, on_point):
    # one cell's BenchPoint, handed to on_point (if any) as soon as it is finished
    point = bench_point(temperature, cell[1], ar, spec, stats, ar_clock, spec_clock, costs)
    point.drafter = cell[0]
    if on_point is not None:
        on_point(point)
    return point


def bench_point(
    temperature: float,
    k: int,
    ar: list[Tally],
    spec: list[Tally],
    stats: list[SpeculativeStats],
    ar_clock: StageClock,
    spec_clock: StageClock,
    costs: CostProfile,
) -> BenchPoint:
    ar_rate = np.array([t.tokens / t.decode_seconds for t in ar])  # [repeats] decode tokens/s
    spec_rate = np.array([t.tokens / t.decode_seconds for t in spec])
    ar_e2e = np.array([t.tokens / t.seconds for t in ar])
    spec_e2e = np.array([t.tokens / t.seconds for t in spec])
    pooled = SpeculativeStats.pooled(stats)  # every run of this point as one
    alpha, rounds, drafted = pooled.alpha, pooled.rounds, pooled.drafted
    # one autoregressive decode step, pooled over every AR run of this temperature
    step = ar_clock.total(*AR_DECODE) / sum(t.tokens for t in ar)
    point = BenchPoint(
        temperature=temperature,
        k=k,
        alpha=alpha,
        tokens_per_round=pooled.mean_tokens_per_round,
        ar_tps=float(np.median(ar_rate)),
        spec_tps=float(np.median(spec_rate)),
        speedups=list(spec_rate / ar_rate),
        speedups_end_to_end=list(spec_e2e / ar_e2e),
        histogram=pooled.accepted_histogram,
        # a lookup drafter may draft nothing in a whole point: its c is then undefined
        c_loop=spec_clock.seconds["draft"] / drafted / step if drafted else float("nan"),
        v_loop=spec_clock.seconds["target"] / rounds / step,
        overhead_loop=spec_clock.total("verify", "other") / rounds / step,
    )
    point.drafted_per_round = drafted / rounds
    point.nodes_per_round = pooled.mean_nodes_per_round
    point.alpha_by_position = [float(a) for a in pooled.per_position_acceptance]
    point.predicted_tokens_per_round = expected_tokens_per_round(alpha, k)
    point.predicted = predicted_speedup(alpha, k, costs.c)
    point.predicted_corrected = predicted_speedup(alpha, k, costs.c, costs.verify_cost(k + 1))
    point.predicted_loop = predicted_speedup(alpha, k, point.c_loop, point.v_loop)
    return point


def run_transformers_rows(
    target_dir,
    draft_dir,
    target: GPT,
    draft: GPT,
    prompts: list[np.ndarray],
    k: int,
    temperature: float,
    max_new_tokens: int,
    repeats: int,
    seed: int = 0,
    min_confidence: float | None = None,
) -> dict:
    """transformers' assisted generation (torch CPU, one thread) vs our speculative loop on
    the same pair, prompts, k and early-stop rule, interleaved in the same repeats. Needs
    torch. Both are timed end to end (transformers' prefill cannot be separated)."""
    # AutoModelForCausalLM: the class config.json names, GPT2LMHeadModel or a Llama family's
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)  # one thread: two showed large timing outliers here
    hf_target = AutoModelForCausalLM.from_pretrained(target_dir, torch_dtype=torch.float32).eval()
    hf_draft = AutoModelForCausalLM.from_pretrained(draft_dir, torch_dtype=torch.float32).eval()
    hf_draft.generation_config.num_assistant_tokens = k
    hf_draft.generation_config.num_assistant_tokens_schedule = "constant"
    # transformers stops drafting below the assistant's confidence threshold (0.4 unless
    # set): give it the same rule as ours, 0 meaning never
    hf_draft.generation_config.assistant_confidence_threshold = min_confidence or 0.0
    sampling = SamplingParams(temperature=temperature)
    drafter = model_drafter(reference, draft, min_confidence)  # ours, as in the main rows
    hf_rate, our_rate = [], []
    for r in range(repeats):
        hf_t = hf_n = our_t = our_n = 0.0
        for j, prompt in enumerate(prompts):
            ids = torch.tensor([prompt.tolist()])
            kwargs = {
                "do_sample": temperature > 0,
                "max_new_tokens": max_new_tokens,
                "min_new_tokens": max_new_tokens,
                "pad_token_id": 256,
                "attention_mask": torch.ones_like(ids),
                "assistant_model": hf_draft,
            }
            if temperature > 0:
                kwargs |= {"temperature": temperature, "top_k": 0}
            torch.manual_seed(seed + 1000 * r + j)
            with torch.no_grad():
                out, dt = timed(hf_target.generate, ids, **kwargs)
            hf_t, hf_n = hf_t + dt, hf_n + out.shape[1] - ids.shape[1]
            res, dt = timed(
                speculative_generate,
                target,
                drafter,
                prompt,
                k=k,
                max_new_tokens=max_new_tokens,
                rng=np.random.default_rng((seed, r, j)),
                sampling=sampling,
            )
            our_t, our_n = our_t + dt, our_n + len(res.tokens)
        hf_rate.append(hf_n / hf_t)
        our_rate.append(our_n / our_t)
    ratios = np.array(our_rate) / np.array(hf_rate)
    return {
        "k": k,
        "temperature": temperature,
        "transformers_tps": float(np.median(hf_rate)),
        "ours_tps": float(np.median(our_rate)),
        "ratio": float(np.median(ratios)),
        "ratio_min": float(ratios.min()),
        "ratio_max": float(ratios.max()),
    }


def by_position_text(rates: list[float]) -> str:
    # [0.93, 0.81, nan] -> "0.93 0.81 -" (-: no run ever examined that position)
    return " ".join("-" if r != r else f"{r:.2f}" for r in rates)


def floor_lines(report: BenchReport) -> list[str]:
    # each measured pass beside its floor: how far the pass is from what its bytes and FLOPs
    # need on this machine, and the v(T) the floors alone would give
    c, floors = report.costs, report.floors
    Ts = [T for T in sorted(c.target_append) if T in floors]
    if not Ts:
        return []
    return [
        f"- the floor of a pass (specdec/measure/roofline.py: per product "
        f"max(bytes / bandwidth, FLOPs / peak), {report.rates_text}): "
        f"floor(1) = {floors[1] * 1e3:.2f} ms; measured / floor: "
        + ", ".join(f"T={T} {c.target_append[T] / floors[T]:.2f}" for T in Ts)
        + "; v at the floors: "
        + ", ".join(f"v({T})={floors[T] / floors[1]:.2f}" for T in Ts),
    ]


def fast_path_lines(report: BenchReport) -> list[str]:
    # the fast path against the plain model on this machine, at every pass size profiled, and
    # the configurations it kept
    fast, plain = report.costs, report.plain_costs
    if plain is None:
        return []
    T = max(fast.target_append)
    ratios = {t: plain.target_append[t] / fast.target_append[t] for t in sorted(fast.target_append)}
    draft_ratio = plain.draft_step / fast.draft_step
    slower = [f"T={t}" for t, r in ratios.items() if r < 1] + (["draft"] if draft_ratio < 1 else [])
    lines = [
        f"- the same profile of the plain model (`--plain`): target step "
        f"{plain.target_step * 1e3:.2f} ms, draft step {plain.draft_step * 1e3:.3f} ms, "
        f"v({T})={plain.verify_cost(T):.2f}; plain / fast, every pass size: "
        + ", ".join(f"T={t} {r:.2f}x" for t, r in ratios.items())
        + f", draft step {draft_ratio:.2f}x"
        + (
            f" (the fast path was SLOWER here: {', '.join(slower)})"
            if slower
            else " (the fast path was not slower at any)"
        ),
    ]
    for name, plan in report.plans.items():
        lines += ["", f"Fast path, {name} model: " + describe_plan(plan).rstrip()]
    return lines


def json_report(report: BenchReport, machine: dict, command: str, status: str) -> dict:
    """Everything bench.md says, as data: the machine, the costs, every point."""

    def profile(c: CostProfile | None) -> dict | None:
        if c is None:
            return None
        return {
            "target_step_s": c.target_step,
            "draft_step_s": c.draft_step,
            "c": c.c,
            "v": {str(T): c.verify_cost(T) for T in sorted(c.target_append)},
        }

    def kept(plan) -> dict:
        # configuration -> the pass sizes it was chosen for (specdec/fast_cpu/plan.py)
        rows: dict[str, list[int]] = {}
        for T, config in sorted(plan.chosen.items()):
            rows.setdefault(config, []).append(T)
        return {config: row_ranges(r) for config, r in rows.items()}

    points = [
        {
            "drafter": p.drafter,
            "temperature": p.temperature,
            "k": p.k,
            "alpha": p.alpha,
            "tokens_per_round": p.tokens_per_round,
            "nodes_per_round": p.nodes_per_round,
            "alpha_by_position": p.alpha_by_position,
            "ar_tps": p.ar_tps,
            "spec_tps": p.spec_tps,
            "speedup": p.speedup,
            "speedups": p.speedups,
            "speedup_end_to_end": p.speedup_end_to_end,
            "c_loop": p.c_loop,
            "v_loop": p.v_loop,
            "predicted_loop": p.predicted_loop,
        }
        for p in report.points
    ]
    return {
        "status": status,
        "command": command,
        "machine": machine,
        "max_new_tokens": report.max_new_tokens,
        "repeats": report.repeats,
        "n_prompts": report.n_prompts,
        "drafter": report.drafter,
        "costs": profile(report.costs),
        "plain_costs": profile(report.plain_costs),
        "fast_path_kept_rows": {name: kept(plan) for name, plan in report.plans.items()},
        "floors_s": {str(T): f for T, f in sorted(report.floors.items())},
        "points": points,
        "transformers_rows": report.transformers_rows,
    }


def markdown_report(report: BenchReport, machine: str, command: str) -> str:
    c = report.costs
    lines = [
        f"Machine: {machine}",
        f"Command: `{command}`",
        f"{report.n_prompts} prompts x {report.max_new_tokens} new tokens, "
        f"{report.repeats} repeats; figures are medians over repeats, speedups are ratios "
        "measured within each repeat (spread = min..max over repeats).",
        f"Drafter: {report.drafter} (specdec/drafting.py). Drafting: "
        + (
            "fixed k per round."
            if report.min_confidence is None
            else f"a round stops early when the draft's top probability is below "
            f"{report.min_confidence:g} (k is the most it drafts)."
        ),
        "",
        "Costs measured on this machine (every T in turn, the fastest of 30 passes, warm cache):",
        "",
        f"- target single-token step: {c.target_step * 1e3:.2f} ms; "
        f"draft step: {c.draft_step * 1e3:.3f} ms; c = {c.c:.3f}",
        "- verification cost v(T) = time(T new positions) / time(1): "
        + ", ".join(f"v({T})={c.verify_cost(T):.2f}" for T in sorted(c.target_append)),
        *floor_lines(report),
        *fast_path_lines(report),
        "",
        "Speed of the decode phase (after the prompt's prefill, which both methods do once, "
        "identically); the last column includes the prefill:",
        "",
        "| T | k | alpha | tokens/round (measured / E) | AR tok/s | spec tok/s | "
        "**speedup** (spread) | end to end | alpha by position 1..k |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in report.points:
        lines.append(
            f"| {p.temperature:g} | {p.k} | {p.alpha:.3f} | {p.tokens_per_round:.2f} / "
            f"{p.predicted_tokens_per_round:.2f} | {p.ar_tps:.1f} | {p.spec_tps:.1f} | "
            f"**{p.speedup:.2f}x** ({min(p.speedups):.2f}..{max(p.speedups):.2f}) | "
            f"{p.speedup_end_to_end:.2f}x | {by_position_text(p.alpha_by_position)} |"
        )
    lines += [
        "",
        "Where the time goes, in units of one autoregressive decode step: c = drafting time "
        "per draft token, v = the target pass over k+1 positions (with its k+1 "
        "distributions), overhead = accept/reject + bookkeeping per round. 'isolated' costs "
        "come from the profile above, 'run' costs from the stage clocks of the runs "
        "themselves. Predictions: E / (k c + v).",
        "",
        "| T | k | c isolated / run | v(k+1) isolated / run | overhead | Leviathan (v=1) | "
        "isolated c, v | run c, v | measured / run prediction |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in report.points:
        lines.append(
            f"| {p.temperature:g} | {p.k} | {c.c:.3f} / {p.c_loop:.3f} | "
            f"{c.verify_cost(p.k + 1):.2f} / {p.v_loop:.2f} | {p.overhead_loop:.3f} | "
            f"{p.predicted:.2f}x | {p.predicted_corrected:.2f}x | {p.predicted_loop:.2f}x | "
            f"{p.speedup / p.predicted_loop:.2f} |"
        )
    if report.transformers_rows:
        lines += [
            "",
            "Against transformers' assisted generation (torch CPU, 1 thread), same pair, "
            "prompts and k, interleaved in the same repeats:",
            "",
            "| T | k | transformers tok/s | ours tok/s | ours / transformers (spread) |",
            "|---|---|---|---|---|",
        ]
        for row in report.transformers_rows:
            lines.append(
                f"| {row['temperature']:g} | {row['k']} | {row['transformers_tps']:.1f} | "
                f"{row['ours_tps']:.1f} | **{row['ratio']:.2f}x** "
                f"({row['ratio_min']:.2f}..{row['ratio_max']:.2f}) |"
            )
    return "\n".join(lines) + "\n"
