"""StageClock: both loops charge their stages, and the stages add up to the run's time."""

from __future__ import annotations

import time

import numpy as np
import pytest

from reference import ModelDrafter, SamplingParams, generate, speculative_generate
from reference.checks import check_clock
from specdec.timing import StageClock

SOFT = SamplingParams(temperature=1.0)


def test_mark_charges_the_time_since_the_previous_mark():
    clock = StageClock()
    time.sleep(0.02)
    clock.mark("a")
    clock.mark("b")
    clock.mark("a")
    assert clock.seconds["a"] >= 0.02 > clock.seconds["b"]
    assert clock.calls == {"a": 2, "b": 1}
    assert clock.total() == pytest.approx(clock.seconds["a"] + clock.seconds["b"])
    assert clock.total("b") == clock.seconds["b"]
    assert clock.total("never") == 0.0 and "never" not in clock.seconds  # asking adds nothing


def test_restart_charges_nothing_for_the_time_before_it():
    clock = StageClock()
    time.sleep(0.02)
    clock.restart()
    clock.mark("a")
    assert clock.seconds["a"] < 0.02


def test_merge_adds_seconds_and_calls():
    a, b = StageClock(), StageClock()
    a.seconds["x"], a.calls["x"] = 1.0, 2
    b.seconds["x"], b.calls["x"] = 0.5, 1
    b.seconds["y"], b.calls["y"] = 0.25, 1
    a.merge(b)
    assert (a.seconds["x"], a.calls["x"], a.seconds["y"], a.calls["y"]) == (1.5, 3, 0.25, 1)


@pytest.mark.parametrize("bad", ["clock", 1, {"prefill": 0.0}])
def test_a_clock_must_be_a_stage_clock(bad):
    with pytest.raises(TypeError, match="clock must have restart"):
        check_clock(bad)


def test_generate_charges_prefill_then_one_sample_and_target_step_per_token(target):
    clock = StageClock()
    start = time.perf_counter()
    out = generate(
        target,
        [1, 2, 3],
        max_new_tokens=9,
        rng=np.random.default_rng(0),
        sampling=SOFT,
        clock=clock,
    )
    elapsed = time.perf_counter() - start
    assert len(out) == 9
    assert clock.calls == {"prefill": 1, "sample": 9, "target": 8}  # no step after the last
    assert 0 < clock.total() <= elapsed


def test_speculative_generate_charges_every_stage_once_per_round(target, draft):
    clock = StageClock()
    start = time.perf_counter()
    res = speculative_generate(
        target,
        ModelDrafter(draft),
        [1, 2, 3],
        k=3,
        max_new_tokens=20,
        rng=np.random.default_rng(0),
        sampling=SOFT,
        clock=clock,
    )
    elapsed = time.perf_counter() - start
    rounds = res.stats.rounds
    assert dict(clock.calls) == {
        "prefill": 1,
        "draft": rounds,
        "target": rounds,
        "verify": rounds,
        "other": rounds,
    }
    assert 0 < clock.total() <= elapsed


@pytest.mark.parametrize("loop", ["generate", "speculative"])
def test_a_bad_clock_is_refused_before_any_work(target, draft, loop):
    with pytest.raises(TypeError, match="clock must have restart"):
        if loop == "generate":
            generate(target, [1], max_new_tokens=2, rng=np.random.default_rng(0), clock="now")
        else:
            speculative_generate(
                target,
                ModelDrafter(draft),
                [1],
                k=2,
                max_new_tokens=2,
                rng=np.random.default_rng(0),
                clock="now",
            )
