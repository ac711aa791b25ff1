"""The EAGLE block exercise's cases, and the call of a submitted
`eagle_block_forward(tokens, features, params, n_head) -> [T, C]` on them, each case asked once
per submission and its answer read as an array (checks.py judges it against rule.py).

Four groups of hand-made cases, shown on failure as examples (their inputs are fixed), and a
group drawn for each grading from its secret (engine/secret.py), so that no table of the
shown answers passes:

    one       T = 1: a draft step's single row (attention then returns its own value row)
    causal    T = 3..6 rows, one head: each row reads itself and the rows before it
    heads     several heads (C / n_head columns each)
    quiet     rows of a small spread (embeddings and features of size 1e-3), where
              LayerNorm's epsilon counts
    fresh     FRESH_N cases drawn from the grading's secret: widths, heads, lengths, scales
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.grading.engine.answers import AskedOnce, give_hint
from specdec.grading.engine.quoting import shown_value
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import (
    Submission,
    SubmissionCrash,
    call_each_safely,
    show_inputs,
)
from specdec.grading.exercises.eagle_block.rule import TARGET, rule
from specdec.grading.project import GPTConfig, eagle_param_shapes, expected_param_shapes

COMMAND = "eagle_block_forward"
FRESH_SEED = 61  # the grader's stream (from the secret) of the fresh cases
FRESH_N = 40
ANSWER_MOST = 1 << 16  # entries of a returned array: the cases' are a few hundred


@dataclass(frozen=True)
class Case:
    T: int  # positions
    C: int  # width (the target's n_embd)
    n_head: int
    V: int  # vocabulary
    seed: int  # draws every input
    quiet: bool = False  # embeddings and features of spread ~1e-3
    about: str = ""

    def arguments(self) -> tuple:
        return inputs(self.T, self.C, self.n_head, self.V, self.seed, self.quiet)

    def describe(self) -> str:
        tokens, features, params, n_head = self.arguments()
        return describe_call(tokens, features, params, n_head)

    def size(self) -> tuple:  # the smallest case shows a mistake best
        return self.T, self.n_head, self.C, self.V, self.seed


def param_shapes(V: int, C: int, n_ctx: int) -> dict[str, tuple[int, ...]]:
    """What an EagleDrafter holds, by name and shape: the target's shared tensors (TARGET),
    then the drafter's own (fusion and one block), as the project names and shapes them."""
    cfg = GPTConfig(n_vocab=V, n_ctx=n_ctx, n_embd=C, n_head=1, n_layer=1)
    target = expected_param_shapes(cfg)
    return {name: target[name] for name in TARGET} | eagle_param_shapes(cfg)


def inputs(T: int, C: int, n_head: int, V: int, seed: int, quiet: bool) -> tuple:
    """(tokens [T] int64, features [T, C] float32, params {name: float32 array}, n_head), the
    same on every call: matrices of std 1/sqrt(fan-in) (so that attention is far from
    uniform), LayerNorm gains near 1 and biases near 0 but not at them (so that each one
    counts), wpe as large as the rows (so that adding it shows)."""
    rng = np.random.default_rng([seed, T, C, n_head, V, int(quiet)])
    small = 1e-3 if quiet else 1.0
    params = {}
    for name, shape in param_shapes(V, C, T + 4).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            value = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name == "fc.bias":
            value = 0.2 * small * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            value = 0.2 * rng.standard_normal(shape)
        elif name == "wte.weight":
            value = small * rng.standard_normal(shape)
        elif name == "wpe.weight":
            value = rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(shape[0])
        params[name] = value.astype(np.float32)
    tokens = rng.integers(0, V, size=T).astype(np.int64)
    features = (small * 1.5 * rng.standard_normal((T, C))).astype(np.float32)
    return tokens, features, params, n_head


def describe_call(tokens, features, params, n_head) -> str:
    V, C = np.shape(params["wte.weight"])
    return (
        f"{COMMAND}(tokens={np.asarray(tokens).tolist()} (T = {len(tokens)}), features "
        f"[{len(tokens)}, {C}], params (V = {V}, C = {C}), n_head={n_head})"
    )


def expected(case: Case) -> np.ndarray:
    return rule(*case.arguments())


GROUPS: dict[str, tuple[str, tuple[Case, ...]]] = {
    "one": (
        "one position (T = 1): a draft step's single row",
        (
            Case(1, 4, 1, 7, 1, about="one row, one head"),
            Case(1, 8, 2, 11, 2, about="one row, two heads"),
            Case(1, 6, 3, 5, 3, about="one row, three heads"),
        ),
    ),
    "causal": (
        "several positions, one head: each row reads itself and the rows before it",
        (
            Case(2, 4, 1, 7, 4, about="two rows"),
            Case(3, 4, 1, 9, 5, about="three rows, a catch-up after a round"),
            Case(6, 6, 1, 13, 6, about="six rows, a prefill"),
        ),
    ),
    "heads": (
        "several heads, each reading its own C / n_head columns",
        (
            Case(3, 8, 2, 9, 7, about="two heads of 4"),
            Case(4, 12, 3, 10, 8, about="three heads of 4"),
            Case(5, 8, 4, 12, 9, about="four heads of 2"),
        ),
    ),
    "quiet": (
        "rows of a small spread (embeddings and features ~1e-3): LayerNorm's epsilon counts",
        (
            Case(1, 4, 1, 6, 10, True, "one quiet row"),
            Case(3, 8, 2, 9, 11, True, "three quiet rows, two heads"),
        ),
    ),
}


