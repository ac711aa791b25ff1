"""The eagle-round family: the submitted `catch_up_pairs` drives a real EAGLE drafter.

`StudentEagle` is the reference's EagleDrafter with its catch-up (the pairs fed at prefill
and at the start of each proposal) taken from the submission; everything else (the fusion,
the block and its cache, q, the draft steps, commit and rollback) is the reference's own.
It runs through the reference loop beside the reference's EagleDrafter, on the same target,
weights, prompt and generator, and every step of the two is compared bit for bit: the pairs
fed, the drafts and their q rows, and the drafter's committed cache after the step. The
weights are the same in every grading; the prompts are drawn afresh for each grading from its
secret, and the generator the loop is handed is the grading's own (engine/secret.py). A correct
function makes the two drafters one; a misaligned one builds a cache that no fresh prefill
would (though the text stays exact: verification keeps any drafter exact, and what a wrong
alignment costs is acceptance).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache, lru_cache

import numpy as np

from specdec.grading.engine.core import Check, Outcome
from specdec.grading.engine.secret import grader_rng, grading_secret, held_pair, submission_rng
from specdec.grading.engine.submission import Submission, SubmissionCrash
from specdec.grading.exercises.eagle_align.cases import (
    Answer,
    call_pairs,
    describe_call,
    rule,
    same,
)
from specdec.grading.exercises.eagle_align.mistakes import fitting, generic_hint, pairs_text
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

CONFIG = GPTConfig(n_vocab=16, n_ctx=48, n_embd=16, n_head=2, n_layer=2)


@cache
def eagle_pair() -> tuple[GPT, dict]:
    """(target, EAGLE weights): a two-block GPT and a random drafter for it, the same in every
    grading, at a scale where a run holds rounds that keep every draft and rounds that keep
    none."""
    target = GPT(CONFIG, init_params(CONFIG, np.random.default_rng(32), std=0.3))
    return target, init_eagle_params(CONFIG, np.random.default_rng(33), std=0.3)


@dataclass(frozen=True)
class RoundCase:
    name: str
    prompt: tuple[int, ...]
    k: int
    new_tokens: int
    temperature: float  # 0: greedy
    seed: int  # the loop is handed the grading's generator number `seed` (submission_rng)

    def setting(self) -> str:
        how = "greedy" if self.temperature == 0 else f"T = {self.temperature:g}"
        return f"{how}, k = {self.k}, {self.new_tokens} new tokens"

    def describe(self) -> str:
        how, _, rest = self.setting().partition(", ")
        return f"{how}, prompt {list(self.prompt)}, {rest}"


SHAPES = (  # the rounds of every grading, their prompts drawn for each
    RoundCase("greedy", (), 3, 16, 0.0, 0),
    RoundCase("sampled", (), 2, 28, 1.0, 7),
)
ROUND_SEED = 3233  # the grader's stream (from the grading's secret) of the rounds' prompts
TRIES = 100  # greedy prompts drawn at most, for a run that holds every kind of catch-up


@lru_cache(maxsize=4)
def round_cases(secret: int) -> tuple[RoundCase, ...]:
    """The rounds of one grading, on prompts of 4 to 8 tokens drawn from its secret (the
    prefill, of all but the last, feeds 2 pairs or more). The greedy prompt is drawn again
    until its run holds every kind of catch-up: a prefill, one pair (after a round that kept
    no draft), k + 1 pairs (after one that kept them all: about one prompt in ten). The
    sampled run, of more tokens, holds them too but for one grading in a hundred or so."""
    rng = grader_rng(ROUND_SEED, secret)

    def drawn(shape: RoundCase) -> RoundCase:
        n = int(rng.integers(4, 9))
        return replace(shape, prompt=tuple(int(x) for x in rng.integers(0, CONFIG.n_vocab, n)))

    for _ in range(TRIES):  # a greedy run draws nothing: its rounds are the prompt's alone
        greedy = drawn(SHAPES[0])
        run = reference_run(greedy)
        if 0 in run.kept and greedy.k + 1 in [len(s.fed.tokens) for s in run.steps[1:]]:
            break
    return greedy, drawn(SHAPES[1])


@dataclass
class Step:
    label: str  # "prefill", "round 3"
    call: tuple  # (context [n], features [m, C], cached): the catch-up's inputs
    fed: Answer  # the pairs fed
    want: Answer  # the pairs the contract feeds (none where nothing is asked)
    draft: Draft | None = None  # a proposal's drafts and q rows
    cached_after: tuple | None = None  # (K, V) the drafter's cache committed after the step


class Misfit(Exception):
    """The submission's pairs cannot be fed to the block at all."""

    def __init__(self, step: Step, reason: str) -> None:
        super().__init__(reason)
        self.step, self.reason = step, reason


