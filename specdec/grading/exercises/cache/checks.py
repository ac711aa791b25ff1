"""The checks of a submitted `SlotCache`: one layer's K/V in preallocated slots, with a commit
pointer (the contract is in notebooks/exercises/my_cache.py; reference/kv_cache.py's KVCache
is the full version).

One family, every check exact: the grader drives a new cache through a script of calls and,
after each call, holds its state — `length`, `pending` and the rows `committed()` returns —
against its own model of the contract. Every row written holds distinct random numbers, so
each row the cache returns can be named (w2.1: row 1 of the 2nd write), and one wrong state
is proof. The scripts, most telling first:

1. write, commit all, roll back: the view shows exactly the committed rows;
2. commit(0): nothing kept, the next write lands at slot 0;
3. a commit of fewer rows than written: the rejected tail goes at the rollback, and the next
   write lands right after the committed prefix;
4. several one-row writes per round (a drafter), two commits in a row;
5. six rounds of a speculative loop's target cache (k + 1 rows, accepted + 1 kept);
6. overflow: a write that does not fit raises ValueError and changes nothing; one that fits
   exactly is allowed;
7. commit(n) with n > pending raises ValueError and changes nothing;
8. random scripts of 40 calls, refused ones among them, drawn afresh for each grading from
   its secret (engine/secret.py), their rows too.

A failure shows the calls, the expected state and the cache's, and a hint read from the
difference: which counter is off after which call, or where the wrong row came from (a
dropped row: the write position was not rewound; a later write's row: a write overwrote
this round's rows; a row never written; float32 storage).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome
from specdec.grading.engine.quoting import one_line, shown_value, type_name
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import Submission, SubmissionCrash, call_safely

NH, HS = 2, 3  # n_head, head_size of every graded cache
Op = tuple  # ("write", T) | ("commit", n) | ("rollback",)


@dataclass(frozen=True)
class Script:
    capacity: int
    ops: tuple[Op, ...]
    seed: int  # the rows' random values


class Breach(Exception):
    """The cache does not offer the contract's interface (a method, a counter, a view)."""


# --------------------------------------------------------------------------------------------
# The grader's model of the contract
# --------------------------------------------------------------------------------------------


class Model:
    """The state the contract promises, by row label: the committed rows and the temporary
    ones in slot order, and the rows a rollback dropped (to tell where a wrong row came from)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.kept: list[str] = []  # slots [0, length)
        self.temp: list[str] = []  # slots [length, length + pending)
        self.dropped: set[str] = set()

    @property
    def length(self) -> int:
        return len(self.kept)

    @property
    def pending(self) -> int:
        return len(self.temp)

    def refusal(self, op: Op) -> str:
        """Why the contract refuses `op` ('' when it is allowed)."""
        if op[0] == "write" and self.length + self.pending + op[1] > self.capacity:
            return (
                f"{self.length} committed + {self.pending} temporary + {op[1]} new rows exceed "
                f"the capacity of {self.capacity}"
            )
        if op[0] == "commit" and op[1] > self.pending:
            return f"commit({op[1]}) with only {self.pending} temporary rows"
        return ""

    def apply(self, op: Op, labels: list[str]) -> None:
        if op[0] == "write":
            self.temp += labels
        elif op[0] == "commit":
            self.kept += self.temp[: op[1]]
            self.temp = self.temp[op[1] :]
        else:
            self.dropped.update(self.temp)
            self.temp = []

    def describe(self) -> str:
        return (
            f"length {self.length}, pending {self.pending}, committed() rows "
            f"[{' '.join(self.kept)}]"
        )


@dataclass
class Seen:
    """The submitted cache's state: its counters and the rows its view returns."""

    length: int
    pending: int
    keys: np.ndarray  # [NH, rows, HS] float64
    values: np.ndarray

    def describe(self, labels: list[str]) -> str:
        return (
            f"length {self.length}, pending {self.pending}, committed() rows [{' '.join(labels)}]"
        )


