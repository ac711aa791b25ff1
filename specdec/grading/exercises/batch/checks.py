"""The checks of a submitted ragged pass,
`ragged_pass(start, n_new, T) -> (positions [B, T], mask [B, T, S], writes [B, S])`.

Row b of a right-padded pass feeds n_new[b] real tokens after its own cache end start[b], then
padding up to T columns; S = max(start + n_new) key slots are read. The contract:

    positions[b, i] = start[b] + i           for a real column (i < n_new[b]); 0 for padding
    mask[b, i, j]   = j <= start[b] + i  and  j < start[b] + n_new[b]
    writes[b, j]    = start[b] <= j < start[b] + n_new[b]

Three families, one per array, so that each is scored on its own; every check is exact (the
answer is a function of the inputs), so one wrong array is proof and a correct pass never
fails. Each family runs its fixed batches (a prefill, an offset, two starts, padding, an idle
row, an idle row with no history, columns wider than every row, an idle row that sets S), then
200 random ragged batches (idle rows and padding in most), drawn afresh for each grading from
its secret (engine/secret.py): a table of the shown batches fails them. It stops at its first
failure and shows the smallest batch that shows it, expected against yours; the hint is read
from every batch the submission answered, real columns first, then padding: the usual mistakes
are the contract's rule with a switch turned (below), and a mistake is named only if it gives
the submission's answer on every batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specdec.grading.engine.answers import AskedOnce
from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.quoting import one_line, shown_value
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import Submission, SubmissionCrash, call_safely, show_inputs

COMMAND = "ragged_pass"


@dataclass(frozen=True)
class Case:
    start: tuple[int, ...]  # [B] each row's cache end: where its first new token goes
    n_new: tuple[int, ...]  # [B] each row's real new tokens, 0 <= n_new[b] <= T
    T: int  # columns of the padded pass, T >= max(n_new), T >= 1
    about: str = ""  # what the batch shows, for the story

    @property
    def B(self) -> int:
        return len(self.start)

    @property
    def S(self) -> int:  # the key slots any row reads: the longest history after the pass
        return max(s + n for s, n in zip(self.start, self.n_new, strict=True))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:  # (start [B], n_new [B]) int64
        return np.array(self.start, dtype=np.int64), np.array(self.n_new, dtype=np.int64)

    def real(self) -> np.ndarray:  # [B, T] bool: the real columns (the rest is padding)
        return np.arange(self.T)[None, :] < np.array(self.n_new)[:, None]

    def describe(self) -> str:
        return f"{COMMAND}(start={list(self.start)}, n_new={list(self.n_new)}, T={self.T})"


# --------------------------------------------------------------------------------------------
# The rule, written here from its statement, and the usual mistakes as switches away from it
# --------------------------------------------------------------------------------------------


def row_base(case: Case, base: str) -> np.ndarray:
    # [B, 1, 1]: the slot row b's column 0 sits at, by the contract ("start") or a mistake
    start = np.array(case.start, dtype=np.int64)
    chosen = {
        "start": start,
        "zero": np.zeros_like(start),  # no offset: every row as if its cache were empty
        "first": np.full_like(start, start[0]),  # row 0's start for every row
        "max": np.full_like(start, start.max()),  # the largest start for every row
    }[base]
    return chosen[:, None, None]


def positions_of(case: Case, base: str = "start", shift: int = 0, pad: str = "zero") -> np.ndarray:
    # -> [B, T] int64: real column i of row b at base_b + i + shift; padding by `pad`
    i = np.arange(case.T)[None, :]
    real = row_base(case, base)[:, :, 0] + i + shift
    start = np.array(case.start)[:, None]
    padding = {"zero": 0 * i, "continue": start + i, "minus1": -1 + 0 * i, "column": i}[pad]
    return np.where(case.real(), real, padding).astype(np.int64)


def mask_of(
    case: Case,
    base: str = "start",
    reach: int = 0,
    history: bool = True,
    pad: str = "last",
    S: int | None = None,
) -> np.ndarray:
    # -> [B, T, S] bool: real column i of row b sees j <= base_b + i + reach (and j >= start[b]
    # without its history); a padding column by `pad` ("last": what the row's last real
    # column sees, j < start[b] + n_new[b], the contract)
    S = case.S if S is None else S
    j = np.arange(S)[None, None, :]
    i = np.arange(case.T)[None, :, None]
    s, n = row_base(case, "start"), np.array(case.n_new)[:, None, None]
    real = j <= row_base(case, base) + i + reach
    if not history:
        real = real & (j >= s)
    padding = {
        "last": j < s + n,
        "causal": j <= s + i,  # the causal rule alone: slots past the row's end
        "none": np.zeros_like(j <= s + i),  # every key masked
        "all": np.ones_like(j <= s + i),  # every slot of the pass, other rows' lengths too
    }[pad]
    return np.where(case.real()[:, :, None], real, padding)


def writes_of(
    case: Case, pad: bool = False, idle_one: bool = False, shift: int = 0, history: bool = False
) -> np.ndarray:
    # -> [B, S] bool: row b writes slots [start[b] + shift, start[b] + shift + n_b); n_b is
    # n_new[b] (T with `pad`: the padding written too; at least 1 with `idle_one`)
    s, n = np.array(case.start)[:, None], np.array(case.n_new)[:, None]
    n = np.full_like(n, case.T) if pad else np.maximum(n, 1) if idle_one else n
    j = np.arange(case.S)[None, :]
    lo = 0 if history else s + shift
    return (j >= lo) & (j < s + shift + n)


def expected(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The contract's (positions [B, T], mask [B, T, S], writes [B, S]) on `case`."""
    return positions_of(case), mask_of(case), writes_of(case)


