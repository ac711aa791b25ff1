"""The eagle-block-round family: the submitted forward in place of a real EAGLE drafter's block.

The reference's EagleDrafter runs through the reference loop (a tiny target, EAGLE weights
drawn for it, a prompt and a seed drawn from the grading's secret), and every time it runs
its block (the prefill, each round's catch-up, each draft step) the pairs it fuses are
written down with the rows its block gives, from its KV cache. The submission is then asked,
for each of those steps, the block's rows from an empty cache over the drafter's whole history
of pairs (committed and temporary, the draft rows' own predicted features f^ included): its
last rows must be the block's, and through the target's ln_f and output layer they give the
q rows the drafter drafted from. A block without position embedding and with a causal mask
gives a row the same whether its history is cached or recomputed; one that adds wpe, or lets
a row read later ones, does not.

The run is the reference's (its drafts are drawn from its own rows), so a correct forward,
which agrees to rounding, is never put at a near tie between two drafts; the story says which
drafts the submission's rows would have drawn when they differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specdec.grading.engine.core import Check, Outcome
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.eagle_block.cases import call_forward, describe_call
from specdec.grading.exercises.eagle_block.mistakes import fitting, generic_hint
from specdec.grading.exercises.eagle_block.rule import FUSE, TARGET, TOL, gap, rule
from specdec.grading.project import (
    GPT,
    Draft,
    EagleDrafter,
    GPTConfig,
    SamplingParams,
    init_eagle_params,
    init_params,
    speculative_generate,
)

CONFIG = GPTConfig(n_vocab=16, n_ctx=40, n_embd=8, n_head=2, n_layer=2)
ROUND_SEED = 62  # the grader's stream (from the secret) of the runs' prompts and seeds


def eagle_pair(secret: int) -> tuple[GPT, dict]:
    """(target, EAGLE weights) drawn from the secret: a two-block GPT, and a drafter whose
    LayerNorm gains and biases are not 1 and 0 (so that each counts)."""
    rng = grader_rng(ROUND_SEED + 1, secret)
    target = GPT(CONFIG, init_params(CONFIG, rng, std=0.3))
    params = init_eagle_params(CONFIG, rng, std=0.3)
    for name, value in params.items():
        if name.endswith((".bias", "ln_1.weight", "ln_2.weight")):
            params[name] = (value + 0.2 * rng.standard_normal(value.shape)).astype(np.float32)
    return target, params


@dataclass(frozen=True)
class RoundCase:
    name: str
    prompt: tuple[int, ...]
    k: int
    new_tokens: int
    temperature: float  # 0: greedy
    seed: int

    def describe(self) -> str:
        how = "greedy" if self.temperature == 0 else f"T = {self.temperature:g}, seed {self.seed}"
        return f"{how}, prompt {list(self.prompt)}, k = {self.k}, {self.new_tokens} new tokens"


def round_cases(secret: int) -> tuple[RoundCase, ...]:
    rng = grader_rng(ROUND_SEED, secret)

    def prompt() -> tuple[int, ...]:
        return tuple(int(x) for x in rng.integers(0, CONFIG.n_vocab, int(rng.integers(3, 8))))

    return (
        RoundCase("greedy", prompt(), 3, 14, 0.0, int(rng.integers(2**31))),
        RoundCase("sampled", prompt(), 2, 18, 1.0, int(rng.integers(2**31))),
    )


@dataclass
class Step:
    label: str  # "prefill", "round 2, catch-up", "round 2, draft step 1"
    tokens: np.ndarray  # [end]: the history's tokens, the pairs of slots 0..end-1
    features: np.ndarray  # [end, C]: their features (true ones, or the drafter's own f^)
    start: int  # the first new slot: the block computed rows start..end-1
    rows: np.ndarray  # [end - start, C]: the reference block's rows (from its cache)
    own: int = 0  # how many of the new rows were fed the drafter's own f^


@dataclass
class Proposal:
    steps: list[int]  # the steps whose rows gave q: catch-up, then draft steps
    draft: Draft
    sampling: SamplingParams


@dataclass
class Run:
    steps: list[Step] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)


class RecordingEagle(EagleDrafter):
    """The reference's EagleDrafter, each run of its block written down with its inputs."""

    def __init__(self, target: GPT, params: dict) -> None:
        super().__init__(target, params)
        self.run = Run()
        self.pairs = (
            np.zeros(self.n_ctx, dtype=np.int64),
            np.zeros((self.n_ctx, target.config.n_embd), dtype=np.float32),
        )
        self.round, self.first, self.fed = 0, 0, None  # round 0: the prefill

    def fuse(self, tokens: np.ndarray, f: np.ndarray) -> np.ndarray:
        self.fed = (np.array(tokens, dtype=np.int64), np.array(f, dtype=np.float32))
        return super().fuse(tokens, f)

    def step(self, g: np.ndarray) -> np.ndarray:
        (tokens, f), start = self.fed, self.cache.end
        end = start + len(g)
        self.pairs[0][start:end], self.pairs[1][start:end] = tokens, f
        rows = super().step(g)
        i = len(self.run.steps) - self.first  # a proposal's first step is its catch-up
        label = f"round {self.round}, " + ("catch-up" if i == 0 else f"draft step {i}")
        history = (self.pairs[0][:end].copy(), self.pairs[1][:end].copy())
        own = len(g) if self.round and i else 0  # draft rows are fed the drafter's own f^
        step = Step(label if self.round else "prefill", *history, start, rows.copy(), own)
        self.run.steps.append(step)
        return rows

    def propose(self, context, k, sampling, rng) -> Draft:
        self.round, self.first = self.round + 1, len(self.run.steps)
        draft = super().propose(context, k, sampling, rng)
        if len(draft.tokens):
            steps = list(range(self.first, len(self.run.steps)))
            self.run.proposals.append(Proposal(steps, draft, sampling))
        return draft


