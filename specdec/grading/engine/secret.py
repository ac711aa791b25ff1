"""The grading's secret: the seed of every input the grader draws, never seen by the graded code.

A check whose inputs are fixed can be answered from a table (one failing run prints them with
the expected outcome), so the grader draws the inputs of its scored checks fresh for each
grading, from a 128-bit secret held in the grading process (secrets.randbits): the worker that
runs a submission is never handed it (its environment is built from scratch, and this process
is not readable by it: worker_setup.py), and nothing the submission is handed is derived from
it except the inputs themselves.

The generators the checks on drawn inputs hand the submission (`rng`, streams()) are fresh
for each grading too, from 128 other random bits drawn apart from the secret, so that their
state says nothing of it; a false alarm's chance (at most ALPHA per family) is then over the
grading's own draws, inputs and uniforms alike, not left to what one fixed stream favours.

`grade()` holds a new pair for each grading (`secret_held`). Set SPECDEC_GRADING_SECRET to an
integer to draw the same inputs and the same submission generators again (both then derived
from it: a reproducible regrading, the project's tests); never for live submissions: one
failing run would then teach the inputs of every later one. Checks run outside `grade()` (the
tests call `run_families` directly) use the variable if set, else one pair drawn per process.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from contextvars import ContextVar

import numpy as np

SECRET_ENV = "SPECDEC_GRADING_SECRET"

_held: ContextVar[tuple[int, int] | None] = ContextVar("grading_secret", default=None)
_process: list[tuple[int, int]] = []  # drawn on first use outside a grading


def secret_from_environment() -> int | None:
    """SPECDEC_GRADING_SECRET as an integer (decimal, or 0x... hex); None when unset."""
    value = os.environ.get(SECRET_ENV, "").strip()
    if not value:
        return None
    try:
        secret = int(value, 0)
    except ValueError:
        message = f"{SECRET_ENV}={value!r}: expected an integer, e.g. 12345 or 0x3f"
        raise ValueError(message) from None
    if secret < 0:
        raise ValueError(f"{SECRET_ENV}={value!r}: expected a non-negative integer")
    return secret


def pair_of(secret: int | None) -> tuple[int, int]:
    """(the grader's secret, the submission generators' entropy): both derived from a pinned
    secret; else two independent draws of 128 random bits."""
    if secret is not None:
        derived = np.random.SeedSequence(secret, spawn_key=(2**31,)).generate_state(4)
        return secret, int.from_bytes(derived.tobytes(), "little")
    return secrets.randbits(128), secrets.randbits(128)


def held_pair() -> tuple[int, int]:
    held = _held.get()
    if held is not None:
        return held
    pinned = secret_from_environment()
    if pinned is not None:
        return pair_of(pinned)
    if not _process:
        _process.append(pair_of(None))
    return _process[0]


def grading_secret() -> int:
    """The secret of the grading under way (see the module's docstring for outside one)."""
    return held_pair()[0]


@contextlib.contextmanager
def secret_held(secret: int | None = None) -> Iterator[int]:
    """Draw every input from `secret` (None: SPECDEC_GRADING_SECRET if set, else a new one),
    and the submission's generators from its companion, until the block ends."""
    pair = pair_of(secret if secret is not None else secret_from_environment())
    token = _held.set(pair)
    try:
        yield pair[0]
    finally:
        _held.reset(token)


def grader_rng(seed: int, secret: int | None = None) -> np.random.Generator:
    """The grader's generator number `seed` of a grading: drawn from its secret (None: the
    grading under way's)."""
    secret = grading_secret() if secret is None else secret
    return np.random.default_rng(np.random.SeedSequence(secret, spawn_key=(seed,)))


def submission_rng(seed: int) -> np.random.Generator:
    """The generator number `seed` a sampled check hands the submission in this grading: from
    the entropy drawn apart from the secret (or derived from a pinned one)."""
    return np.random.default_rng(np.random.SeedSequence(held_pair()[1], spawn_key=(seed,)))