NOT_OFFSET = (
    "row b continues its own sequence: its cache holds positions 0..start[b]-1, so its i-th "
    "new token sits at position start[b] + i, and the first free slot is start[b]"
)
# each mistake: (the array it makes, the part of the array it shows in, its hint)
Mistake = tuple[Callable[[Case], np.ndarray], str, str]
POSITION_MISTAKES: tuple[Mistake, ...] = (
    (
        lambda c: positions_of(c, base="zero"),
        "real",
        "your positions are 0, 1, 2, ... in every row, not offset by start: " + NOT_OFFSET,
    ),
    (
        lambda c: positions_of(c, base="first"),
        "real",
        "every row is offset by row 0's start: each row has its own, start[b] + i",
    ),
    (
        lambda c: positions_of(c, base="max"),
        "real",
        "every row is offset by the largest start: each row has its own, start[b] + i",
    ),
    (
        lambda c: positions_of(c, shift=1),
        "real",
        "off by one: the first new token of row b sits at position start[b], not start[b] + 1 "
        "(start[b] counts the tokens already cached, at positions 0..start[b]-1)",
    ),
    (
        lambda c: positions_of(c, shift=-1),
        "real",
        "off by one: the first new token of row b sits at position start[b], not start[b] - 1 "
        "(start[b] - 1 is the last token already cached)",
    ),
    (
        lambda c: positions_of(c, pad="continue"),
        "padding",
        "your padding columns continue the row's positions (start[b] + i): near the length "
        "limit that runs past n_ctx, and the position-embedding table has n_ctx rows. Padding "
        "is thrown away, so give it position 0, always in range",
    ),
    (
        lambda c: positions_of(c, pad="minus1"),
        "padding",
        "your padding columns have position -1: NumPy reads wpe[-1], the last row, without a "
        "word, and torch's embedding raises. Give padding position 0, always in range",
    ),
    (
        lambda c: positions_of(c, pad="column"),
        "padding",
        "your padding columns have position i (the column index): the contract gives padding "
        "position 0 (thrown away, and always in range)",
    ),
)
MASK_MISTAKES: tuple[Mistake, ...] = (
    (
        lambda c: mask_of(c, base="zero"),
        "real",
        "your mask ignores start: it is causal_mask(T, S) in every row, so a real token sees "
        "slots 0..i instead of its history and itself, 0..start[b] + i. " + NOT_OFFSET,
    ),
    (
        lambda c: mask_of(c, base="first"),
        "real",
        "every row's mask is offset by row 0's start: each row has its own, j <= start[b] + i",
    ),
    (
        lambda c: mask_of(c, base="max"),
        "real",
        "every row's mask is offset by the largest start: each row has its own, j <= start[b] + i",
    ),
    (
        lambda c: mask_of(c, reach=-1),
        "real",
        "off by one: a token does not see itself. Its key is written at slot start[b] + i "
        "before attention, and it may see j <= start[b] + i (<=, not <)",
    ),
    (
        lambda c: mask_of(c, reach=1),
        "real",
        "off by one: a token sees the next token's slot, start[b] + i + 1 (the future): "
        "it may see j <= start[b] + i",
    ),
    (
        lambda c: mask_of(c, history=False),
        "real",
        "your real tokens see only this pass's new tokens: the row's history, slots "
        "0..start[b]-1 already in its cache, is its context and must be visible",
    ),
    (
        lambda c: mask_of(c, pad="causal"),
        "padding",
        "your padding follows the causal rule alone, j <= start[b] + i, so it sees slots "
        "start[b] + n_new[b] and beyond, which this row did not write in this pass (stale "
        "keys of rolled-back drafts, or zeros). A padding column sees what its row's last real "
        "token sees, j < start[b] + n_new[b] (an idle row: its history); the contract's mask "
        "is (j <= start[b] + i) & (j < start[b] + n_new[b])",
    ),
    (
        lambda c: mask_of(c, pad="all"),
        "padding",
        "your padding sees every slot j < S, so a short row's padding reads slots past its own "
        "end, up to the length of the longest row. A padding column sees what its row's last "
        "real token sees, j < start[b] + n_new[b] (an idle row: its history)",
    ),
    (
        lambda c: mask_of(c, pad="none"),
        "padding",
        "your padding masks every slot: its attention row has no key left (a softmax over "
        "-inf alone is 0/0 = NaN; with a large negative score it becomes uniform over every "
        "slot, other rows' included). A padding column sees what its row's last real token "
        "sees, j < start[b] + n_new[b] (an idle row: its history)",
    ),
)
WRITES_MISTAKES: tuple[Mistake, ...] = (
    (
        lambda c: writes_of(c, pad=True),
        "all",
        "you write every column's slot, start[b]..start[b] + T - 1: padding is never written "
        "(its keys would land in slots the row has not reached). Row b writes exactly "
        "n_new[b] slots, start[b]..start[b] + n_new[b] - 1",
    ),
    (
        lambda c: writes_of(c, idle_one=True),
        "all",
        "an idle row (n_new[b] = 0: finished, or a one-token prompt at prefill) writes a "
        "slot: it writes nothing, and its cache stays as it was",
    ),
    (
        lambda c: writes_of(c, shift=1),
        "all",
        "off by one: row b's first new token goes to slot start[b], the first free slot "
        "(slots 0..start[b]-1 hold its history)",
    ),
    (
        lambda c: writes_of(c, shift=-1),
        "all",
        "off by one: you overwrite slot start[b] - 1, the last token already cached; row b "
        "writes start[b]..start[b] + n_new[b] - 1",
    ),
    (
        lambda c: writes_of(c, history=True),
        "all",
        "you mark the row's whole history, slots 0..start[b] + n_new[b] - 1: `writes` is what "
        "this pass writes, slots start[b]..start[b] + n_new[b] - 1",
    ),
)