class RecordingEagle(EagleDrafter):
    """The reference's EagleDrafter, its steps written down (what a correct catch-up feeds is
    the contract's rule: tests/grader/test_exercise_eagle_align.py holds it so)."""

    def __init__(self, target: GPT, params: dict) -> None:
        super().__init__(target, params)
        self.steps: list[Step] = []

    def catch_up_call(self, context) -> tuple:
        context = np.asarray(context, dtype=np.int64)
        return context.copy(), self.features[: self.n_known].copy(), self.cache.length

    def answer(self, call: tuple) -> Answer:  # the pairs a catch-up on `call` feeds
        return rule(*call)

    def start_step(self, label: str, call: tuple, asked: bool = True) -> Step:
        # asked False: a proposal of no draft, or before any feature, feeds nothing
        context, features, _ = call
        want = rule(*call) if asked else rule(context[:0], features[:0], 0)
        self.steps.append(Step(label, call, self.answer(call) if asked else want, want))
        return self.steps[-1]

    def prefill(self, tokens) -> None:
        step = self.start_step("prefill", self.catch_up_call(tokens))
        super().prefill(tokens)
        step.cached_after = self.cache.committed()

    def propose(self, context, k, sampling, rng) -> Draft:
        call = self.catch_up_call(context)
        step = self.start_step(f"round {len(self.steps)}", call, k > 0 and len(call[0]) > 1)
        step.draft = super().propose(context, k, sampling, rng)
        return step.draft

    def commit(self, n_accepted: int) -> None:
        super().commit(n_accepted)
        self.steps[-1].cached_after = self.cache.committed()


class StudentEagle(RecordingEagle):
    """The same drafter, its catch-up pairs from `pairs(context, features, cached) -> Answer`
    (the submission): in `catch_up`, the reference's own step of a proposal, and in `prefill`
    (written as the reference's, which pairs inline); the rest is the reference's."""

    def __init__(self, target: GPT, params: dict, pairs) -> None:
        super().__init__(target, params)
        self.pairs = pairs

    def answer(self, call: tuple) -> Answer:
        return self.pairs(call) if len(call[0]) else rule(*call)  # no context: nothing to ask

    def feed(self, step: Step) -> np.ndarray:
        # the step's pairs -> f^ [r, C], the block's rows, written as temporary slots
        tokens, feats = step.fed.tokens, step.fed.feats
        C = self.features.shape[1]
        if tokens.ndim != 1 or feats.shape != (len(tokens), C):
            raise Misfit(
                step,
                f"tokens {list(tokens.shape)} and feats {list(feats.shape)} cannot be fused: "
                f"one token and one feature row [C = {C}] per pair",
            )
        if len(tokens) and not (
            np.all(tokens == np.round(tokens)) and 0 <= tokens.min() and tokens.max() < self.n_vocab
        ):
            raise Misfit(step, f"tokens {tokens.tolist()} are not token ids of the context")
        return self.step(self.fuse(tokens.astype(np.int64), feats.astype(np.float32)))

    def prefill(self, tokens) -> None:
        step = self.start_step("prefill", self.catch_up_call(tokens))
        if len(step.fed.tokens):
            self.feed(step)
            self.cache.commit(len(step.fed.tokens))
        step.cached_after = self.cache.committed()

    def catch_up(self, context: np.ndarray) -> np.ndarray:
        # the reference's propose calls this after its rollback, with k >= 1 and n >= 2; the
        # step (started by RecordingEagle.propose) holds the submission's pairs -> f^(n-1)
        step = self.steps[-1]
        if len(step.fed.tokens) == 0:
            raise Misfit(step, "no pair was fed: the block has no row to draft from")
        f_hat = self.feed(step)[-1]  # the block's row for the last pair
        self._fed_context = len(step.fed.tokens)  # the rows commit() keeps
        return f_hat


@dataclass
class Run:
    steps: list[Step]
    tokens: tuple[int, ...] = ()
    kept: tuple[int, ...] = ()  # drafts kept per round
    error: str = ""  # what stopped the run early
    misfit: Misfit | None = None


def run_case(case: RoundCase, drafter: RecordingEagle) -> Run:
    target, _ = eagle_pair()
    run = Run(drafter.steps)
    try:
        result = speculative_generate(
            target,
            drafter,
            list(case.prompt),
            k=case.k,
            max_new_tokens=case.new_tokens,
            rng=submission_rng(case.seed),  # the grading's own (engine/secret.py)
            sampling=SamplingParams(case.temperature),
        )
    except SubmissionCrash:
        raise
    except Misfit as misfit:
        run.misfit, run.error = misfit, misfit.reason
        return run
    except (ValueError, IndexError) as error:  # the drafter's cache or the loop refused
        run.error = f"{type(error).__name__}: {error}"
        return run
    run.tokens, run.kept = tuple(result.tokens), tuple(result.stats.accepted_per_round)
    return run


def reference_run(case: RoundCase) -> Run:
    """The reference drafter's run of `case`, on this grading's generator."""
    return recorded_run(case, held_pair())