def block_params(target: GPT, params: dict) -> dict[str, np.ndarray]:
    # what the submission is handed: the target's shared tensors, then the drafter's own
    shared = {n: target.params[n] for n in TARGET}
    return (
        shared | {n: params[n] for n in FUSE} | {n: v for n, v in params.items() if n[:2] == "h."}
    )


@dataclass
class Replay:
    case: RoundCase
    run: Run
    drafter: RecordingEagle
    given: dict  # the params handed to the submission

    def calls(self) -> list[tuple]:
        return [(s.tokens, s.features, self.given, CONFIG.n_head) for s in self.run.steps]


RUNS: dict = {}  # (case, secret) -> Replay: the reference's run, once per grading


def reference_run(case: RoundCase, secret: int) -> Replay:
    if (case, secret) not in RUNS:
        if len(RUNS) > 8:
            RUNS.clear()
        target, params = eagle_pair(secret)
        drafter = RecordingEagle(target, params)
        speculative_generate(
            target,
            drafter,
            list(case.prompt),
            k=case.k,
            max_new_tokens=case.new_tokens,
            rng=np.random.default_rng(case.seed),
            sampling=SamplingParams(case.temperature),
        )
        RUNS[case, secret] = Replay(case, drafter.run, drafter, block_params(target, params))
    return RUNS[case, secret]


def q_rows(replay: Replay, proposal: Proposal, outputs: list) -> np.ndarray:
    # the q rows the submission's rows give: row i from the last new row of the i-th step
    rows = [outputs[s][-1].astype(np.float32) for s in proposal.steps]
    made = [replay.drafter.q_row(row, proposal.sampling) for row in rows]
    return np.array(made[: len(proposal.draft.tokens)])


def usable(rows: np.ndarray, step: Step) -> bool:
    # rows the drafter's q can be read from: the step's shape, every value finite
    return rows.shape == (len(step.tokens), CONFIG.n_embd) and bool(np.all(np.isfinite(rows)))


def step_story(replay: Replay, s: int, mine: np.ndarray, worst: float, outputs: list) -> list:
    steps = replay.run.steps
    step = steps[s]
    end = len(step.tokens)
    fed = "the drafter's own predicted feature f^" if step.own else "true features"
    story = [
        replay.case.describe(),
        f"{step.label}: {end - step.start} new row(s) at slots {step.start}..{end - 1} "
        f"({fed}), after {step.start} cached slot(s)",
        f"  asked: {describe_call(step.tokens, step.features, replay.given, CONFIG.n_head)}",
    ]
    if mine.shape != (end, CONFIG.n_embd):
        return [*story, f"  yours has shape {list(mine.shape)}, not [{end}, {CONFIG.n_embd}]"]
    story += [
        f"  your last {end - step.start} row(s) against the block's (run from its cache): "
        f"gap {worst:.2e}, more than {TOL:g}",
        f"  the block's first new row: {np.round(step.rows[0].astype(np.float64), 4).tolist()}",
        f"  yours:                     {np.round(mine[step.start], 4).tolist()}",
    ]
    for proposal in replay.run.proposals:
        if s in proposal.steps and all(usable(outputs[i], steps[i]) for i in proposal.steps):
            made = q_rows(replay, proposal, outputs)
            story.append(
                f"  the drafter drafted {proposal.draft.tokens.tolist()} from its q rows; "
                f"yours are up to {np.abs(made - proposal.draft.q).max():.3f} away from them, "
                f"their likeliest tokens {[int(np.argmax(q)) for q in made]}"
            )
    return story


def compare(replay: Replay, outputs: list) -> Outcome:
    steps = replay.run.steps
    for s, step in enumerate(steps):
        mine, end = outputs[s], len(step.tokens)
        fits = mine.shape == (end, CONFIG.n_embd)
        worst = gap(mine[step.start :], step.rows) if fits else np.inf
        if worst <= TOL:
            continue
        story = step_story(replay, s, mine, worst, outputs)
        calls = replay.calls()
        wrong = [(c, o) for c, o in zip(calls, outputs, strict=True) if gap(o, rule(*c)) > TOL]
        hint = fitting(wrong) or generic_hint(calls[s], mine)
        return Outcome(False, f"{step.label} differs", story, hint, n=len(steps))
    return Outcome(
        True,
        f"the block's rows at each of {len(steps)} steps of a real drafter's run (prefill, "
        f"catch-ups, draft steps), so its {len(replay.run.proposals)} proposals' q rows",
        n=len(steps),
    )


def round_check(index: int, name: str) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        replay = reference_run(round_cases(grading_secret())[index], grading_secret())
        return compare(replay, call_forward(sub, replay.calls()))

    what = f"a real EAGLE drafter's block, {name}, every step of a run drawn for this grading"
    return Check(f"eagle-block-round/{name}", what, False, run)


def round_checks() -> list[Check]:
    return [round_check(0, "greedy"), round_check(1, "sampled")]