# --------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------

FIXED = (
    Case((0,), (3,), 3, "one row, an empty cache: a prefill, the plain causal mask"),
    Case((4,), (2,), 2, "one row after 4 cached tokens: every index offset by 4"),
    Case((3, 1), (2, 2), 2, "two rows, two starts, no padding"),
    Case((2, 5), (3, 1), 3, "row 1 feeds 1 token: 2 padding columns"),
    Case((4, 2, 6), (2, 0, 3), 3, "row 1 is idle (n_new = 0): padding only, writes nothing"),
    Case((0, 3), (0, 2), 2, "row 0 is idle with nothing cached: it sees no slot at all"),
    Case((1, 2), (1, 2), 4, "T = 4, wider than every row"),
    Case((7, 2), (0, 3), 3, "the idle row holds the longest history: it sets S = 7"),
)
N_RANDOM = 200
RANDOM_SEED = 2026  # the grader's stream (from the grading's secret) of the random batches


@lru_cache(maxsize=4)
def random_cases(secret: int) -> tuple[Case, ...]:
    """N_RANDOM distinct ragged batches of one grading, from its secret: B in 1..5, starts
    0..10, n_new 0..4 (a fifth of the rows idle), T at least the longest row (sometimes
    wider)."""
    rng = grader_rng(RANDOM_SEED, secret)
    cases: dict[Case, None] = {}
    while len(cases) < N_RANDOM:
        B = int(rng.integers(1, 6))
        start = tuple(int(s) for s in rng.integers(0, 11, size=B))
        n_new = tuple(0 if rng.random() < 0.2 else int(rng.integers(1, 5)) for _ in range(B))
        T = max(max(n_new), 1) + int(rng.integers(0, 2))
        cases[Case(start, n_new, T)] = None
    return tuple(cases)


