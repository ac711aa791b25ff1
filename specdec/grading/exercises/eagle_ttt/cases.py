"""The training-time-test exercise's cases, and the call of a submitted
`training_time_test_step(params, frozen, tokens, features, target_logp, steps) -> dict` on them,
each case asked once per submission, its reply read part by part (checks.py judges the parts).

Shown cases are fixed (the skeleton's worked example among them: a failure may print them);
the scored random ones are drawn for each grading from its secret (engine/secret.py), so that
no table of the shown cases' answers passes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from specdec.grading.engine.answers import AskedOnce, ask_cases
from specdec.grading.engine.quoting import shown_value
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import Submission, SubmissionCrash
from specdec.grading.exercises.eagle_ttt.model import FROZEN, PARAMS, Answer, log_softmax

COMMAND = "training_time_test_step"
FRESH_SEED = 46  # the grader's stream (from the secret) of the fresh cases
N_FRESH = 12


@dataclass(frozen=True)
class Case:
    C: int  # the feature width
    H: int  # the block's hidden width
    V: int  # the vocabulary
    N: int  # the window's length: tokens x(0..N-1), features f(0..N-1)
    steps: int  # s, 1 <= s <= N - 1
    seed: int  # the arrays' (a fresh case's from the grading's secret)
    label: str = "shown"  # "shown" or "fresh"
    decimals: int | None = None  # arrays rounded (the worked example: readable in a docstring)

    def arrays(self) -> dict:
        return case_arrays(self)

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.arrays()["params"]

    @property
    def frozen(self) -> dict[str, np.ndarray]:
        return self.arrays()["frozen"]

    @property
    def tokens(self) -> np.ndarray:
        return self.arrays()["tokens"]

    @property
    def features(self) -> np.ndarray:
        return self.arrays()["features"]

    @property
    def logp(self) -> np.ndarray:
        return self.arrays()["logp"]

    def arguments(self) -> tuple:
        # what the submission receives, fresh copies
        a = self.arrays()
        return (
            {n: v.copy() for n, v in a["params"].items()},
            {n: v.copy() for n, v in a["frozen"].items()},
            a["tokens"].copy(),
            a["features"].copy(),
            a["logp"].copy(),
            self.steps,
        )

    def describe(self) -> str:
        return (
            f"{COMMAND}(C = {self.C}, H = {self.H}, V = {self.V}, N = {self.N} positions, "
            f"steps = {self.steps}) [{self.label} case]"
        )

    def size(self) -> tuple:  # the smallest case shows a mistake best
        return self.N * self.steps, self.C, self.V, self.H, self.seed


@cache
def case_arrays(case: Case) -> dict:
    """The case's arrays, float64 (tokens int64): weights at a scale where tanh works in its
    curved part and q is neither flat nor one-hot; p(t) has no zero (its log is finite)."""
    rng = np.random.default_rng(case.seed)
    C, H, V, N = case.C, case.H, case.V, case.N

    def normal(*shape, scale=1.0):
        return rng.standard_normal(shape) * scale

    params = {
        "W": normal(2 * C, C, scale=1.0 / np.sqrt(2 * C)),
        "b": normal(C, scale=0.3),
        "A": normal(C, H, scale=1.2 / np.sqrt(C)),
        "B": normal(H, C, scale=0.8 / np.sqrt(H)),
    }
    frozen = {"embed": normal(V, C), "head": normal(C, V, scale=1.2 / np.sqrt(C))}
    out = {
        "params": params,
        "frozen": frozen,
        "tokens": rng.integers(0, V, N).astype(np.int64),
        "features": normal(N, C),
    }
    if case.decimals is not None:
        d = case.decimals
        out = {
            "params": {n: v.round(d) for n, v in params.items()},
            "frozen": {n: v.round(d) for n, v in frozen.items()},
            "tokens": out["tokens"],
            "features": out["features"].round(d),
        }
    out["logp"] = log_softmax(normal(N, V, scale=1.5))
    if case.decimals is not None:  # p to 2 decimals, each row summing to 1 (its last entry)
        p = np.exp(out["logp"]).round(2)
        p[:, -1] = 1 - p[:, :-1].sum(axis=1)
        out["logp"] = np.log(p)
    return out


EXAMPLE = Case(2, 2, 3, 4, 2, 1573, decimals=1)  # the skeleton's worked example
SHOWN: tuple[Case, ...] = (
    EXAMPLE,
    Case(3, 4, 5, 5, 1, 1401),  # one step: no unrolling (EAGLE-1's step, without regression)
    Case(3, 3, 4, 5, 4, 1402),  # s = N - 1: the last step has a single row
    Case(4, 6, 7, 8, 3, 1403),
)


@cache
def fresh_cases(secret: int) -> tuple[Case, ...]:
    """N_FRESH cases drawn from the grading's secret: C 2..5, H 2..7, V 3..9, N 3..10, s 2..4
    (at most N - 1) but for one case in six with s = 1."""
    rng = grader_rng(FRESH_SEED, secret)
    cases = []
    for i in range(N_FRESH):
        N = int(rng.integers(3, 11))
        s = 1 if i % 6 == 5 else int(rng.integers(2, min(4, N - 1) + 1))
        C, H, V = (int(rng.integers(lo, hi)) for lo, hi in ((2, 6), (2, 8), (3, 10)))
        cases.append(Case(C, H, V, N, s, int(rng.integers(2**62)), "fresh"))
    return tuple(cases)


def group_cases(group: str) -> tuple[Case, ...]:
    return SHOWN if group == "shown" else fresh_cases(grading_secret())


def all_cases() -> tuple[Case, ...]:
    return SHOWN + fresh_cases(grading_secret())


# --------------------------------------------------------------------------------------------
# Reading a reply: each part on its own, so that a wrong or missing part fails its family only
# --------------------------------------------------------------------------------------------


@dataclass
class Reply:
    sources: np.ndarray | None = None
    fed: np.ndarray | None = None
    loss: float | None = None
    grads: dict[str, np.ndarray] | None = None
    broken: dict[str, str] = field(default_factory=dict)  # part -> why it cannot be read

    def answer(self) -> Answer:
        return Answer(self.sources, self.fed, self.loss, self.grads)


PARTS = ("sources", "fed", "loss", "grads")
LIST_MOST = 64  # rows of a nested list read as an array (the cases' have at most 10)


def read_reply(result, case: Case) -> Reply:
    """What the submission returned -> its parts, checked for type, shape and finiteness
    against the case; a part that breaks the contract is noted in `broken`, with why."""
    reply = Reply()
    if not isinstance(result, dict):
        why = f"must return a dict with keys {list(PARTS)}; it returned {shown_value(result)}"
        reply.broken = dict.fromkeys(PARTS, why)
        return reply
    s, N, C = case.steps, case.N, case.C
    for part in PARTS:
        if part not in result:
            reply.broken[part] = f"the dict it returned has no key {part!r}"
            continue
        try:
            if part == "sources":
                reply.sources = array_of(result[part], "sources", (s, N - 1), "iu")
            elif part == "fed":
                reply.fed = array_of(result[part], "fed", (s, N - 1, C), "f")
            elif part == "loss":
                reply.loss = float(array_of(result[part], "loss", (), "f"))
            else:
                reply.grads = grads_of(result[part], case)
        except ValueError as error:
            reply.broken[part] = str(error)
    return reply


def array_of(value, name: str, shape: tuple, kinds: str) -> np.ndarray:
    if isinstance(value, (float, int)) and not isinstance(value, bool) and shape == ():
        value = np.float64(value)
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, (list, tuple)) and len(value) <= LIST_MOST:  # nested lists: read
        try:
            value = np.asarray(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{name} is not an array: {shown_value(value)}") from None
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {shown_value(value)}")
    if kinds == "f" and value.dtype.kind in "iu":
        value = value.astype(np.float64)
    if value.dtype.kind not in kinds:
        want = "integers" if kinds == "iu" else "floats"
        raise ValueError(f"{name} must hold {want}, got dtype {value.dtype}")
    if value.shape != shape:
        want = "a number (0-d)" if shape == () else f"shape {list(shape)}"
        raise ValueError(f"{name} has shape {list(value.shape)}; the case needs {want}")
    if kinds == "f" and not np.all(np.isfinite(value)):
        raise ValueError(f"{name} holds non-finite values (nan or inf)")
    return value.astype(np.float64) if kinds == "f" else value.astype(np.int64)


def grads_of(value, case: Case) -> dict[str, np.ndarray]:
    if not isinstance(value, dict):
        raise ValueError(f"grads must be a dict of arrays {list(PARAMS)}, got {shown_value(value)}")
    if sorted(map(str, value)) != sorted(PARAMS):
        raise ValueError(
            f"grads must have exactly the keys {list(PARAMS)} (the trained parameters; "
            f"{list(FROZEN)} are frozen), got {sorted(map(str, value))}"
        )
    return {n: array_of(value[n], f"grads[{n!r}]", case.params[n].shape, "f") for n in PARAMS}


def breach(message: str, case: Case) -> SubmissionCrash:
    crash = SubmissionCrash(
        ValueError(message), f"the value your {COMMAND} returned", case.describe()
    )
    crash.call = case.describe()
    crash.hint = (
        "return a dict {'sources': int array [s, N-1], 'fed': float array [s, N-1, C], "
        "'loss': a float, 'grads': {'W', 'b', 'A', 'B'} arrays of the parameters' shapes} "
        "(see the skeleton's docstring)"
    )
    return crash


def part_of(reply: Reply, part: str, case: Case):
    """The part a family judges, or the breach that fails it."""
    if part in reply.broken:
        raise breach(reply.broken[part], case)
    return getattr(reply, part)


# --------------------------------------------------------------------------------------------
# Calling the submission
# --------------------------------------------------------------------------------------------


def shown_of(case: Case) -> dict:
    params, frozen, tokens, features, logp, steps = case.arguments()
    return {"tokens": tokens, "features": features, "target_logp": logp, "steps": steps}


def call_steps(sub: Submission, cases: list[Case]) -> list[Reply]:
    """The submission's replies on cases (in one request when it runs in a worker); a raise
    names the case that raised."""
    results = ask_cases(sub, cases, shown_of, COMMAND, copied)
    return [read_reply(r, c) for c, r in zip(cases, results, strict=True)]


# the submission's reply to each case {case: Reply}, asked once per submission
replies = AskedOnce(call_steps)


def copied(args: tuple) -> tuple:
    params, frozen, tokens, features, logp, steps = args
    return (
        {n: v.copy() for n, v in params.items()},
        {n: v.copy() for n, v in frozen.items()},
        tokens.copy(),
        features.copy(),
        logp.copy(),
        steps,
    )
