"""Exercise: write the speculative loop yourself -- the round and the run around it -- then let
the oracle grade it.

Read first: notebook 06 (both caches through many rounds: what each holds before and after
a round, and why the draft sometimes has two tokens to catch up) and notebook 07 (the round,
end to end). They give the picture and check the pointers on real runs; the counts your loop
commits, and what it feeds each model, are for you to work out from them.

Grade your function from the repository root (8 000 runs of your loop when it is right, far
fewer when it is not; README.md beside this file gives each exercise's grading time, measured):

    .venv/bin/specdec grade notebooks/exercises/my_loop.py:speculative_generate

Check each helper as you write it (a few asserts on the tiny model the grader uses):

    .venv/bin/python notebooks/exercises/my_loop.py

The grader runs your loop on a tiny GPT pair (V = 5; the draft is the target plus noise, so
drafts are kept ~70% of the time): two greedy runs whose outcome is certain (one where round 1
keeps every draft, so round 2 needs the draft's catch-up; one where the target rejects drafts,
so the correction token and the target's cache after a rejection matter), then 4 000 sampled
runs of two setups (T = 1, k = 2; T = 0.7 with top-k and EOS, k = 3), on a generator `rng`
drawn afresh for each grading, each held against the target's own autoregressive law of the
generated tokens and the exact law of the number of drafts kept in rounds 1 and 2. A failure
is explained on the smallest case that shows it.

The contract (the same as `reference.speculative.speculative_generate`; p = target, q = draft):

    speculative_generate(target, drafter, prompt, *, k, max_new_tokens, rng,
                         sampling=SamplingParams(), eos_id=None) -> LoopResult

    target          a reference.model.GPT: target.forward(tokens [T], cache) -> logits [T, V]
                    float32, row i scoring the token *after* tokens[i]; with a cache the T
                    tokens continue after its last written slot and stay temporary
                    until cache.commit(n)
    drafter         a reference.drafters.ModelDrafter; drafter.model is the draft GPT. Give
                    each model a cache of your own per call (model.new_cache()): the grader
                    hands you the same drafter for every run
    prompt          a list of token ids, at least one
    k               drafts per round (>= 1); max_new_tokens >= 1
    rng             a numpy.random.Generator: every random number comes from it
    sampling        a reference.sampling.SamplingParams (temperature 0 = greedy, top_k):
                    apply it to the target's rows AND the draft's, with `probabilities`
    eos_id          None, or a token id that ends the generation (it is emitted)
    returns         an object with .tokens (the generated ids, prompt excluded, at most
                    max_new_tokens of them) and .stats.accepted_per_round (drafts kept per
                    round, one int per round): LoopResult below

What you may use from `reference` (the pieces; the loop is yours):

    model.forward(tokens, cache)    the forward pass, writing temporary K/V slots
    model.new_cache()               a KVCache: .length committed slots, .pending temporary
                                    ones; .commit(n) keeps the first n temporary slots,
                                    .rollback() drops the other temporary ones
    probabilities(logits, sampling) logits [..., V] -> the distribution a token is drawn from
    sample_token(row, rng)          one token id drawn from row [V]
    verify(p, q, drafts, rng)       p [k+1, V], q [k, V], drafts [k] -> Verification with
                                    .accepted (0..k) and .token (the correction or the bonus)

What a correct loop keeps true (what the grader's runs expose when it does not):

* at the start of every round, the target's cache holds, committed, exactly the context
  (prompt + output so far) without its last token, and nothing temporary: its rows are
  those a fresh prefill of these tokens would give, never a rejected draft's;
* the draft's cache holds, committed, the context without its last one or two tokens (two
  after a round that kept every draft: the draft never fed its own last guess), nothing
  temporary, never a rejected draft;
* a round feeds each model only the committed tokens its cache lacks, then the drafts it
  needs: the draft model feeds each draft it must condition the next one on, the target
  judges every draft in ONE forward pass, its rows through `probabilities`;
* verify is given, for each draft, the row of q it was really drawn from and the target's
  row for that draft's position, plus the bonus row after the last draft;
* a round never drafts a token that could not be emitted (it emits up to one token more
  than it drafts), and emits the kept drafts and verify's token, cut just after the first
  EOS and at max_new_tokens; the run stops at EOS or at the limit;
* stats.accepted_per_round records the drafts kept in each round (not the tokens emitted).

A worked example (prompt 0 1 2, k = 3, max_new_tokens = 10; the tokens are made up):

    before round 1   both caches hold 0 1 (prefill: the prompt without its last token)
    round 1          drafts 4 1 3; verify keeps 1 draft, then gives 2: emits 4 2
                     after: target cache 0 1 2 4, draft cache 0 1 2 4; context 0 1 2 4 2
    round 2          drafts 3 3 0; verify keeps all 3, bonus 1: emits 3 3 0 1
                     after: target cache 0 1 2 4 2 3 3 0 (8 committed),
                            draft cache 0 1 2 4 2 3 3 (7: it never fed the draft 0)
    round 3          the draft model first feeds 0 1, the target 1; 6 tokens emitted, so
                     up to 4 are left: 3 drafts. Had max_new_tokens been 7, one token would
                     be left: no draft at all, the target's row alone gives it.
    accepted_per_round = [1, 3, ...]

Traps the grader catches (each is a broken loop it is tested against):

* a target cache that still holds rejected drafts, or one that dropped the last kept one:
  the next pass attends to the wrong tokens (greedy: a wrong token right after a rejection);
* no catch-up: feeding the draft model only the last token leaves it one position behind
  after a round that kept every draft (the tokens stay right; the kept counts do not);
* drafting k when fewer tokens are left (round 2's kept count is then impossible);
* ignoring EOS, or keeping the tokens after it; more than max_new_tokens tokens;
* sampling applied to one side only; a q other than the row each draft was drawn from;
* committing a draft the draft model never fed (the cache refuses: a crash).

The scaffold below splits the round into five helpers; write them one at a time (the checks
at the bottom of this file test each one), then the loop. A worked solution is in
solutions/loop_solution.py -- try first.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from reference.sampling import SamplingParams, probabilities, sample_token  # noqa: F401
from reference.verification import verify  # noqa: F401

TODO = (
    "write it in notebooks/exercises/my_loop.py, then grade the loop with: "
    ".venv/bin/specdec grade notebooks/exercises/my_loop.py:speculative_generate"
)


@dataclass
class LoopStats:
    accepted_per_round: list[int] = field(default_factory=list)  # drafts kept, per round


@dataclass
class LoopResult:
    tokens: list[int]  # the generated tokens, prompt excluded
    stats: LoopStats


def prefill(model, cache, prompt: np.ndarray) -> None:
    # prompt [n] -> None: feed and commit every prompt token but the last (round 1 feeds it)
    raise NotImplementedError(f"prefill: {TODO}")


def draft(draft_model, cache, context: np.ndarray, k: int, sampling, rng):
    # context [n] -> (drafts [k] int64, q [k, V], fed: the catch-up tokens fed before x_1)
    # x_i ~ q_i, the draft's row given the context and x_1..x_{i-1}; k = 0: feed nothing
    raise NotImplementedError(f"draft: {TODO}")


def target_rows(target, cache, context: np.ndarray, drafts: np.ndarray, sampling):
    # context [n], drafts [k] -> (p [k+1, V], fed: the catch-up tokens fed before x_1)
    # ONE forward pass; p[i] is the target's row for x_{i+1}'s position, p[k] the bonus row
    raise NotImplementedError(f"target_rows: {TODO}")


def end_round(cache, keep: int) -> None:
    # keep the first `keep` temporary slots of this round, drop the others
    raise NotImplementedError(f"end_round: {TODO}")


def emitted(drafts: np.ndarray, accepted: int, token: int, eos_id, remaining: int) -> list[int]:
    # -> x_1..x_a + [token], cut just after the first EOS and at `remaining` tokens
    raise NotImplementedError(f"emitted: {TODO}")


def speculative_generate(
    target,
    drafter,
    prompt,
    *,
    k: int,
    max_new_tokens: int,
    rng: np.random.Generator,
    sampling: SamplingParams = SamplingParams(),
    eos_id: int | None = None,
) -> LoopResult:
    # prompt [n] -> LoopResult(tokens [<= max_new_tokens], stats.accepted_per_round)
    # Two caches of your own (target.new_cache(), drafter.model.new_cache()), both prefilled;
    # then rounds until EOS or the limit: how many to draft, draft, target_rows, verify,
    # end_round on both caches, emitted; record the accepted count and extend the context.
    raise NotImplementedError(f"speculative_generate: {TODO}")


# --------------------------------------------------------------------------------------------
# Checks of the helpers, one at a time, on the grader's tiny pair (not the grade: the laws of
# the whole loop are the grader's). Run: .venv/bin/python notebooks/exercises/my_loop.py
# --------------------------------------------------------------------------------------------


def check_helpers(helpers=None) -> dict[str, str]:
    """{helper: 'ok', 'not written yet' or what is wrong}, each helper on its own."""
    from specdec.grading.exercises.loop.checks import tiny_pair

    h = helpers or sys.modules[__name__]
    target, draft_model = tiny_pair()
    greedy = SamplingParams(temperature=0.0)
    context, drafts = np.array([0, 1, 2]), np.array([3, 4])

    def uncached(model, tokens):  # [T] -> greedy rows [T, V], no cache that could be wrong
        return probabilities(model.forward(np.asarray(tokens)), greedy)

    def prefilled(model):
        cache = model.new_cache()
        h.prefill(model, cache, context)
        return cache

    def check_prefill():
        cache = prefilled(target)
        assert (cache.length, cache.pending) == (2, 0), f"cache {cache}: want 2 committed, 0 temp"

    def check_draft():
        cache = prefilled(draft_model)
        x, q, fed = h.draft(draft_model, cache, context, 2, greedy, np.random.default_rng(0))
        want = uncached(draft_model, context)[-1].argmax()
        assert fed == 1 and int(x[0]) == want, f"x_1 = {x[0]}, fed {fed}: want {want}, fed 1"
        want = uncached(draft_model, [*context, x[0]])[-1]
        assert np.allclose(q[1], want, atol=1e-6), "q_2 is not the row after context + x_1"
        assert cache.pending == 2, f"{cache.pending} temporary slots: want 2 (x_2 is not fed)"
        x, q, fed = h.draft(draft_model, cache, context, 0, greedy, np.random.default_rng(0))
        assert (len(x), q.shape, fed) == (0, (0, 5), 0), "k = 0: no drafts, q [0, V], fed 0"

    def check_target_rows():
        cache = prefilled(target)
        p, fed = h.target_rows(target, cache, context, drafts, greedy)
        want = uncached(target, [*context, *drafts])[-3:]
        assert fed == 1 and cache.pending == 3, f"fed {fed}, {cache}: want fed 1, 3 temporary"
        assert np.allclose(p, want, atol=1e-6), "p is not the last k+1 rows of the pass"

    def check_end_round():
        cache = prefilled(target)
        target.forward(np.array([2, 3, 4]), cache)
        h.end_round(cache, 2)
        assert (cache.length, cache.pending) == (4, 0), f"{cache}: want 4 committed, 0 temp"

    def check_emitted():
        assert h.emitted(np.array([1, 4, 2]), 3, 0, 4, 10) == [1, 4], "cut just after EOS"
        assert h.emitted(np.array([1, 2]), 2, 3, None, 2) == [1, 2], "cut at `remaining`"
        assert h.emitted(np.array([1, 2]), 1, 3, None, 9) == [1, 3], "x_1..x_a + [token]"

    checks = {
        "prefill": check_prefill,
        "draft": check_draft,
        "target_rows": check_target_rows,
        "end_round": check_end_round,
        "emitted": check_emitted,
    }
    report = {}
    for name, check in checks.items():
        try:
            check()
            report[name] = "ok"
        except NotImplementedError:
            report[name] = "not written yet"
        except Exception as error:  # a plain report of what is wrong, helper by helper
            report[name] = f"{type(error).__name__}: {error}"
    return report


if __name__ == "__main__":
    for name, verdict in check_helpers().items():
        print(f"{name:<12} {verdict}")
    print(f"\nthen the loop: {TODO.split('with: ')[1]}")