def all_cases() -> tuple[Case, ...]:
    return FIXED + random_cases(grading_secret())


def size(case: Case) -> tuple:
    return (case.B * case.T * case.S, case.B, case.T, case.start, case.n_new)


# --------------------------------------------------------------------------------------------
# Calling the submission
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    arrays: tuple  # (positions, mask, writes), each an ndarray or None (not an array)
    problems: tuple[str, ...]  # why each is None ("" when it is an array)


def call_pass(sub: Submission, case: Case) -> Answer:
    """One call on fresh arrays -> the three returned values as arrays. A raise is reported at
    the student's line; a value that is not three things is a breach of the contract."""
    start, n_new = case.arrays()
    shown = {"start": start.copy(), "n_new": n_new.copy(), "T": case.T}
    try:
        result = call_safely(sub, (start, n_new, case.T), {}, shown, COMMAND)
    except SubmissionCrash as crash:
        crash.call = case.describe()  # call_safely's wording is a verify's
        raise
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        said = shown_value(result)
        crash = SubmissionCrash(
            ValueError(f"must return (positions, mask, writes); it returned {said}"),
            f"the value your {COMMAND} returned",
            show_inputs(**shown),
        )
        crash.call = case.describe()
        raise crash
    arrays, problems = [], []
    for value in result:
        try:
            arrays.append(np.asarray(value))
            problems.append("")
        except (TypeError, ValueError, OverflowError) as error:
            arrays.append(None)
            problems.append(f"not an array: {one_line(str(error))}")
    return Answer(tuple(arrays), tuple(problems))


# the submission's answer on each case {case: Answer}, each computed once per submission (and
# grading: its secret draws the random batches)
answers = AskedOnce(lambda sub, cases: [call_pass(sub, c) for c in cases], grading_secret)


# --------------------------------------------------------------------------------------------
# One family: one of the three arrays
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    index: int  # its place in the returned tuple
    name: str  # positions, mask or writes
    family: str
    want: Callable[[Case], np.ndarray]  # the contract's array
    mistakes: tuple[Mistake, ...]
    kind: str  # "int" or "bool"

    def shape_of(self, case: Case) -> tuple[int, ...]:
        return self.want(case).shape


def read(part: Part, case: Case, answer: Answer) -> tuple[np.ndarray | None, str]:
    """The submission's array for `part` on `case`, as int64 or bool -> (array, "") when it has
    the contract's shape and values of the right kind, else (None, what is wrong)."""
    value, problem = answer.arrays[part.index], answer.problems[part.index]
    if value is None:
        return None, f"{part.name} is {problem}"
    want = part.shape_of(case)
    if value.shape != want:
        return None, f"{part.name} has shape {list(value.shape)}; the contract's is {list(want)}"
    if part.kind == "bool":
        if value.dtype != bool and not np.all(np.isin(value, (0, 1))):
            return None, f"{part.name} must hold True/False (bool), got dtype {value.dtype}"
        return value.astype(bool), ""
    if value.dtype.kind not in "iuf":  # (not bool, object, str, complex)
        return None, f"{part.name} must hold ints (int64), got dtype {value.dtype}"
    if not np.all(np.equal(np.mod(value, 1), 0)):
        return None, f"{part.name} must hold whole numbers, got {value.tolist()}"
    return value.astype(np.int64), ""


