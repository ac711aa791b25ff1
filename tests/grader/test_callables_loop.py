"""The callables exercise (notebooks/exercises/my_callables_loop.py): a loop graded through two
next-token callables. The worked solution passes, and so does the reference's verify inside
an eager loop over the callables, and the transformers-style loop of examples/ through its
adapter (with torch); each broken loop below is rejected, under two secrets, with a hint that
names its mistake (matched by a few words); the callables refuse malformed contexts with a
clear error; the generator a run is handed is fresh for each grading (a pinned secret hands
the same one again).

Broken loops here: the solution's pieces with one small mistake each, marked `# the mistake`.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

from specdec.grading import grade
from specdec.grading.engine.core import run_families
from specdec.grading.engine.secret import SECRET_ENV, secret_held
from specdec.grading.engine.submission import Submission, load_submission
from specdec.grading.exercises.callables.checks import (
    GREEDY,
    Calls,
    callables_families,
    calls_problem,
)

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "notebooks/exercises/solutions/callables_loop_solution.py"
SKELETON = REPO / "notebooks/exercises/my_callables_loop.py"
EXAMPLE = REPO / "examples/transformers_style_loop.py"
SECRETS = (1, 2)  # two gradings: the generators their runs are handed


def load(path: Path, name: str):
    # a file that is no package, loaded by path (registered first, for its dataclasses)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


sol = load(SOLUTION, "_callables_solution_for_tests")


def graded(
    function, runs: int | None = 1_000, source: str | None = None, secret: int | None = SECRETS[0]
):
    """`function` graded in this process, its runs' generators those of `secret`'s grading
    (None: SPECDEC_GRADING_SECRET's, as `specdec grade` would)."""
    submission = Submission(function.__name__, function, "callables", "test", source)
    with secret_held(secret):
        return run_families(submission, callables_families(runs=runs))


def first_failure(result):
    failed = [r for r in result.results if r.status == "fail"]
    assert not result.passed and failed, "the loop was not rejected"
    return failed[0]


# --------------------------------------------------------------------------------------------
# Correct loops pass
# --------------------------------------------------------------------------------------------


def test_the_solution_passes():
    submission = load_submission(f"{SOLUTION}:speculative_sample")
    assert submission.kind == "callables"  # the registry's name for speculative_sample
    with secret_held(SECRETS[0]):
        result = run_families(submission, callables_families(runs=1_000))
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    calls = next(r for r in result.results if r.check.name == "loop-callables/calls")
    assert 1.0 <= calls.outcome.measure <= 3.0  # target rows per emitted token: lazy, k = 2..3
    assert {f"loop-callables/{case.name}" for case, _ in GREEDY} <= {
        r.check.name for r in result.results
    }


def reference_verify_loop(target_next, draft_next, prompt, *, k, max_new_tokens, rng, eos_id=None):
    """The reference's verify in an eager loop: all k + 1 target rows of a round, then verify."""
    from reference.verification import verify

    context, out = list(prompt), sol.Sampled()
    while len(out.tokens) < max_new_tokens and not (out.tokens and out.tokens[-1] == eos_id):
        remaining = max_new_tokens - len(out.tokens)
        drafts, q = sol.draft(draft_next, context, min(k, remaining - 1), rng)
        p = np.stack([target_next(context + drafts[:i]) for i in range(len(drafts) + 1)])
        q = np.array(q).reshape(len(drafts), p.shape[1])
        v = verify(p, q, np.array(drafts, dtype=np.int64), rng)
        new = drafts[: v.accepted] + [v.token]
        new = new[: new.index(eos_id) + 1] if eos_id in new else new
        out.accepted_per_round.append(v.accepted)
        out.tokens += new[:remaining]
        context += new[:remaining]
    return out


def test_the_reference_verify_in_an_eager_loop_passes():
    result = graded(reference_verify_loop, runs=1_000)
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]


def test_a_loop_returning_a_plain_list_passes_without_the_round_laws():
    def speculative_sample(*args, **kwargs):
        return sol.speculative_sample(*args, **kwargs).tokens

    result = graded(speculative_sample)
    assert result.passed
    rounds = [r for r in result.results if r.check.name.endswith(("round1", "round2"))]
    assert rounds and all("not checked" in r.outcome.summary for r in rounds)


# --------------------------------------------------------------------------------------------
# Broken loops: rejected, with the hint their pattern points to
# --------------------------------------------------------------------------------------------


def judge_with_the_row_after(target_next, context, drafts, q, rng):
    for i, x in enumerate(drafts):
        p = target_next(context + drafts[: i + 1])  # the mistake: the row after x_i
        if rng.random() < min(1.0, p[x] / q[i][x]):
            continue
        residual = np.maximum(p - q[i], 0.0)
        return i, sol.sample(residual if residual.sum() > 0 else p, rng)
    return len(drafts), sol.sample(target_next(context + drafts), rng)


def judge_then_ask_again(target_next, context, drafts, q, rng):
    accepted, _ = sol.judge(target_next, context, drafts, q, rng)
    p = target_next(context + drafts[:accepted])  # the mistake: a row it already had
    residual = np.maximum(p - q[accepted], 0.0) if accepted < len(drafts) else p
    return accepted, sol.sample(residual if residual.sum() > 0 else p, rng)


