"""Speculative decoding: one named round, and the loop that repeats it.

Before the first round both models prefill every prompt token but the last. One round
(`speculative_round`), with `context` = the committed tokens, whose last token neither
model has cached yet:

    1. draft              the drafter proposes x_1..x_k and the rows q_1..q_k they came from
    2. verification pass  ONE target forward over [catch-up tokens, x_1..x_k]; its last k+1
                          rows are p_1..p_{k+1}: row i is the target's distribution *after*
                          x_1..x_{i-1}, so it scores x_i, and row k+1 is the bonus row
    3. verify             accept a prefix of n drafts and sample one more token (the
                          residual after a rejection, the bonus after k acceptances)
    4. commit, rollback   both caches keep the catch-up tokens and x_1..x_n, and drop the
                          rest of what they wrote this round; the new token's K/V is
                          computed next round

`speculative_generate` is prefill, then `speculative_round` until `Run` says the sequence
has stopped (EOS, length); `Run` records the statistics and the trace from what each round
returns, and every other loop (trees, batches, the GPU twin) keeps the same `Run`. The
records themselves are in reference/records.py. The law of the emitted sequence
equals the target's own autoregressive law, for any k, drafter and sampling transform;
`pytest -m distribution` checks it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import numpy as np

from reference.autoregressive import check_eos, check_length_budget
from reference.checks import (
    as_token_array,
    check_clock,
    check_generator,
    check_positive_int,
    check_probability_rows,
)
from reference.drafters import (
    CHAIN_PARTS,
    Draft,
    Drafter,
    SharedLayers,
    check_drafter,
    drafter_feature_layers,
    proposals_checked,
)
from reference.kv_cache import KVCache, catch_up_tokens
from reference.model import GPT
from reference.records import (
    ACCEPTED,
    NEVER_EXAMINED,
    REJECTED,
    CacheSpan,
    Round,
    RoundTrace,
    SpeculativeResult,
    SpeculativeStats,
)
from reference.sampling import SamplingParams, check_sampling, probabilities
from reference.verification import ROW_SUM_ATOL, Verification, verify_unchecked

# the records a run returns live in reference/records.py; named here too, where users of
# earlier versions import them from
__all__ = [
    "ACCEPTED",
    "NEVER_EXAMINED",
    "REJECTED",
    "CacheSpan",
    "Round",
    "RoundTrace",
    "Run",
    "RunSetup",
    "SpeculativeResult",
    "SpeculativeStats",
    "prefill",
    "run_keywords",
    "speculative_generate",
    "speculative_round",
    "start_run",
    "stop_reason",
    "verification_pass",
]


def check_pair(target: GPT, drafter: Drafter) -> None:
    if target.n_vocab != drafter.n_vocab:
        raise ValueError(
            f"draft and target must share one vocabulary: target has {target.n_vocab} ids, "
            f"drafter has {drafter.n_vocab}"
        )


def round_draft_length(k: int, remaining: int) -> int:
    # A round emits at most k_round + 1 tokens: never draft what could not be emitted.
    return min(k, remaining - 1)


def check_draft(draft: Draft, k_round: int, n_vocab: int) -> None:
    # A drafter is plugged in from outside: its proposal is checked once, here, before
    # the target reads it (the library's own rows are trusted from here on).
    if not isinstance(draft, Draft):
        raise TypeError(f"the drafter's propose must return a Draft, got {type(draft).__name__}")
    n = len(draft.tokens)
    if n > k_round:
        raise ValueError(
            f"the drafter proposed {n} tokens but was asked for at most {k_round}; a round "
            f"must never draft more than it can emit"
        )
    tokens = as_token_array(draft.tokens, n_vocab, "the drafter's tokens", allow_empty=True)
    q = check_probability_rows(draft.q, "the drafter's q", ROW_SUM_ATOL)
    if q.shape != (n, n_vocab):
        raise ValueError(f"the drafter's q must have shape {(n, n_vocab)}, got {q.shape}")
    if np.any(q[np.arange(n), tokens] <= 0):
        raise ValueError("the drafter proposed a token its own q gives probability 0")


def verification_pass(
    target: GPT,
    cache: KVCache,
    context: np.ndarray,
    draft_tokens: np.ndarray,
    sampling,
    shared: SharedLayers | None = None,
) -> tuple[np.ndarray, int, np.ndarray]:
    # -> (p [k+1, V], number of catch-up tokens fed, h [k+1, C]). ONE target forward over
    # the committed tokens its cache lacks plus the k drafts, written as temporary cache
    # entries; its last k+1 rows score x_1..x_k and the bonus position. h are those rows'
    # final hidden states (what extra heads draft from). With `shared` (an early-exit
    # drafter's rows), the rows it already ran through blocks 0..L'-1 start at block L'.
    x, n_catch_up = target_features(target, cache, context, draft_tokens, shared)
    p, h = scored_rows(target, x, len(draft_tokens), sampling)
    return p, n_catch_up, h


def target_features(
    target: GPT,
    cache: KVCache,
    context: np.ndarray,
    draft_tokens: np.ndarray,
    shared: SharedLayers | None = None,
    layers: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, int]:
    # -> (x [n_catch_up + k, F], n_catch_up): the verification pass's forward, stopped
    # before the final norm: x are the target's features of every row it fed (EAGLE reads
    # them); F = C, or with `layers` the residual streams after those blocks side by side
    # (GPT.layer_features), the top last
    new = catch_up_tokens(cache, context)
    tokens = np.concatenate([new, draft_tokens])
    if shared is not None:  # an early-exit drafter's rows continue at its exit layer
        if layers is not None and len(layers) > 1:
            raise ValueError(
                "a drafter that shares the target's lower-layer rows (early exit) cannot also "
                f"read features of several layers (feature_layers={layers})"
            )
        x = shared.continue_in(target, cache, tokens)
    elif layers is None:
        x = target.residual(tokens, cache)
    else:
        x = target.layer_features(tokens, cache, None, layers)
    return x, len(new)


def scored_rows(target: GPT, x: np.ndarray, k: int, sampling) -> tuple[np.ndarray, np.ndarray]:
    # features x [T, F] -> (p [k+1, V], h [k+1, C]): the last k+1 rows' top feature (the last
    # C columns: below ln_f) through ln_f and the output layer, then the sampling transform
    h = target.norm(x[-(k + 1) :, -target.config.n_embd :], "ln_f")  # [k+1, C]
    return probabilities(target.logits(h), sampling), h


def check_shared(shared: SharedLayers | None, target: GPT) -> None:
    # Rows computed by some other model would silently change p: only the target's own.
    if shared is not None and shared.target is not target:
        raise ValueError(
            "the drafter shares lower-layer rows of another model; an early-exit drafter "
            "must be built from the very target it drafts for"
        )


def cache_span_start(cache: KVCache | None) -> tuple[int, int]:
    return (cache.length, cache.end) if cache is not None else (0, 0)


def speculative_round(
    target: GPT,
    cache: KVCache,
    drafter: Drafter,
    context: np.ndarray,
    k: int,
    sampling: SamplingParams,
    rng: np.random.Generator,
    verify_fn: Callable[..., Verification] | None = None,
    clock=None,
) -> Round:
    # context [n] committed tokens -> Round: draft, verification pass, verify, commit and
    # rollback of both caches. `verify_fn` None is the reference's verify on rows the
    # round has already checked; `clock` is charged "draft", "target" and "verify".
    clock = check_clock(clock)
    draft_cache = drafter.cache
    t_before, d_before = cache.length, cache_span_start(draft_cache)[0]

    draft = drafter.propose(context, k, sampling, rng)  # 1. draft
    if not proposals_checked(drafter):  # a drafter from outside: checked before the target reads
        check_draft(draft, k, target.n_vocab)  # it may stop early, never draft more
    check_shared(draft.shared, target)
    clock.mark("draft")
    # 2. the verification pass, in its two halves: the target's features x of every row it
    # feeds (what an EAGLE drafter reads), then the rows p (and h) that score the drafts
    x, n_catch_up = target_features(
        target, cache, context, draft.tokens, draft.shared, drafter_feature_layers(drafter)
    )
    p, h = scored_rows(target, x, len(draft.tokens), sampling)
    clock.mark("target")
    t_written, d_written = cache.end, cache_span_start(draft_cache)[1]
    if verify_fn is None:  # 3. accept a prefix, then one more token
        v = verify_unchecked(p, draft.q, draft.tokens, rng)
    else:  # another implementation's answer, checked before either cache moves
        v = plugin_verification(verify_fn, p, draft, rng, target.n_vocab)
    clock.mark("verify")

    cache.commit(n_catch_up + v.accepted)  # 4. keep the catch-up tokens and accepted drafts
    cache.rollback()  # ... and drop the rejected drafts' slots
    drafter.commit(v.accepted)
    drafter.rollback()
    drafter.observe(h[v.accepted])  # the target's row that scored the round's last token
    drafter.observe_features(x[: n_catch_up + v.accepted])  # features of the kept positions
    # (every layer the drafter reads, side by side: [n_catch_up + accepted, F])
    return Round(
        draft=draft,
        p=p,
        verification=v,
        n_catch_up=n_catch_up,
        target_cache=CacheSpan(t_before, t_written, cache.length),
        draft_cache=CacheSpan(d_before, d_written, draft_cache.length) if draft_cache else None,
    )


def plugin_verification(
    verify_fn: Callable[..., Verification], p: np.ndarray, draft: Draft, rng, n_vocab: int
) -> Verification:
    # p [k+1, V] and the draft -> the plug-in's Verification, checked (accepted in 0..k, the
    # token a vocabulary id) before the round commits anything on its word
    v = verify_fn(p, draft.q, draft.tokens, rng)
    return Verification.from_plugin(v, len(draft.tokens), n_vocab, verify_fn)


def emitted_tokens(
    verification: Verification, draft: Draft, eos_id: int | None, remaining: int
) -> list[int]:
    # x_1..x_n + [token], cut just after the first EOS and at the length budget
    out = verification.emitted(draft.tokens)
    if eos_id is not None and eos_id in out:
        out = out[: out.index(eos_id) + 1]
    return out[:remaining]


def prefill(target: GPT, cache: KVCache, drafter: Drafter, prompt: np.ndarray) -> None:
    # Both models cache every prompt token but the last, which (like every round's last
    # emitted token) is fed together with the next drafts.
    drafter.reset()
    if len(prompt) > 1:
        # [n-1, F]: the features, before ln_f (F = C, or the layers the drafter reads)
        x = target.layer_features(prompt[:-1], cache, None, drafter_feature_layers(drafter))
        cache.commit(len(prompt) - 1)
        top = x[-1:, -target.config.n_embd :]  # the last position's feature below ln_f
        drafter.observe(target.norm(top, "ln_f")[0])  # the row that scored the last token
        drafter.observe_features(x)
    drafter.prefill(prompt[:-1])


# ---------------------------------------------------------------- what every loop is asked


@dataclass(frozen=True)
class RunSetup:
    """What a run is asked for besides its models and its prompt(s). Every loop -- a chain,
    a tree, a ragged batch, and the GPU twin's three -- takes these same keywords; they are
    written here once, `@run_keywords` gives them to each loop's signature, and
    `checked` is their one set of checks."""

    k: int | None = None  # drafts per round (a tree's depth); a tree loop's default: its drafter's
    max_new_tokens: int | None = None  # the length limit: at most this many tokens emitted
    rng: np.random.Generator | None = None  # every random choice of the run
    sampling: SamplingParams = SamplingParams()  # the processing of both models' rows
    eos_id: int | None = None  # stop once this token is emitted (None: length only)
    trace: bool = False  # keep every round (a RoundTrace) in the result
    verify_fn: Callable[..., Verification] | None = None  # another verify (a plug-in), or None
    clock: object = None  # charged per stage (e.g. specdec.timing.StageClock), or None

    def checked(self, n_vocab: int) -> RunSetup:
        # every check of the keywords, before anything is written -> the setup with k and
        # max_new_tokens as ints, eos_id checked against the vocabulary, a clock (NoClock
        # for None)
        check_generator(self.rng)
        check_sampling(self.sampling)
        check_verify_fn(self.verify_fn)
        return replace(
            self,
            k=check_positive_int(self.k, "k"),
            max_new_tokens=check_positive_int(self.max_new_tokens, "max_new_tokens"),
            eos_id=check_eos(self.eos_id, n_vocab),
            clock=check_clock(self.clock),
        )


RUN_KEYWORDS = ("k", "max_new_tokens", "rng")  # the keywords a loop requires unless it says


def run_keywords(loop=None, *, required: tuple[str, ...] = RUN_KEYWORDS):
    """`@run_keywords` on loop(target, drafter, prompt, setup: RunSetup): the public loop,
    called as loop(target, drafter, prompt, k=..., max_new_tokens=..., rng=..., ...) with
    RunSetup's fields as keyword-only arguments (`required` without a default). It only
    gathers the keywords into `setup`; the loop checks them (`RunSetup.checked`).
    `inspect.signature` and `help` show the keywords; `__wrapped__` is the loop itself."""

    def wrap(loop):
        positional = list(inspect.signature(loop).parameters.values())[:-1]
        keywords = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if f.name in required else f.default,
                annotation=f.type,
            )
            for f in fields(RunSetup)
        ]
        signature = inspect.Signature(positional + keywords)

        @functools.wraps(loop)
        def public(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as error:  # a missing or unknown keyword, named with the loop
                raise TypeError(f"{loop.__name__}(): {error}") from None
            bound.apply_defaults()
            given = bound.arguments
            setup = RunSetup(**{f.name: given[f.name] for f in fields(RunSetup)})
            return loop(*(given[p.name] for p in positional), setup)

        public.__signature__ = signature
        return public

    return wrap if loop is None else wrap(loop)


@run_keywords
def speculative_generate(
    target: GPT, drafter: Drafter, prompt, setup: RunSetup
) -> SpeculativeResult:
    # prompt [n] -> SpeculativeResult(tokens [<= max_new_tokens], stats, trace), called with
    # keywords: speculative_generate(target, drafter, prompt, k=4, max_new_tokens=64,
    # rng=rng, sampling=..., eos_id=..., trace=..., verify_fn=..., clock=...), RunSetup's
    # fields, which @run_keywords gathers into `setup`.
    # verify_fn: another implementation of `verify` to run inside the loop (the oracle's
    # plug-in point); None is the reference's. `clock` (e.g. specdec.timing.StageClock) is
    # charged "prefill", then per round "draft", "target", "verify" and "other".
    prompt, setup = check_loop_inputs(target, drafter, prompt, setup)
    cache, run = start_run(target, drafter, prompt, setup)
    sampling, rng, verify_fn, clock = setup.sampling, setup.rng, setup.verify_fn, setup.clock
    while not run.finished:  # one round per iteration, until EOS or the length limit
        rnd = speculative_round(
            target, cache, drafter, run.context, run.next_k(), sampling, rng, verify_fn, clock
        )
        run.record(rnd)
        clock.mark("other")
    return run.result()


def check_loop_inputs(
    target, drafter, prompt, setup: RunSetup, required=CHAIN_PARTS
) -> tuple[np.ndarray, RunSetup]:
    # every check of a single-sequence loop, before anything is written -> (prompt [n]
    # int64, the checked setup); required: the drafter's parts the loop calls (a chain
    # drafter's; a tree drafter's TREE_PARTS)
    check_drafter(drafter, required)
    check_pair(target, drafter)
    prompt = as_token_array(prompt, target.n_vocab, "prompt")
    setup = setup.checked(target.n_vocab)
    check_length_budget(len(prompt), setup.max_new_tokens, target.config.n_ctx, "target")
    check_length_budget(len(prompt), setup.max_new_tokens, drafter.n_ctx, "drafter")
    return prompt, setup


def start_run(target: GPT, drafter: Drafter, prompt, setup: RunSetup) -> tuple[KVCache, Run]:
    # prompt [n] -> (the target's cache, the sequence's Run): both models prefilled, timed as
    # "prefill"; what every single-sequence loop does before its first round
    setup.clock.restart()
    cache = target.new_cache()
    prefill(target, cache, drafter, prompt)
    setup.clock.mark("prefill")
    return cache, Run.of(prompt, setup)


def check_verify_fn(verify_fn) -> None:
    if verify_fn is not None and not callable(verify_fn):
        raise TypeError(f"verify_fn must be callable or None, got {type(verify_fn).__name__}")


def stop_reason(emitted: list[int], n_out: int, max_new_tokens: int, eos_id) -> str:
    # THE stop rules, for every loop: "eos" once a round emitted eos_id (it is always the
    # last token emitted: emitted_tokens cuts there), "length" at max_new_tokens, else ""
    if eos_id is not None and emitted and emitted[-1] == eos_id:
        return "eos"
    if n_out >= max_new_tokens:
        return "length"
    return ""


class Run:
    """One sequence's way through a run, round by round: what it has committed, what it
    has emitted, its statistics and trace, and whether it has stopped.

    Every loop keeps one per sequence -- a chain's, a tree's, each row of a batch, the GPU
    twin's -- and only the round it plays differs:

        cache, run = start_run(target, drafter, prompt, setup)
        while not run.finished:
            run.record(a_round(..., run.context, run.next_k(), ...))
        return run.result()
    """

    @classmethod
    def of(cls, prompt: np.ndarray, setup: RunSetup) -> Run:  # a sequence of a checked setup
        return cls(prompt, setup.k, setup.max_new_tokens, setup.eos_id, setup.trace)

    def __init__(
        self, prompt: np.ndarray, k: int, max_new_tokens: int, eos_id: int | None, trace: bool
    ) -> None:
        self.context = prompt.copy()  # [n] committed tokens: the prompt, then what was emitted
        self.k, self.max_new_tokens, self.eos_id = k, max_new_tokens, eos_id
        self.out: list[int] = []
        # counters sized by min(k, max_new_tokens): a round never drafts more than that
        self.stats = SpeculativeStats(k=k, positions=min(k, max_new_tokens))
        self.trace: list[RoundTrace] | None = [] if trace else None

    @property
    def finished(self) -> bool:  # an EOS was emitted or the length limit reached
        return bool(self.stats.stop_reason)

    def next_k(self) -> int:  # the next round's draft length
        return round_draft_length(self.k, self.max_new_tokens - len(self.out))

    def record(self, rnd: Round, traced: Callable[[Round], Round] | None = None) -> None:
        # What a round leaves behind: its emitted tokens (cut at EOS and at the length
        # budget), its statistics, its trace (`traced`: how a trace keeps the round -- a
        # tree's as its accepted path, the twin's copied to the host), and the stop rules.
        remaining = self.max_new_tokens - len(self.out)
        emitted = emitted_tokens(rnd.verification, rnd.draft, self.eos_id, remaining)
        self.stats.record(rnd.k, rnd.verification.accepted, rnd.examined, rnd.nodes)
        if self.trace is not None:
            kept = traced(rnd) if traced else rnd
            self.trace.append(RoundTrace.of(kept, len(self.context), emitted))
        self.out.extend(emitted)
        self.context = np.concatenate([self.context, np.asarray(emitted, dtype=np.int64)])
        n_out, limit = len(self.out), self.max_new_tokens
        self.stats.stop_reason = stop_reason(emitted, n_out, limit, self.eos_id)

    def result(self) -> SpeculativeResult:
        self.stats.emitted = len(self.out)
        return SpeculativeResult(tokens=self.out, stats=self.stats, trace=self.trace)