def fresh_cases(secret: int) -> tuple[Case, ...]:
    """FRESH_N cases from the grading's secret: C in 4..16 with a head count dividing it,
    T in 1..10, a vocabulary of 3..40, one in five quiet."""
    rng = grader_rng(FRESH_SEED, secret)
    cases = []
    for _ in range(FRESH_N):
        C = int(rng.choice([4, 6, 8, 12, 16]))
        n_head = int(rng.choice([h for h in (1, 2, 3, 4) if C % h == 0]))
        T, V = int(rng.integers(1, 11)), int(rng.integers(3, 41))
        cases.append(Case(T, C, n_head, V, int(rng.integers(2**31)), bool(rng.random() < 0.2)))
    return tuple(cases)


def group_cases(group: str) -> tuple[Case, ...]:
    return fresh_cases(grading_secret()) if group == "fresh" else GROUPS[group][1]


def all_cases() -> tuple[Case, ...]:
    return tuple(c for g in [*GROUPS, "fresh"] for c in group_cases(g))


# --------------------------------------------------------------------------------------------
# Calling the submission and reading its answer
# --------------------------------------------------------------------------------------------


def shown_of(tokens, features, params, n_head) -> dict:
    named = ", ".join(f"{n} {list(np.shape(v))}" for n, v in params.items())
    return {"tokens": tokens, "features": features, "params": f"{{{named}}}", "n_head": n_head}


def fresh_copy(args: tuple) -> tuple:
    tokens, features, params, n_head = args
    return tokens.copy(), features.copy(), {n: v.copy() for n, v in params.items()}, n_head


def breach(message: str, call: tuple) -> SubmissionCrash:
    crash = SubmissionCrash(
        ValueError(message),
        f"the value your {COMMAND} returned",
        show_inputs(**shown_of(*call)),
    )
    crash.call = describe_call(*call)
    crash.hint = "return one row per position: a float array of shape [T, C] (see the skeleton)"
    return crash


def read_answer(result, call: tuple) -> np.ndarray:
    """What the submission returned -> an array, or the contract it broke. A wrong shape or a
    value that is not finite is left to the checks (a mistake they can name), within bounds:
    numbers only, at most 2 dimensions and ANSWER_MOST entries."""
    if isinstance(result, (list, tuple)) and len(result) > ANSWER_MOST:  # before converting
        raise breach(f"it returned {len(result):,} rows, one per position", call)
    try:
        array = np.asarray(result)
    except (TypeError, ValueError, OverflowError):
        raise breach(f"it returned {shown_value(result)}, not an array", call) from None
    if array.dtype.kind not in "iuf":  # (not bool, object, str, complex)
        raise breach(f"it must return numbers, got {shown_value(result)}", call)
    if array.size > ANSWER_MOST or array.ndim > 2:
        raise breach(f"it returned shape {list(array.shape)}; the rows are [T, C]", call)
    return array.astype(np.float64)


def crash_hint(call: tuple, error: BaseException) -> str:
    """Why a correct idea may crash on this call."""
    tokens, features, params, n_head = call
    C = features.shape[1]
    if isinstance(error, KeyError):
        return f"params holds exactly these names: {', '.join(params)}"
    if isinstance(error, ValueError) and "reshape" in str(error):
        return (
            f"each of the n_head = {n_head} heads reads C / n_head = {C // n_head} columns "
            f"of q, k and v (C = {C}); split the last axis, keep the T rows"
        )
    if isinstance(error, (ValueError, IndexError)) and len(tokens) == 1:
        return "T may be 1 (one draft step): keep the rows a 2-D [T, C] array throughout"
    return ""


def call_forward(sub: Submission, calls: list[tuple]) -> list[np.ndarray]:
    """The submission's answers to calls [(tokens, features, params, n_head)], in one request
    when it runs in a worker; a raise names the call that raised, with a hint."""
    try:
        results = call_each_safely(
            sub,
            calls,
            (),
            lambda i: shown_of(*calls[i]),
            COMMAND,
            lambda i: describe_call(*calls[i]),
            fresh_copy,
        )
    except SubmissionCrash as crash:
        give_hint(crash, calls, lambda c: describe_call(*c), crash_hint)
        raise
    return [read_answer(r, c) for r, c in zip(results, calls, strict=True)]


# the submission's answer on each case {case: rows}, asked once per submission (and secret)
answers = AskedOnce(
    lambda sub, cases: call_forward(sub, [c.arguments() for c in cases]), grading_secret
)
