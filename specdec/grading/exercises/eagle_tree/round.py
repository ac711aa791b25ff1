"""The eagle-tree-round family: the submitted growth inside a real EAGLE-2 drafter.

`GrownTree` is the reference's EagleTreeDrafter with its growth (EagleTreeDrafter.grow and
the ranking after it) taken from a function: the catch-up, the block, its cache, commit and
rollback stay the reference's. Its `confidence` (`DrafterConfidence`) is the drafter's own
pass: the rows asked are fused with their parents' outputs and run through the block as one
tree pass over its cache, exactly as the reference's grow runs a level (in the reference's
row order, whatever order they are asked in), so a growth that asks what the reference asks
gets the reference's rows bit for bit. It runs through the reference's tree loop beside the
reference's EagleTreeDrafter, on the same target, weights, prompt and seed (the prompts and
seeds drawn from the grading's secret: `round_cases`); every round's tree (tokens and
parents), the rows of each of its passes, and the text are compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from specdec.grading.engine.core import Check, Outcome
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import Submission, SubmissionCrash
from specdec.grading.exercises.eagle_tree.asking import Asked
from specdec.grading.exercises.eagle_tree.cases import call_growth
from specdec.grading.exercises.eagle_tree.mistakes import MISTAKES
from specdec.grading.exercises.eagle_tree.rule import grow, paths_of
from specdec.grading.project import (
    GPT,
    POINT,
    ROOT,
    EagleDrafter,
    EagleTreeDrafter,
    GPTConfig,
    SamplingParams,
    Tree,
    chain_parents,
    init_eagle_params,
    init_params,
    tree_forward_rows,
    tree_speculative_generate,
)

CONFIG = GPTConfig(n_vocab=12, n_ctx=64, n_embd=16, n_head=2, n_layer=2)
SHAPE = {"max_nodes": 8, "depth": 4, "top": 2}  # the drafter's: a budget the levels overrun


@cache
def eagle_pair() -> tuple[GPT, dict]:
    """(target, EAGLE weights): a two-block GPT and a random drafter for it."""
    target = GPT(CONFIG, init_params(CONFIG, np.random.default_rng(61), std=0.3))
    return target, init_eagle_params(CONFIG, np.random.default_rng(62), std=0.3)


@dataclass(frozen=True)
class RoundCase:
    name: str
    prompt: tuple[int, ...]
    new_tokens: int
    temperature: float  # 0: greedy
    seed: int

    def describe(self) -> str:
        how = "greedy" if self.temperature == 0 else f"T = {self.temperature:g}, seed {self.seed}"
        shape = ", ".join(f"{k} = {v}" for k, v in SHAPE.items())
        return f"{how}, prompt {list(self.prompt)}, {shape}, {self.new_tokens} new tokens"


ROUND_SEED = 63  # the grader's stream (from the grading's secret) of the runs' prompts and seeds
ROUND_NAMES = ("greedy", "sampled")


@cache
def round_cases(secret: int) -> tuple[RoundCase, ...]:
    """The two runs of one grading, drawn from its secret: a greedy one and a sampled one (T =
    1), each on a prompt of 4 to 6 tokens and 20 new tokens (a student cannot know them
    before; the drafter and its target stay the same)."""
    rng = grader_rng(ROUND_SEED, secret)

    def prompt() -> tuple[int, ...]:
        return tuple(int(x) for x in rng.integers(0, CONFIG.n_vocab, int(rng.integers(4, 7))))

    return (
        RoundCase("greedy", prompt(), 20, 0.0, int(rng.integers(2**31))),
        RoundCase("sampled", prompt(), 20, 1.0, int(rng.integers(2**31))),
    )


@dataclass
class Step:
    label: str  # "round 3"
    context: tuple[int, ...]
    tokens: tuple[int, ...] = ()  # the tree, the root first
    parents: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()  # the rows of each pass of the growth (the catch-up's not)


class Misfit(Exception):
    """The growth's answer is no tree the drafter can hand over."""

    def __init__(self, step: Step, reason: str) -> None:
        super().__init__(reason)
        self.step, self.reason = step, reason


