"""The cache exercise's grader (specdec/grading/exercises/cache/checks.py): the worked solution and
the project's own KVCache pass, the skeleton fails on its NotImplementedError, each broken
SlotCache is rejected, under two secrets, with the hint its mistake calls for (matched by a few
words), and the random scripts are drawn afresh from each grading's secret (a pinned one draws
them again)."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.grading import grade
from specdec.grading.engine.core import run_families
from specdec.grading.engine.secret import SECRET_ENV, secret_held
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises import exercise
from specdec.grading.exercises.cache.checks import (
    N_RANDOM,
    RANDOM_CAPACITY,
    RANDOM_OPS,
    SCRIPTS,
    Model,
    cache_families,
    random_scripts,
)

from .exercise_tests import rejected_under, the_solution_passes

BROKEN = "tests/grader/broken_exercises_basic.py"
CACHE = exercise("cache")
SECRETS = (1, 2)  # the random scripts of two gradings


def first_failures(name: str, secrets: tuple[int, ...] = SECRETS[:1]) -> list:
    """(the grading, its first failure) of the broken `name` under each secret."""
    return rejected_under(f"{BROKEN}:{name}", "cache", cache_families, secrets)


def test_the_solution_passes_and_is_recognised_by_its_name():
    assert the_solution_passes("cache").seconds < 10


class ReferenceSlotCache:
    """reference.kv_cache.KVCache with one layer, behind the exercise's interface."""

    def __init__(self, capacity: int, n_head: int, head_size: int) -> None:
        from reference.kv_cache import KVCache

        self.cache = KVCache(1, n_head, head_size, capacity, dtype=np.float64)

    @property
    def length(self) -> int:
        return self.cache.length

    @property
    def pending(self) -> int:
        return self.cache.pending

    def write(self, k, v) -> None:  # k, v [nh, T, hs]
        self.cache.check_room(k.shape[1])
        self.cache.write(0, self.cache.end, k, v)
        self.cache.mark_written(k.shape[1])

    def commit(self, n: int) -> None:
        self.cache.commit(n)

    def rollback(self) -> None:
        self.cache.rollback()

    def committed(self):
        keys, values = self.cache.committed()
        return keys[0], values[0]


def test_the_reference_kv_cache_passes():
    sub = Submission("reference KVCache", ReferenceSlotCache, "cache", "test", None)
    result = run_families(sub, cache_families())
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]


def test_the_skeleton_fails_on_its_not_implemented_error():
    result = grade(CACHE.spec())
    assert not result.passed
    crash = result.crash
    assert isinstance(crash.error, NotImplementedError)
    assert f"specdec grade {CACHE.spec()}" in str(crash.error)
    assert "my_cache.py, line" in crash.where


# the check that rejects each broken cache, and words its hint must contain
HINTS = {
    "CommitsEverything": ("cache/commit-0", "kept every temporary row"),
    "CommitDropsTheRest": ("cache/commit-0", "until rollback() drops them"),
    "RollbackKeepsWritePosition": ("cache/commit-0", "move the write position back"),
    "WritesAtLength": ("cache/one-row-writes", "overwrote rows written earlier"),
    "ViewIncludesTemporary": ("cache/write-commit-rollback", "temporary rows too"),
    "OverflowMovesCounters": ("cache/overflow", "a refused call must change nothing"),
    "CommitUnchecked": ("cache/over-commit", "must raise ValueError"),
    "Float32Storage": ("cache/write-commit-rollback", "float32"),
}


@pytest.mark.parametrize("name", sorted(HINTS))
def test_a_broken_cache_is_rejected_with_its_hint(name):
    check, words = HINTS[name]
    for result, failure in first_failures(name, SECRETS):  # two gradings, the same verdict
        assert failure.check.name == check
        assert result.crash is None
        assert words in failure.outcome.hint, failure.outcome.hint
        assert "<- here" in "\n".join(failure.outcome.story)  # the calls, up to the wrong one
        assert result.seconds < 10


def test_a_crash_on_an_allowed_call_says_why_it_is_allowed():
    ((result, failure),) = first_failures("RefusesExactFit")
    assert failure.check.name == "cache/overflow" and failure.crash is not None
    assert "broken_exercises_basic.py, line" in failure.crash.where
    assert "fills the cache exactly is allowed" in failure.crash.hint
    assert "cache.commit(2)" in failure.crash.inputs  # the calls that led there


def replay(script) -> tuple[int, int, int]:
    # -> (writes refused with temporary rows present, commits refused, writes that fit exactly)
    model, full_writes, commits, exact = Model(script.capacity), 0, 0, 0
    for op in script.ops:
        refused = model.refusal(op)
        full_writes += bool(refused) and op[0] == "write" and model.pending > 0
        commits += bool(refused) and op[0] == "commit"
        fits = op[0] == "write" and model.length + model.pending + op[1] == model.capacity
        exact += fits
        if not refused:
            model.apply(op, ["x"] * (op[1] if op[0] == "write" else 0))
    return full_writes, commits, exact


def test_the_scripts_exercise_what_they_claim():
    # the overflow script refuses a write while rows are temporary and allows an exact fit;
    # the over-commit script refuses commits; the random ones refuse both kinds
    assert replay(SCRIPTS["overflow"][1])[0] >= 1 and replay(SCRIPTS["overflow"][1])[2] >= 1
    assert replay(SCRIPTS["over-commit"][1])[1] >= 2
    for secret in SECRETS:
        scripts = random_scripts(secret)
        assert len(scripts) == N_RANDOM
        assert all(len(s.ops) == RANDOM_OPS and s.capacity == RANDOM_CAPACITY for s in scripts)
        totals = np.sum([replay(s) for s in scripts], axis=0)
        assert totals[0] >= 1 and totals[1] >= 3


class Recording(ReferenceSlotCache):
    """The reference cache, noting every call the grader makes and every row it writes."""

    seen: list = []

    def __init__(self, capacity: int, n_head: int, head_size: int) -> None:
        super().__init__(capacity, n_head, head_size)
        self.seen.append(("new", capacity))

    def write(self, k, v) -> None:
        self.seen.append(("write", k.tobytes() + v.tobytes()))
        super().write(k, v)

    def commit(self, n: int) -> None:
        self.seen.append(("commit", n))
        super().commit(n)

    def rollback(self) -> None:
        self.seen.append(("rollback",))
        super().rollback()


def calls_made(secret: int | None) -> list[tuple]:
    """Every call of a grading, the rows written included, in order (`secret` None:
    SPECDEC_GRADING_SECRET's, as `specdec grade` would)."""
    Recording.seen = []
    with secret_held(secret):
        result = run_families(
            Submission("recording", Recording, "cache", "test", None), cache_families()
        )
    assert result.passed, [r.outcome.summary for r in result.results if r.status != "pass"]
    return Recording.seen


def test_the_random_scripts_are_drawn_afresh_for_each_grading(monkeypatch):
    first, other = calls_made(SECRETS[0]), calls_made(SECRETS[1])
    monkeypatch.setenv(SECRET_ENV, str(SECRETS[0]))
    assert calls_made(None) == first  # the secret pinned: the same calls and rows, in order
    shown = first.index(("new", RANDOM_CAPACITY))  # the shown scripts come first
    assert first[:shown] == other[:shown] and first[shown:] != other[shown:]
    rows = [{c for c in calls[shown:] if c[0] == "write"} for calls in (first, other)]
    assert not rows[0] & rows[1]  # not one random row in common
    a, b = random_scripts(SECRETS[0]), random_scripts(SECRETS[1])
    assert a == random_scripts(SECRETS[0]) and a != b