@lru_cache(maxsize=8)
def recorded_run(case: RoundCase, pair: tuple[int, int]) -> Run:
    # `pair` (the grading's secret and generators' entropy) keys the cache: the run is made
    # with submission_rng, which reads it
    target, params = eagle_pair()
    run = run_case(case, RecordingEagle(target, params))
    if run.error:  # the project's own drafter: never, unless reference/eagle.py changed
        raise RuntimeError(f"the reference EagleDrafter's run {case.name} failed: {run.error}")
    return run


def student_run(sub: Submission, case: RoundCase) -> Run:
    target, params = eagle_pair()
    return run_case(case, StudentEagle(target, params, lambda call: call_pairs(sub, [call])[0]))


def identical(a, b) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def differences(mine: Step, theirs: Step) -> list[str]:
    """What differs between the student's step and the reference's, in words (empty: none)."""
    found = []
    if not same(mine.fed, theirs.fed):
        found.append("pairs")
    if (mine.draft is None) != (theirs.draft is None) or (
        mine.draft is not None
        and not (
            identical(mine.draft.tokens, theirs.draft.tokens)
            and identical(mine.draft.q, theirs.draft.q)
        )
    ):
        found.append("drafts")
    a, b = mine.cached_after, theirs.cached_after
    if a is None or b is None or not all(identical(x, y) for x, y in zip(a, b, strict=True)):
        found.append("cache")
    return found


def cache_line(mine: Step, theirs: Step) -> str:
    if mine.cached_after is None:
        return "the step did not finish"
    (k, _), (k0, _) = mine.cached_after, theirs.cached_after
    have, want = k.shape[2], k0.shape[2]
    if have != want:
        return (
            f"after it the drafter's cache holds {have} committed slots; the reference's "
            f"holds {want}, one per position whose pair is known (what a fresh prefill of the "
            f"same history holds)"
        )
    diff = np.flatnonzero(np.any(k != k0, axis=(0, 1, 3)))
    if len(diff):
        return (
            f"after it the drafter's cache holds the right number of slots ({have}), but "
            f"from slot {diff[0]} on they differ from the reference's (a fresh prefill's)"
        )
    return f"after it the drafter's cache is the reference's ({have} slots)"


def step_story(mine: Step, theirs: Step) -> list[str]:
    context, features, cached = theirs.call
    return [
        f"{theirs.label}: {describe_call(context, len(features), cached)}",
        f"  the reference drafter fed {pairs_text(theirs.call, theirs.fed)}",
        f"  yours fed                 {pairs_text(mine.call, mine.fed)}",
        f"  {cache_line(mine, theirs)}",
    ]


def round_hint(mine: Run, first: Step) -> str:
    wrong = [(s.call, s.fed) for s in mine.steps if not identical_pairs(s)]
    if wrong:
        return fitting(wrong) or generic_hint(*wrong[0])
    return (
        f"your pairs are the contract's on every call, yet the drafter differs at "
        f"{first.label}: keep no state between calls, and return new arrays (copies of the "
        f"rows), never arrays you change afterwards"
    )


def identical_pairs(step: Step) -> bool:
    return same(step.fed, step.want)


def compare(case: RoundCase, mine: Run, theirs: Run) -> Outcome:
    rounds = len(theirs.steps) - 1
    for s, ref in enumerate(theirs.steps):
        if s >= len(mine.steps):
            break
        if differences(mine.steps[s], ref):
            story = [case.describe(), *step_story(mine.steps[s], ref)]
            if mine.error:
                story.append(f"the run then stopped: {mine.error}")
            elif mine.tokens == theirs.tokens and case.temperature == 0:
                story.append(
                    f"the text is still the target's own (verification keeps any drafter "
                    f"exact): a misaligned drafter costs acceptance, not correctness; yours "
                    f"had {sum(mine.kept)} drafts kept, the reference {sum(theirs.kept)}"
                )
            return Outcome(False, f"{ref.label} differs", story, round_hint(mine, ref), n=1)
    if mine.error:
        last = mine.misfit.step if mine.misfit else mine.steps[-1]
        context, features, cached = last.call
        story = [
            case.describe(),
            f"{last.label}: {describe_call(context, len(features), cached)}",
            f"  your pairs: {pairs_text(last.call, last.fed)}",
            f"  the run stopped: {mine.error}",
        ]
        return Outcome(False, f"{last.label}: stopped", story, round_hint(mine, last), n=1)
    return Outcome(
        True,
        f"the reference drafter's prefill and {rounds} rounds, bit for bit "
        f"({sum(theirs.kept)} drafts kept)",
        n=1,
    )


def round_check(index: int) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        case = round_cases(grading_secret())[index]
        return compare(case, student_run(sub, case), reference_run(case))

    shape = SHAPES[index]
    what = f"a real EAGLE drafter's catch-up, {shape.setting()}, a prompt drawn for this grading"
    return Check(f"eagle-round/{shape.name}", what, False, run)


def round_checks() -> list[Check]:
    return [round_check(i) for i in range(len(SHAPES))]