class DrafterConfidence(Asked):
    """The drafter's confidence in the nodes asked: one tree pass of its block per call."""

    def __init__(self, drafter: EagleTreeDrafter, f_root: np.ndarray, depth: int) -> None:
        super().__init__(drafter.n_vocab, depth)
        self.drafter = drafter
        self.slot_parents = list(chain_parents(drafter.eagle.cache.pending))
        root_row = drafter.confidence(f_root[None])[0]
        self.nodes = {(): (len(self.slot_parents) - 1, f_root, root_row)}  # path -> slot, f^, c
        self.root_row = root_row.astype(np.float64)

    def creation_key(self, path) -> tuple[int, ...]:
        # the reference's node order within a level: by parent, then best offered first
        key = []
        for k in range(len(path)):
            row = self.nodes[tuple(path[:k])][2]
            key.append(int(np.flatnonzero(np.argsort(-row, kind="stable") == path[k])[0]))
        return tuple(key)

    def rows(self, paths: np.ndarray) -> np.ndarray:
        eagle = self.drafter.eagle
        asked = [tuple(int(t) for t in p) for p in paths]
        order = sorted(range(len(asked)), key=lambda j: self.creation_key(asked[j]))
        room = eagle.cache.capacity - eagle.cache.end
        if len(asked) > room:
            raise ValueError(f"the drafter's cache has room for {room} more rows, not {len(asked)}")
        ordered = [asked[j] for j in order]
        g = eagle.fuse(
            np.array([p[-1] for p in ordered]), np.stack([self.nodes[p[:-1]][1] for p in ordered])
        )
        self.slot_parents += [self.nodes[p[:-1]][0] for p in ordered]
        out = tree_forward_rows(eagle.block_model, g, self.slot_parents, eagle.cache)
        confidence = self.drafter.confidence(out)
        first = len(self.slot_parents) - len(ordered)
        for j, p in enumerate(ordered):
            self.nodes[p] = (first + j, out[j], confidence[j])
        return np.stack([self.nodes[p][2] for p in asked]).astype(np.float64)


class RecordingTree(EagleTreeDrafter):
    """The reference's EagleTreeDrafter, its trees and passes written down."""

    def __init__(self, target: GPT, params: dict) -> None:
        super().__init__(EagleDrafter(target, params), **SHAPE)
        self.steps: list[Step] = []
        self.fused: list[int] = []
        fuse = self.eagle.fuse

        def counted(tokens, f):  # every fuse of a proposal after the first (its catch-up)
            self.fused.append(len(tokens))
            return fuse(tokens, f)

        self.eagle.fuse = counted

    def propose_tree(self, context, max_depth, max_nodes, sampling, rng) -> Tree:
        self.fused = []
        step = Step(f"round {len(self.steps) + 1}", tuple(int(t) for t in context))
        self.steps.append(step)
        tree = self.grown(context, max_depth, max_nodes, sampling, rng)
        step.tokens, step.parents = tuple(tree.tokens.tolist()), tuple(tree.parents.tolist())
        step.rows = tuple(self.fused[1:])
        return tree

    def grown(self, context, max_depth, max_nodes, sampling, rng) -> Tree:
        return super().propose_tree(context, max_depth, max_nodes, sampling, rng)


class GrownTree(RecordingTree):
    """The same drafter, its tree from `growth(root, root_confidence, confidence, top, depth,
    max_nodes) -> (tokens, parents)`; the catch-up and the cache are the reference's."""

    def __init__(self, target: GPT, params: dict, growth) -> None:
        super().__init__(target, params)
        self.growth = growth

    def grown(self, context, max_depth, max_nodes, sampling, rng) -> Tree:
        context = np.asarray(context, dtype=np.int64)
        eagle, n, step = self.eagle, len(context), self.steps[-1]
        eagle.check_known(n)
        eagle.start_proposal()  # as the reference's: rolls back an unverified proposal
        budget, levels = min(self.max_nodes, max_nodes - 1), min(self.depth, max_depth)
        tokens, parents = [int(context[-1])], [-1]
        if n >= 2 and budget > 0 and levels > 0:
            asked = DrafterConfidence(self, eagle.catch_up(context), levels)
            tokens, parents = self.growth(
                int(context[-1]), asked.root_row, asked, self.top, levels, budget
            )
            tokens, parents = list(tokens), list(parents)
            self.check(step, tokens, parents, budget, int(context[-1]))
        q = np.zeros((len(tokens), self.n_vocab), dtype=np.float32)
        q[np.arange(1, len(tokens)), tokens[1:]] = 1.0
        draws = (ROOT,) + (POINT,) * (len(tokens) - 1)
        return Tree(np.array(tokens, np.int64), np.array(parents, np.int64), q, draws)

    def check(self, step: Step, tokens, parents, budget: int, root: int) -> None:
        step.tokens, step.parents = tuple(tokens), tuple(parents)  # shown even when refused
        if len(tokens) != len(parents) or not tokens or (tokens[0], parents[0]) != (root, -1):
            raise Misfit(
                step, "the tree must start with the root: tokens[0] = root, parents[0] = -1"
            )
        if paths_of(tokens, parents) is None:
            raise Misfit(step, "a parent that is not an earlier node")
        if len(tokens) - 1 > budget or min(tokens) < 0 or max(tokens) >= self.n_vocab:
            raise Misfit(
                step, f"more than max_nodes = {budget} candidates, or a token out of range"
            )


