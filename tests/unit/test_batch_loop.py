"""One loop (issue 30): a batch is B `Run`s of the single loop, so it has what the single
loop has -- a trace, a clock, another verify -- and the stop rules are written once.

Each check holds a batch of one against `speculative_generate` from the same seed (the
generator is read in the same order), and a ragged batch against each row's own run."""

from __future__ import annotations

import ast
import inspect
import pathlib

import numpy as np
import pytest

import reference
import reference.batch
import reference.speculative
import reference.tree.loop
from reference import ModelDrafter, SamplingParams, speculative_generate, speculative_generate_batch
from reference.verification import Verification, verify
from specdec.timing import StageClock

SOFT = SamplingParams(temperature=1.0)
PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 11, 12], [13, 14]]
MAX_NEW = 13


def batch(target, draft, prompts, seed=0, **kw):
    drafters = [ModelDrafter(draft) for _ in prompts]
    return speculative_generate_batch(
        target,
        drafters,
        prompts,
        k=3,
        max_new_tokens=MAX_NEW,
        rng=np.random.default_rng(seed),
        **kw,
    )


def alone(target, draft, prompt, seed=0, **kw):
    return speculative_generate(
        target,
        ModelDrafter(draft),
        prompt,
        k=3,
        max_new_tokens=MAX_NEW,
        rng=np.random.default_rng(seed),
        **kw,
    )


def test_a_batch_of_one_keeps_the_single_loops_trace(target, draft):
    (ours,) = batch(target, draft, [PROMPTS[2]], sampling=SOFT, trace=True)
    theirs = alone(target, draft, PROMPTS[2], sampling=SOFT, trace=True)
    assert len(ours.trace) == len(theirs.trace) == ours.stats.rounds
    for a, b in zip(ours.trace, theirs.trace, strict=True):
        assert (a.context_len, a.accepted, a.token, a.token_kind, a.emitted) == (
            b.context_len,
            b.accepted,
            b.token,
            b.token_kind,
            b.emitted,
        )
        assert (a.target_cache, a.draft_cache) == (b.target_cache, b.draft_cache)
        np.testing.assert_array_equal(a.draft_tokens, b.draft_tokens)
        np.testing.assert_allclose(a.p_rows, b.p_rows, rtol=1e-5, atol=1e-7)


def test_every_row_of_a_batch_has_its_own_trace(target, draft):
    results = batch(target, draft, PROMPTS, trace=True)
    for prompt, result in zip(PROMPTS, results, strict=True):
        assert len(result.trace) == result.stats.rounds
        assert result.trace[0].context_len == len(prompt)
        emitted = [t for rnd in result.trace for t in rnd.emitted]
        assert emitted == result.tokens
    assert batch(target, draft, PROMPTS)[0].trace is None  # off unless asked for


def test_a_batch_charges_the_clock_per_stage(target, draft):
    clock = StageClock()
    results = batch(target, draft, PROMPTS, clock=clock)
    rounds = max(r.stats.rounds for r in results)  # the batch plays until its last row stops
    assert clock.calls["prefill"] == 1
    for stage in ("draft", "target", "verify", "other"):
        assert clock.calls[stage] == rounds, stage
    assert clock.total() > 0


def test_another_verify_runs_in_every_row(target, draft):
    calls = []

    def counted(p, q, tokens, rng):
        calls.append(len(tokens))
        return verify(p, q, tokens, rng)

    ours = batch(target, draft, PROMPTS, sampling=SOFT, verify_fn=counted, seed=5)
    theirs = batch(target, draft, PROMPTS, sampling=SOFT, seed=5)
    assert [r.tokens for r in ours] == [r.tokens for r in theirs]
    assert len(calls) == sum(r.stats.rounds for r in ours)


def test_a_verify_that_lies_is_refused_before_any_row_commits(target, draft):
    def too_many(p, q, tokens, rng):
        return Verification(accepted=len(tokens) + 1, token=0)

    with pytest.raises(ValueError, match="accepted"):
        batch(target, draft, PROMPTS, verify_fn=too_many)
    with pytest.raises(TypeError, match="verify_fn must be callable"):
        batch(target, draft, PROMPTS, verify_fn="verify")


def test_eos_and_length_stop_each_row_as_a_single_run_stops(target, draft):
    greedy = SamplingParams(temperature=0.0)
    reasons = set()
    for eos_id in (None, 7, 2, 11):
        results = batch(target, draft, PROMPTS, eos_id=eos_id, sampling=greedy)
        for prompt, result in zip(PROMPTS, results, strict=True):
            single = alone(target, draft, prompt, eos_id=eos_id, sampling=greedy)
            assert result.tokens == single.tokens
            assert result.stats.stop_reason == single.stats.stop_reason
            reasons.add(result.stats.stop_reason)
    assert reasons == {"eos", "length"}  # both rules were exercised


def test_the_stop_rules_are_written_once():
    """The strings "eos" and "length" are assigned as a stop reason in one function only,
    `speculative.stop_reason`; every loop (chain, tree, batch, the twin's) calls it."""
    root = pathlib.Path(inspect.getfile(reference)).parent.parent
    writers = []
    for path in sorted([*root.glob("reference/**/*.py"), *root.glob("gpu/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                returns = {
                    n.value.value
                    for n in ast.walk(node)
                    if isinstance(n, (ast.Return, ast.Assign))
                    and isinstance(n.value, ast.Constant)
                    and n.value.value in ("eos", "length")
                }
                if returns:
                    writers.append(f"{path.relative_to(root)}:{node.name}")
    assert writers == ["reference/speculative.py:stop_reason"]


@pytest.mark.parametrize(
    "entry", ["speculative_generate", "speculative_generate_batch", "tree_speculative_generate"]
)
def test_each_loop_names_its_round_and_its_run(entry):
    """From a loop's entry point an editor reaches the round, and from the round the rule,
    by following names: no round passed as a field, no verify chosen through a variable."""
    module = {
        "speculative_generate": reference.speculative,
        "speculative_generate_batch": reference.batch,
        "tree_speculative_generate": reference.tree.loop,
    }[entry]
    tree = ast.parse(inspect.getsource(getattr(module, entry)))
    called = {
        ast.unparse(n.func)  # a name, or Name.attribute (Run.of)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
    }
    round_name = {
        "speculative_generate": "speculative_round",
        "speculative_generate_batch": "batched_round",
        "tree_speculative_generate": "tree_round",
    }[entry]
    assert round_name in called and called & {"Run", "Run.of", "start_run"}
    rnd = ast.parse(inspect.getsource(getattr(module, round_name)))
    rule = {
        n.func.id for n in ast.walk(rnd) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert rule & {"verify_unchecked", "verify_tree_unchecked"}