class Rows:
    """The random rows of one script, named wJ.t (row t of the J-th write, refused or not)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.writes = 0
        self.k: dict[str, np.ndarray] = {}  # label -> [NH, HS]
        self.v: dict[str, np.ndarray] = {}

    def new(self, T: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        # -> labels [T], k [NH, T, HS], v [NH, T, HS]
        self.writes += 1
        k, v = self.rng.normal(size=(2, NH, T, HS))
        labels = [f"w{self.writes}.{t}" for t in range(T)]
        for t, label in enumerate(labels):
            self.k[label], self.v[label] = k[:, t], v[:, t]
        return labels, k, v

    def stack(self, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # labels [n] -> the rows' keys and values, [NH, n, HS] each
        if not labels:
            return np.zeros((NH, 0, HS)), np.zeros((NH, 0, HS))
        return (
            np.stack([self.k[a] for a in labels], axis=1),
            np.stack([self.v[a] for a in labels], axis=1),
        )

    def name(self, k_row: np.ndarray, v_row: np.ndarray) -> str:
        # [NH, HS] rows the cache returned -> the label of the row written with them
        for label, k in self.k.items():
            if np.array_equal(k, k_row):
                return label if np.array_equal(self.v[label], v_row) else f"{label}(keys only)"
        for label, k in self.k.items():  # stored in lower precision?
            if np.allclose(k, k_row, rtol=1e-6, atol=1e-7):
                return f"~{label}"
        return "zeros" if not np.any(k_row) else "?"


def write_number(label: str) -> int:
    # "w3.1" -> 3
    return int(label.lstrip("~").split(".")[0][1:])


# --------------------------------------------------------------------------------------------
# Driving the submitted cache
# --------------------------------------------------------------------------------------------


def student_call(sub: Submission, function, args: tuple, call: str, history: list[str]):
    """Call student code; a raise becomes a SubmissionCrash at the student's line, shown with
    the calls that led there."""
    try:
        return call_safely(dataclasses.replace(sub, function=function), args, {}, {})
    except SubmissionCrash as crash:
        crash.call = call  # call_safely's wording is a verify's
        crash.inputs = "\n".join(f"    {line}" for line in history)
        raise


def read_counter(sub: Submission, cache, name: str, history: list[str]) -> int:
    try:
        value = student_call(sub, getattr, (cache, name), f"cache.{name}", history)
    except SubmissionCrash as crash:
        if isinstance(crash.error, AttributeError) and not crash.frames:
            raise Breach(f"your SlotCache has no attribute `{name}`") from None
        raise
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise Breach(f"`cache.{name}` must be an int, got {shown_value(value)}")
    if not -(2**63) <= value < 2**63:  # (a report could not print it: str() refuses)
        raise Breach(f"`cache.{name}` must be a count of rows, got {shown_value(value)}")
    return int(value)


def observe(sub: Submission, cache, history: list[str]) -> Seen:
    length = read_counter(sub, cache, "length", history)
    pending = read_counter(sub, cache, "pending", history)
    view = student_call(sub, method(cache, "committed"), (), "cache.committed()", history)
    if not isinstance(view, (tuple, list)) or len(view) != 2:
        said = type_name(type(view).__name__, "object")
        raise Breach(f"committed() must return a pair (keys, values), got a {said}")
    try:
        keys, values = (np.array(a, dtype=np.float64) for a in view)
    except (TypeError, ValueError, OverflowError) as error:
        said = one_line(f"{type(error).__name__}: {error}")
        raise Breach(f"committed() must return two arrays of numbers ({said})") from None
    return Seen(length, pending, keys, values)


def method(cache, name: str):
    function = getattr(cache, name, None)
    if not callable(function):
        raise Breach(f"your SlotCache has no method {name}()")
    return function


def op_text(op: Op, labels: list[str]) -> str:
    if op[0] == "write":
        return f"cache.write(k, v)  # {op[1]} row{'s' * (op[1] > 1)}: {' '.join(labels)}"
    return f"cache.{op[0]}({op[1] if len(op) > 1 else ''})"


def play(sub: Submission, script: Script) -> tuple[bool, str, list[str], str]:
    """Run the script on a new cache -> (passed, summary, story, hint)."""
    model, rows = Model(script.capacity), Rows(script.seed)
    history = [f"cache = SlotCache({script.capacity}, {NH}, {HS})"]
    try:
        cache = student_call(sub, sub.function, (script.capacity, NH, HS), history[0], history)
        seen = observe(sub, cache, history)
        problem = compare(model, seen, rows)
        if problem:
            what = WRONG[problem]
            return failure(what, "a new cache", model, seen, rows, history, new_cache_hint())
        for i, op in enumerate(script.ops):
            refusal = model.refusal(op)
            labels, k, v = rows.new(op[1]) if op[0] == "write" else ([], None, None)
            history.append(op_text(op, labels) + (f"  # refused: {refusal}" * bool(refusal)))
            # fresh copies: a cache that edits its arguments cannot spoil the grader's rows
            args = (k.copy(), v.copy()) if op[0] == "write" else op[1:]
            raised = perform(sub, cache, op, args, refusal, model, history)
            before = (model.length, model.pending)
            if not refusal:
                model.apply(op, labels)
            seen = observe(sub, cache, history)
            verdict = judge(op, refusal, raised, before, model, seen, rows)
            if verdict:
                what, hint = verdict
                return failure(what, f"call {i + 1}", model, seen, rows, history, hint, refusal)
    except Breach as breach:
        story = ["the calls, on a new cache:", *(f"  {line}" for line in history)]
        hint = f"{breach}: the contract is in notebooks/exercises/my_cache.py's docstring"
        return False, str(breach), story, hint
    return True, f"{len(script.ops)} calls, the state right after each", [], ""


def perform(sub, cache, op: Op, args: tuple, refusal: str, model: Model, history: list[str]):
    """Make the call; -> the exception a refused call raised (None: it raised nothing)."""
    call = history[-1].split("  #")[0]
    try:
        student_call(sub, method(cache, op[0]), args, call, history)
    except SubmissionCrash as crash:
        if refusal:
            return crash.error  # judged with the state it left
        crash.hint = crash.hint or allowed_hint(op, model)
        raise
    return None


def allowed_hint(op: Op, model: Model) -> str:
    # why the call that crashed is one the contract allows
    if op[0] == "write":
        room = model.capacity - model.length - model.pending
        return (
            f"this write is allowed: {op[1]} new row(s) after {model.length} committed and "
            f"{model.pending} temporary fit in the capacity of {model.capacity} ({room} free "
            f"slot(s); a write that fills the cache exactly is allowed)"
        )
    if op[0] == "commit":
        return f"commit({op[1]}) is allowed: {model.pending} temporary rows (0 <= n <= pending)"
    return "rollback() is always allowed (with no temporary rows it changes nothing)"


def new_cache_hint() -> str:
    return (
        "a new cache holds nothing: length 0, pending 0, and committed() returns two "
        f"[n_head, 0, head_size] = [{NH}, 0, {HS}] arrays"
    )


# --------------------------------------------------------------------------------------------
# Comparing and explaining
# --------------------------------------------------------------------------------------------


def compare(model: Model, seen: Seen, rows: Rows) -> str:
    """What differs between the model's state and the cache's ('' when nothing)."""
    if seen.length != model.length:
        return "length"
    if seen.pending != model.pending:
        return "pending"
    want = (NH, model.length, HS)
    if seen.keys.shape != want or seen.values.shape != want:
        return "view shape"
    keys, values = rows.stack(model.kept)
    if not (np.array_equal(seen.keys, keys) and np.array_equal(seen.values, values)):
        return "rows"
    return ""


def seen_labels(seen: Seen, rows: Rows) -> list[str]:
    if seen.keys.ndim != 3 or seen.keys.shape != seen.values.shape:
        return [f"<arrays of shape {list(seen.keys.shape)} and {list(seen.values.shape)}>"]
    return [rows.name(seen.keys[:, i], seen.values[:, i]) for i in range(seen.keys.shape[1])]


def judge(op, refusal, raised, before, model: Model, seen: Seen, rows: Rows):
    """(what is wrong, the hint) after one call, or None when the state is right."""
    if refusal:
        name = "a write that does not fit" if op[0] == "write" else "commit(n) with n > pending"
        if raised is None:
            return f"{op_text(op, [])} was accepted", (
                f"{name} must raise ValueError (here {refusal}), before changing anything"
            )
        if not isinstance(raised, ValueError):
            return f"raised {type(raised).__name__}", (
                f"{name} must raise ValueError (yours raised {type(raised).__name__}: "
                f"{one_line(str(raised))})"
            )
    problem = compare(model, seen, rows)
    if not problem:
        return None
    if refusal:
        return f"the refused call changed the {problem}", (
            f"a refused call must change nothing: {name} raised ValueError but left the cache "
            f"changed ({problem}). Check that the rows fit (or that n <= pending) first, then "
            f"write and move the counters"
        )
    return WRONG[problem], state_hint(op, problem, before, model, seen, rows)


WRONG = {
    "length": "length is off",
    "pending": "pending is off",
    "view shape": "committed() has the wrong shape",
    "rows": "committed() holds the wrong rows",
}


def state_hint(op: Op, problem: str, before, model: Model, seen: Seen, rows: Rows) -> str:
    length0, pending0 = before
    call = op[0]
    if problem == "length":
        if call == "commit" and seen.length == length0 + pending0 and op[1] < pending0:
            return (
                f"commit({op[1]}) kept every temporary row ({pending0}) instead of the first "
                f"n = {op[1]}: add n to length, and leave the rest temporary for rollback() "
                f"to drop"
            )
        if call == "commit":
            return f"commit(n) adds exactly n to length (here {length0} + {op[1]})"
        return f"{call}() must not change length: only commit(n) makes rows permanent"
    if problem == "pending":
        if call == "rollback":
            return "rollback() drops every temporary row: pending becomes 0"
        if call == "commit" and seen.pending == 0:
            return (
                f"commit({op[1]}) dropped the other {pending0 - op[1]} temporary rows: they "
                f"stay temporary (pending - n) until rollback() drops them, as in the reference"
            )
        if call == "commit":
            return "commit(n) moves n rows from temporary to committed: pending - n"
        return f"write of T rows adds T to pending (here {pending0} + {op[1]})"
    if problem == "view shape":
        if seen.keys.ndim == 3 and seen.keys.shape[1] == model.length + model.pending:
            return (
                "committed() returned the temporary rows too: it must return slots "
                "[0, length) only, the committed rows"
            )
        return (
            f"committed() must return (keys, values), each [n_head, length, head_size] = "
            f"[{NH}, {model.length}, {HS}]"
        )
    return rows_hint(model, seen, rows)


def rows_hint(model: Model, seen: Seen, rows: Rows) -> str:
    got, want = seen_labels(seen, rows), model.kept
    i = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
    if i is None:
        return "the committed rows differ from the rows written there"
    label = got[i]
    if label.startswith("~"):
        return (
            "your rows are the written ones to float32 precision: store K and V in float64 "
            "arrays (np.zeros(..., dtype=np.float64)); the grader compares exactly"
        )
    if label.endswith("(keys only)"):
        return (
            f"slot {i}'s keys are right but its values are not the v written with them: "
            f"write v into the value storage (k stored twice, or k and v swapped?)"
        )
    if label in model.dropped:
        return (
            f"slot {i} holds {label}, a row that a rollback dropped, where the contract puts "
            f"{want[i]}: the later rows were written after the dropped ones. rollback() must "
            f"move the write position back, so the next write lands right after the "
            f"committed rows, at slot length + pending"
        )
    if label in rows.k and write_number(label) > write_number(want[i]):
        return (
            f"slot {i} holds {label}, a later write's row, where {want[i]} belongs: a write "
            f"overwrote rows written earlier in the round. Write at slot length + pending, "
            f"after the temporary rows already there, not at length"
        )
    if label in ("zeros", "?"):
        return (
            f"slot {i} holds a row that was never written ({label}) where {want[i]} belongs: "
            f"the rows went to other slots. Each write lands at slot length + pending"
        )
    return f"slot {i} holds {label} where the contract puts {want[i]}"


def failure(what, where, model, seen, rows, history, hint, refusal="") -> tuple:
    story = ["the calls, on a new cache (rows are named wJ.t: row t of the J-th write):"]
    story += [f"  {line}" for line in history[:-1]]
    story.append(f"  {history[-1]}    <- here")
    if refusal:
        story.append(f"expected: ValueError, and nothing changed: {model.describe()}")
    else:
        story.append(f"expected: {model.describe()}")
    story.append(f"yours:    {seen.describe(seen_labels(seen, rows))}")
    return False, f"{where}: {what}", story, hint


# --------------------------------------------------------------------------------------------
# The scripts
# --------------------------------------------------------------------------------------------


def W(T: int) -> Op:
    return ("write", T)


def C(n: int) -> Op:
    return ("commit", n)


R: Op = ("rollback",)

SCRIPTS: dict[str, tuple[str, Script]] = {
    "write-commit-rollback": (
        "write, commit all, roll back: the view shows exactly the committed rows",
        Script(8, (W(3), C(3), R, W(2), C(2), R), 1),
    ),
    "commit-0": (
        "commit(0) keeps nothing; the next write lands at slot 0",
        Script(8, (W(2), C(0), R, W(1), C(1), R), 2),
    ),
    "partial-commit": (
        "commit fewer rows than written: the tail goes, the next write follows the prefix",
        Script(8, (W(4), C(1), R, W(2), C(2), R, W(3), C(2), R), 3),
    ),
    "one-row-writes": (
        "several writes per round, one row each (a drafter); two commits in a row",
        Script(8, (W(1), W(1), W(1), C(2), R, W(1), W(1), C(1), C(1), R), 4),
    ),
    "rounds": (
        "six rounds of a target cache: write k + 1 = 4 rows, keep accepted + 1, roll back",
        Script(24, tuple(op for a in (3, 0, 2, 3, 1, 0) for op in (W(4), C(a + 1), R)), 5),
    ),
    "overflow": (
        "a write that does not fit raises ValueError and changes nothing; an exact fit is fine",
        Script(6, (W(3), C(3), R, W(2), W(2), C(2), R, W(2), W(1), C(1), W(1), R), 6),
    ),
    "over-commit": (
        "commit(n) with n > pending raises ValueError and changes nothing",
        Script(8, (W(2), C(3), C(2), C(1), R, W(1), C(2), C(1)), 7),
    ),
}
N_RANDOM, RANDOM_OPS, RANDOM_CAPACITY = 3, 40, 12
RANDOM_SEED = 100  # the grader's streams (from the grading's secret): RANDOM_SEED + i, script i


@lru_cache(maxsize=4)
def random_scripts(secret: int) -> tuple[Script, ...]:
    """The scripts of one grading, from its secret: writes (1 to 3 rows), commits (0 to
    pending + 1: sometimes too many) and rollbacks, on a small cache, so that writes are
    refused once it fills; the seed of each script's rows is drawn from the same stream."""
    scripts = []
    for i in range(N_RANDOM):
        rng = grader_rng(RANDOM_SEED + i, secret)
        model, ops = Model(RANDOM_CAPACITY), []
        for _ in range(RANDOM_OPS):
            u = rng.random()
            op = W(int(rng.integers(1, 4))) if u < 0.45 else R
            if 0.45 <= u < 0.8:
                op = C(int(rng.integers(0, model.pending + 2)))
            if not model.refusal(op):
                model.apply(
                    op, [f"r{len(ops)}.{t}" for t in range(op[1] if op[0] == "write" else 0)]
                )
            ops.append(op)
        scripts.append(Script(RANDOM_CAPACITY, tuple(ops), int(rng.integers(2**63))))
    return tuple(scripts)


# --------------------------------------------------------------------------------------------
# The checks and the family
# --------------------------------------------------------------------------------------------


def script_check(name: str, what: str, scripts) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        all_scripts = scripts(grading_secret()) if callable(scripts) else scripts
        calls = 0
        for script in all_scripts:
            passed, summary, story, hint = play(sub, script)
            calls += len(script.ops)
            if not passed:
                if len(all_scripts) > 1:
                    summary = f"script {all_scripts.index(script) + 1}, {summary}"
                return Outcome(False, summary, story, hint, n=calls)
        if len(all_scripts) > 1:
            summary = f"{len(all_scripts)} scripts, {calls} calls, the state right after each"
        return Outcome(True, summary, n=calls)

    return Check(f"cache/{name}", what, False, run)


def cache_families(policy: str = "shrink") -> list[Family]:
    """The cache exercise's one family (`policy` is a loop's; unused here)."""
    checks = [script_check(name, what, (script,)) for name, (what, script) in SCRIPTS.items()]
    what = f"{N_RANDOM} random scripts of {RANDOM_OPS} calls, drawn afresh for each grading"
    checks.append(script_check("random", what, random_scripts))
    return [
        Family("cache", "your SlotCache keeps, drops and shows rows as the contract says", checks)
    ]