@dataclass
class Run:
    steps: list[Step]
    tokens: tuple[int, ...] = ()
    error: str = ""
    misfit: Misfit | None = field(default=None)


def run_case(case: RoundCase, drafter: RecordingTree) -> Run:
    target, _ = eagle_pair()
    run = Run(drafter.steps)
    try:
        result = tree_speculative_generate(
            target,
            drafter,
            list(case.prompt),
            max_new_tokens=case.new_tokens,
            rng=np.random.default_rng(case.seed),
            sampling=SamplingParams(case.temperature),
        )
    except SubmissionCrash:
        raise
    except Misfit as misfit:
        run.misfit, run.error = misfit, misfit.reason
        return run
    except (ValueError, IndexError) as error:  # the tree loop refused the tree
        run.error = f"{type(error).__name__}: {error}"
        return run
    run.tokens = tuple(result.tokens)
    return run


@cache
def reference_run(case: RoundCase) -> Run:
    target, params = eagle_pair()
    run = run_case(case, RecordingTree(target, params))
    if run.error:  # the project's own drafter: never, unless reference/tree/eagle.py changed
        raise RuntimeError(f"the reference EagleTreeDrafter's run {case.name} failed: {run.error}")
    return run


def rule_growth(slip: str = ""):
    def growth(root, row, asked, top, depth, max_nodes):
        grown = grow(root, row, asked, top, depth, max_nodes, slip)
        return grown.tokens, grown.parents

    return growth


@cache
def slip_run(case: RoundCase, slip: str) -> Run:
    target, params = eagle_pair()
    try:
        return run_case(case, GrownTree(target, params, rule_growth(slip)))
    except ValueError as error:  # the slip asked what no pass may ask
        return Run([], error=str(error))


def student_run(sub: Submission, case: RoundCase) -> Run:
    target, params = eagle_pair()

    def growth(*args):
        answer = call_growth(sub, [args])[0]
        return answer.tokens.tolist(), answer.parents.tolist()

    return run_case(case, GrownTree(target, params, growth))


def same_step(a: Step, b: Step) -> bool:
    return (a.tokens, a.parents, a.rows) == (b.tokens, b.parents, b.rows)


def same_run(a: Run, b: Run) -> bool:
    steps = len(a.steps) == len(b.steps) and all(map(same_step, a.steps, b.steps))
    return steps and (a.tokens, a.error) == (b.tokens, b.error)


def round_hint(case: RoundCase, mine: Run) -> str:
    for slip, hint in MISTAKES:
        if same_run(mine, slip_run(case, slip)):
            return hint
    return (
        "the eagle-tree family's cases show the same difference on toy drafters, each with "
        "the rows it read: start there"
    )


def tree_text(step: Step) -> str:
    pairs = [f"{t}<-{p}" for t, p in zip(step.tokens[1:], step.parents[1:], strict=False)]
    return f"root {step.tokens[0] if step.tokens else '?'}, " + (", ".join(pairs) or "no node")


def compare(case: RoundCase, mine: Run, theirs: Run) -> Outcome:
    for s, ref in enumerate(theirs.steps):
        if s >= len(mine.steps) or not same_step(mine.steps[s], ref):
            step = mine.steps[s] if s < len(mine.steps) else Step(ref.label, ref.context)
            story = [
                case.describe(),
                f"{ref.label}, context {list(ref.context)}:",
                f"  the reference's tree (token<-parent): {tree_text(ref)}",
                f"  yours:                                {tree_text(step)}",
                f"  rows of its passes: the reference's {list(ref.rows)}, yours {list(step.rows)}",
            ]
            if mine.error:
                story.append(f"the run then stopped: {mine.error}")
            return Outcome(False, f"{ref.label} differs", story, round_hint(case, mine), n=1)
    if mine.error or mine.tokens != theirs.tokens:
        story = [case.describe(), f"the run: {mine.error or 'another text than the reference'}"]
        return Outcome(False, "the run differs", story, round_hint(case, mine), n=1)
    passes = sum(len(s.rows) for s in theirs.steps)
    return Outcome(
        True,
        f"the reference drafter's {len(theirs.steps)} trees and {passes} passes, and its text",
        n=1,
    )


def round_check(index: int) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        case = round_cases(grading_secret())[index]
        return compare(case, student_run(sub, case), reference_run(case))

    how = "greedy" if index == 0 else "sampled at T = 1"
    what = (
        f"a real EAGLE-2 drafter's trees, {how}, on a prompt drawn for this grading "
        f"({', '.join(f'{k} = {v}' for k, v in SHAPE.items())}, 20 new tokens)"
    )
    return Check(f"eagle-tree-round/{ROUND_NAMES[index]}", what, False, run)


def round_checks() -> list[Check]:
    return [round_check(i) for i in range(len(ROUND_NAMES))]