def region(part: Part, case: Case, where: str) -> np.ndarray:
    # bool of the array's shape: the entries in the real columns, the padding, or all
    if where == "all":
        return np.ones(part.shape_of(case), dtype=bool)
    real = case.real()
    if part.name == "mask":
        real = np.broadcast_to(real[:, :, None], part.shape_of(case))
    return real if where == "real" else ~real


def equal_on(a: np.ndarray, b: np.ndarray, where: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a[where], b[where]))


def shape_hint(part: Part, case: Case, answer: Answer) -> str:
    value = answer.arrays[part.index]
    S = case.S
    if part.name == "positions":
        return f"positions has one entry per column of the pass: [B, T] = [{case.B}, {case.T}]"
    guesses = {
        case.T: "T, the columns of the pass",
        max(case.start) + case.T: "max(start) + T, as if padding were written",
        max([s + n for s, n in zip(case.start, case.n_new, strict=True) if n] or [0]): (
            "the longest of the rows that feed tokens, leaving out an idle row's history"
        ),
    }
    if part.name == "mask" and value is not None and value.shape == (case.B, S, case.T):
        return (
            f"your mask is [B, S, T] = {list(value.shape)}, keys before queries: the contract's "
            f"is [B, T, S], mask[b, i, j] for the new column i and the key slot j"
        )
    got = value.shape[-1] if value is not None and value.ndim else None
    if value is not None and value.ndim == len(part.shape_of(case)) and got != S:
        because = guesses.get(got, "")
        return (
            f"your {part.name} has {got} key slots"
            + (f" (S = {because})" if because else "")
            + f"; the contract's S is max(start + n_new) = {S}, which counts every row's "
            f"history, an idle row's too (its padding reads it)"
        )
    shape = "[B, T, S]" if part.name == "mask" else "[B, S]"
    return (
        f"{part.name} must have shape {shape} = {list(part.shape_of(case))}, with "
        f"S = max(start + n_new) = {S}"
    )


def diagnose(part: Part, seen: dict[Case, np.ndarray]) -> str:
    """{case: the submission's array} on every batch it answered in the right shape -> the
    mistake that gives every one of them: real columns first, then padding."""
    # writes has no columns: one slot is written or not, whatever the column
    for where in ("all",) if part.name == "writes" else ("real", "padding"):
        wrong = {
            c: a for c, a in seen.items() if not equal_on(a, part.want(c), region(part, c, where))
        }
        if not wrong:
            continue
        for make, shows, hint in part.mistakes:
            if shows == where and all(
                equal_on(a, make(c), region(part, c, where)) for c, a in seen.items()
            ):
                return hint
        return fallback(part, min(wrong, key=size), wrong[min(wrong, key=size)])
    return ""


RULES = {
    "positions": "positions[b, i] = start[b] + i for a real column (i < n_new[b]), 0 for padding",
    "mask": "mask[b, i, j] = (j <= start[b] + i) & (j < start[b] + n_new[b])",
    "writes": "writes[b, j] = start[b] <= j < start[b] + n_new[b]",
}


def fallback(part: Part, case: Case, got: np.ndarray) -> str:
    # the first entry that differs, in words, and the rule
    want = part.want(case)
    at = tuple(int(x) for x in np.argwhere(got != want)[0])
    b = at[0]
    what = f"row {b} (start {case.start[b]}, n_new {case.n_new[b]})"
    if part.name != "writes":
        kind = "real" if at[1] < case.n_new[b] else "padding"
        what += f", column {at[1]} ({kind})"
    if part.name == "mask":
        what += f", slot {at[2]}"
    elif part.name == "writes":
        what += f", slot {at[1]}"
    return (
        f"on {case.describe()}, {what}: expected {want[at].item()!r}, yours {got[at].item()!r}. "
        f"The rule: {RULES[part.name]}"
    )


def grid(mask: np.ndarray) -> str:  # [S] bool -> "x x . ." (x: may see / written)
    return " ".join("x" if v else "." for v in mask) or "(no slot)"


