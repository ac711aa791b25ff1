"""Tiny models shared by the unit tests (session-scoped: their parameters are never mutated)."""

from __future__ import annotations

import pytest

from specdec.standins import noisy_copy

from .helpers import (
    OTHER_VOCAB_CFG,
    SHORT_CFG,
    SMALL_CFG,
    TARGET_CFG,
    make_model,
)


@pytest.fixture(scope="session")
def target():
    """The target p: V=16, L=2, strongly context-dependent (std 0.5)."""
    return make_model(TARGET_CFG, seed=0)


@pytest.fixture(scope="session")
def draft(target):
    """A draft q close to the target: greedy acceptance around 0.6, so both paths occur."""
    return noisy_copy(target, noise=0.03, seed=1)


@pytest.fixture(scope="session")
def small_model():
    """A model of another shape (L=1, C=8): its cache must not fit the target."""
    return make_model(SMALL_CFG, seed=2)


@pytest.fixture(scope="session")
def short_model():
    """A draft model with a 24-position context, shorter than the target's 64."""
    return make_model(SHORT_CFG, seed=3)


@pytest.fixture(scope="session")
def other_vocab_model():
    """A model over 12 token ids instead of 16."""
    return make_model(OTHER_VOCAB_CFG, seed=4)