def loop(judge=sol.judge, *, shrink=True, cut_eos=True, context_gets="new", count="accepted"):
    """The solution's loop with one of its steps swapped (each variant below changes one)."""

    def speculative_sample(target_next, draft_next, prompt, *, k, max_new_tokens, rng, eos_id=None):
        context, out = list(prompt), sol.Sampled()
        while True:
            remaining = max_new_tokens - len(out.tokens)
            k_round = min(k, remaining - 1) if shrink else k
            drafts, q = sol.draft(draft_next, context, k_round, rng)
            accepted, token = judge(target_next, context, drafts, q, rng)
            new = drafts[:accepted] + [token]
            if cut_eos and eos_id in new:
                new = new[: new.index(eos_id) + 1]
            new = new[:remaining]
            out.accepted_per_round.append(accepted if count == "accepted" else len(new))
            out.tokens += new
            context += new if context_gets == "new" else drafts + [token]
            if len(out.tokens) >= max_new_tokens or (cut_eos and new[-1] == eos_id):
                return out

    return speculative_sample


def plain_sampling(target_next, draft_next, prompt, *, k, max_new_tokens, rng, eos_id=None):
    """Samples from the target token by token and never asks the draft."""
    context, out = list(prompt), []
    while len(out) < max_new_tokens and not (out and out[-1] == eos_id):
        out.append(sol.sample(target_next(context + out), rng))
    return out


VARIANTS = {  # name -> (loop, the check that rejects it, words of its hint)
    "judges_with_the_row_after": (
        loop(judge_with_the_row_after),
        "loop-callables/greedy-all-kept",
        "the target's row *before* it",
    ),
    "context_keeps_rejected_drafts": (
        loop(context_gets="all drafts"),  # the mistake: context += drafts + [token]
        "loop-callables/greedy-correction",
        "never the rejected drafts",
    ),
    "ignores_eos": (loop(cut_eos=False), "loop-callables/greedy-eos", "after EOS"),
    "drafts_k_to_the_end": (
        loop(shrink=False),  # the mistake: k drafts when fewer tokens are left
        "loop-callables/greedy-limit",
        "min(k, remaining - 1)",
    ),
    "counts_emitted_tokens": (  # refused as out of range: a crash that carries the hint
        loop(count="emitted"),  # the mistake: accepted_per_round.append(len(new))
        "loop-callables/greedy-all-kept",
        "the tokens each round emitted",
    ),
    "asks_a_row_twice": (
        loop(judge_then_ask_again),
        "loop-callables/calls",
        "asks target_next again",
    ),
    "plain_sampling": (plain_sampling, "loop-callables/calls", "never asks draft_next"),
}


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_broken_loop_is_rejected_with_its_hint(name, secret):
    function, check, words = VARIANTS[name]
    failure = first_failure(graded(function, runs=2_000, secret=secret))
    assert failure.check.name == check
    hint = failure.crash.hint if failure.crash else failure.outcome.hint
    assert words in hint, hint


def outputs(secret: int | None) -> list[tuple]:
    """The tokens of every run a grading makes of the worked solution, in order."""
    seen = []

    def speculative_sample(*args, **kwargs):
        result = sol.speculative_sample(*args, **kwargs)
        seen.append(tuple(result.tokens))
        return result

    assert graded(speculative_sample, runs=200, secret=secret).passed
    return seen


def test_the_runs_draw_afresh_for_each_grading(monkeypatch):
    first, other = outputs(SECRETS[0]), outputs(SECRETS[1])
    monkeypatch.setenv(SECRET_ENV, str(SECRETS[0]))
    assert outputs(None) == first  # the secret pinned: the same draws, the same runs
    greedy = sum(case.n for case, _ in GREEDY)  # exact: the same tokens whatever is drawn
    assert first[:greedy] == other[:greedy] and first[greedy:] != other[greedy:]


def test_more_rows_than_one_pass_per_round_is_named():
    case = GREEDY[0][0]  # k = 2: at most 3 target rows a round, 3 draft rows
    assert calls_problem(case, (1, 2), (0, 0), Calls(6, 0, 4, 4, 0)) is None
    summary, hint = calls_problem(case, (1, 2), (0, 0), Calls(7, 0, 4, 4, 0))
    assert summary == "7 target rows in 2 rounds" and "one verification pass" in hint
    summary, _ = calls_problem(case, (1, 2), (0, 0), Calls(6, 0, 7, 7, 0))
    assert summary == "7 draft rows in 2 rounds"


def test_a_malformed_context_is_refused_at_the_students_line():
    def speculative_sample(target_next, draft_next, prompt, *, k, max_new_tokens, rng, eos_id=None):
        return [int(np.argmax(target_next(np.array([prompt]))))]  # a [1, n] batch, not [n]

    source = inspect.getsourcefile(speculative_sample)
    failure = first_failure(graded(speculative_sample, source=source))
    assert "flat sequence of int token ids" in str(failure.crash.error)
    assert "test_callables_loop.py" in failure.crash.where


def test_the_skeleton_names_the_grade_command():
    result = grade(f"{SKELETON}:speculative_sample")
    assert result.crash is not None and "my_callables_loop.py:speculative_sample" in str(
        result.crash.error
    )


# --------------------------------------------------------------------------------------------
# The transformers-style example, through its adapter
# --------------------------------------------------------------------------------------------


def test_the_transformers_style_loop_passes_through_its_adapter():
    torch = pytest.importorskip("torch", reason="the example's loop is written in torch")
    torch.set_num_threads(1)
    example = load(EXAMPLE, "_transformers_style_loop")
    result = graded(example.speculative_sample, runs=400)
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]

    class NoMemo(example.CallableLM):  # the adapter without its memo: rows asked again
        def row(self, context):
            return torch.log(torch.from_numpy(np.asarray(self.next_token(list(context)))))

    def without_memo(target_next, draft_next, prompt, **kwargs):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(example, "CallableLM", NoMemo)
            return example.speculative_sample(target_next, draft_next, prompt, **kwargs)

    failure = first_failure(graded(without_memo, runs=500))
    assert failure.check.name == "loop-callables/calls" and "memo" in failure.outcome.hint