def story_of(part: Part, case: Case, got: np.ndarray | None, problem: str) -> list[str]:
    lines = [case.describe() + (f"  ({case.about})" if case.about else "")]
    if problem:
        return [*lines, problem]
    want = part.want(case)
    if part.name == "positions":
        lines += [f"expected positions {want.tolist()}", f"yours              {got.tolist()}"]
    elif part.name == "writes":
        lines.append(f"slots 0..{case.S - 1} written (x), row by row: expected | yours")
        for b in range(case.B):
            mark = "" if np.array_equal(want[b], got[b]) else "   <- differs"
            lines.append(f"  row {b}: {grid(want[b])} | {grid(got[b])}{mark}")
    else:
        b = next(b for b in range(case.B) if not np.array_equal(want[b], got[b]))
        lines.append(
            f"row {b} (start {case.start[b]}, n_new {case.n_new[b]}): slots 0..{case.S - 1} "
            f"each column may see (x): expected | yours"
        )
        for i in range(case.T):
            kind = "real" if i < case.n_new[b] else "pad "
            mark = "" if np.array_equal(want[b, i], got[b, i]) else "   <- differs"
            lines.append(f"  column {i} ({kind}): {grid(want[b, i])} | {grid(got[b, i])}{mark}")
    return lines


def part_check(part: Part, name: str, what: str, cases: Callable[[], tuple[Case, ...]]) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        mine = answers(sub, cases())
        read_ = {c: read(part, c, a) for c, a in mine.items()}
        bad = [c for c, (got, problem) in read_.items() if problem]
        wrong = [
            c
            for c, (got, _) in read_.items()
            if got is not None and not np.array_equal(got, part.want(c))
        ]
        if not bad and not wrong:
            n = len(mine)
            return Outcome(True, f"the contract's {part.name} on {n} batches", n=n)
        first = bad or wrong
        case = first[0] if name == "fixed" else min(first, key=size)
        got, problem = read_[case]
        story = story_of(part, case, got, problem)
        story.append(f"{len(bad) + len(wrong)} of {len(mine)} batches differ")
        if bad:
            hint = shape_hint(part, case, mine[case]) if "shape" in problem else problem
        else:
            hint = diagnose(part, evidence(sub, part, {c: read_[c][0] for c in wrong}))
        summary = f"{len(bad) + len(wrong)} of {len(mine)} batches: {part.name} differs"
        return Outcome(False, summary, story, hint, n=len(mine))

    return Check(f"{part.family}/{name}", what, False, run)


def evidence(sub: Submission, part: Part, wrong: dict[Case, np.ndarray]) -> dict:
    """The submission's array on every batch of every check that it answered in the right
    shape (a mistake must give all of them; a few batches alone may fit several)."""
    try:
        seen = answers(sub, all_cases())
    except SubmissionCrash:  # it crashes on another check's batch: judge on these alone
        return wrong
    read_ = {c: read(part, c, a)[0] for c, a in seen.items()}
    return {**{c: a for c, a in read_.items() if a is not None}, **wrong}


PARTS = (
    Part(0, "positions", "batch-positions", positions_of, POSITION_MISTAKES, "int"),
    Part(1, "mask", "batch-mask", mask_of, MASK_MISTAKES, "bool"),
    Part(2, "writes", "batch-writes", writes_of, WRITES_MISTAKES, "bool"),
)
VERDICTS = {
    "positions": "each row's positions continue its own sequence; padding at 0",
    "mask": "each row sees its history and its real tokens causally; padding what its last "
    "real token sees",
    "writes": "each row writes exactly its real tokens' slots; an idle row none",
}


def batch_families(policy: str = "shrink") -> list[Family]:
    """The ragged-batch exercise's three families (`policy` is a loop's; unused here)."""
    families = []
    for part in PARTS:
        checks = [
            part_check(
                part,
                "fixed",
                f"{len(FIXED)} hand-made batches: a prefill, offsets, padding, idle rows",
                lambda: FIXED,
            ),
            part_check(
                part,
                "random",
                f"{N_RANDOM} random ragged batches, drawn afresh for each grading",
                lambda: random_cases(grading_secret()),
            ),
        ]
        families.append(Family(part.family, VERDICTS[part.name], checks))
    return families
