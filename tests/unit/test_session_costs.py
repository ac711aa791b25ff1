"""specdec/measure/session_costs.py: one measurement per session, reused only where it still
applies.

No assert here bounds a time: the numbers come from this machine's clock. What is checked is
the bookkeeping: what is measured, when a saved measurement is read back, and when not.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from reference import GPTConfig
from reference.tokenizer import VOCAB_SIZE
from specdec.measure import session_costs as sc
from specdec.measure.session_costs import MAX_T, session_context, session_costs
from specdec.standins import noisy_copy

from .helpers import make_model

# byte-level, as the bundled pair: the measured context is code, encoded as bytes
BYTE_CFG = GPTConfig(n_vocab=VOCAB_SIZE, n_ctx=64, n_embd=16, n_head=2, n_layer=1)


@pytest.fixture(scope="module")
def pair():
    target = make_model(BYTE_CFG, seed=0)
    return target, noisy_copy(target, noise=0.03, seed=1)


@pytest.fixture(autouse=True)
def few_passes(monkeypatch):
    monkeypatch.setattr(sc, "PASSES", 2)  # the bookkeeping, not the timing, is under test


def test_first_call_measures_every_T_then_the_next_reuses_it(pair, tmp_path):
    first = session_costs(*pair, cache_dir=tmp_path)
    assert not first.reused and first.origin() == "measured now"
    assert sorted(first.profile.target_append) == list(range(1, MAX_T + 1))
    values = [first.profile.draft_step, *first.profile.target_append.values()]
    assert all(math.isfinite(s) and s > 0 for s in values)
    assert first.profile.target_step == first.profile.target_append[1]
    assert first.profile.verify_cost(1) == 1.0

    again = session_costs(*pair, cache_dir=tmp_path)
    assert again.reused and again.origin().startswith("measured ")
    assert again.profile == first.profile and again.measured_at == first.measured_at
    np.testing.assert_array_equal(again.context, first.context)


def test_the_context_is_code_and_leaves_room_for_every_pass(pair):
    context = session_context(BYTE_CFG.n_ctx)
    assert MAX_T <= len(context) <= BYTE_CFG.n_ctx // 4
    assert len(session_context(4096)) == sc.CONTEXT_TOKENS


def test_a_measurement_older_than_max_age_is_measured_again(pair, tmp_path):
    first = session_costs(*pair, cache_dir=tmp_path)
    again = session_costs(*pair, cache_dir=tmp_path, max_age_s=0)
    assert not again.reused and again.measured_at >= first.measured_at
    # the fresh measurement replaced the saved one
    assert session_costs(*pair, cache_dir=tmp_path).measured_at == again.measured_at


def test_other_weights_or_model_class_are_not_served_the_saved_numbers(pair, tmp_path):
    target, draft = pair
    session_costs(target, draft, cache_dir=tmp_path)
    other = noisy_copy(draft, noise=0.01, seed=2)
    assert not session_costs(target, other, cache_dir=tmp_path).reused
    assert not session_costs(draft, target, cache_dir=tmp_path).reused  # roles swapped

    class Renamed(type(target)):
        pass

    renamed = Renamed(target.config, dict(target.params))
    assert not session_costs(renamed, draft, cache_dir=tmp_path).reused


def test_another_machine_line_is_not_served_the_saved_numbers(pair, tmp_path, monkeypatch):
    session_costs(*pair, cache_dir=tmp_path)

    class Elsewhere:
        def line(self):
            return "another CPU; another BLAS (Haswell kernels), 2 BLAS threads"

    monkeypatch.setattr(sc, "describe_machine", lambda: Elsewhere())
    moved = session_costs(*pair, cache_dir=tmp_path)
    assert not moved.reused and moved.machine.startswith("another CPU")


@pytest.mark.parametrize(
    "damage",
    [
        lambda record: "not json at all",
        lambda record: json.dumps({**record, "target_step": -1.0}),
        lambda record: json.dumps({**record, "draft_step": "NaN"}),
        lambda record: json.dumps({k: v for k, v in record.items() if k != "target_append"}),
        lambda record: json.dumps({**record, "target_append": {"1": 0.001}}),  # T's missing
    ],
)
def test_a_damaged_file_is_measured_again(pair, tmp_path, damage):
    session_costs(*pair, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.json")
    path.write_text(damage(json.loads(path.read_text())))
    assert not session_costs(*pair, cache_dir=tmp_path).reused
    assert session_costs(*pair, cache_dir=tmp_path).reused  # and saved afresh
