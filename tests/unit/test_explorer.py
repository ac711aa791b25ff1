"""The round explorer (specdec/explorer.py): its uniforms are verify's own, replayed; its steps
say what the round did; the committed page (docs/explorer/round.html) is what the code writes.
tests/website/test_explorer_browser.py clicks through that page in chromium."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from reference import ModelDrafter, SamplingParams, speculative_generate
from reference.tokenizer import EOS, encode
from specdec.bundled import load_bundled_pair
from specdec.explorer import (
    BUNDLED,
    BUNDLED_PROMPT,
    VerifyRecorder,
    bundled_round,
    explorer_widget,
    page_html,
    replay_verify,
    round_steps,
    show_round,
    widget_class,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "explorer" / "round.html"


@pytest.fixture(scope="module")
def pair():
    return load_bundled_pair()


def bundled_run(pair, verify_fn=None, seed=BUNDLED["seed"]):
    target, draft = pair
    return speculative_generate(
        target,
        ModelDrafter(draft),
        encode(BUNDLED_PROMPT),
        k=BUNDLED["k"],
        max_new_tokens=BUNDLED["max_new_tokens"],
        rng=np.random.default_rng(seed),
        sampling=SamplingParams(temperature=BUNDLED["temperature"]),
        eos_id=EOS,
        trace=True,
        verify_fn=verify_fn,
    )


@pytest.fixture(scope="module")
def recorded(pair):
    recorder = VerifyRecorder()
    return bundled_run(pair, recorder), recorder.states


def test_recording_changes_nothing(pair, recorded):
    """The recorder is the reference's verify with the same draws: the run is the plain run."""
    result, states = recorded
    plain = bundled_run(pair)
    assert result.tokens == plain.tokens
    assert result.stats.accepted_per_round == plain.stats.accepted_per_round
    assert len(states) == result.stats.rounds


def test_replayed_uniforms_reproduce_every_round(recorded):
    result, states = recorded
    kinds = set()
    for r, state in zip(result.trace, states, strict=True):
        draws = replay_verify(r, state)  # raises unless (accepted, token) are the round's
        assert (draws.accepted, draws.token) == (r.accepted, r.token)
        # one accept-test uniform per examined position, and the rule: accept iff u < a
        assert len(draws.accept_u) == min(r.accepted + 1, len(r.draft_tokens))
        a = r.acceptance_probabilities
        assert [u < a[i] for i, u in enumerate(draws.accept_u)] == [
            i < r.accepted for i in range(len(draws.accept_u))
        ]
        assert all(0.0 <= u < 1.0 for u in [*draws.accept_u, draws.token_u])
        kinds.add(r.token_kind)
    assert kinds == {"bonus", "correction"}, "the run should show both kinds of round"


def test_a_state_that_is_not_the_rounds_is_refused(recorded):
    result, states = recorded
    r = result.trace[0]
    other = dataclasses.replace(r, accepted=(r.accepted + 1) % (len(r.draft_tokens) + 1))
    with pytest.raises(ValueError, match="replayed uniforms give"):
        replay_verify(other, states[0])


def test_steps_say_what_the_round_did(recorded):
    result, states = recorded
    for r, state in zip(result.trace, states, strict=True):
        if not len(r.draft_tokens):
            continue
        steps = round_steps(r, replay_verify(r, state))
        assert json.loads(json.dumps(steps)) == steps  # JSON-able, as the page embeds it
        by_kind = {}
        for step in steps:
            by_kind.setdefault(step["kind"], []).append(step)
        (t0, t1, t2), (d0, d1, d2) = r.target_cache, r.draft_cache
        ptr = {
            kind: [
                (
                    s["target"]["committed"],
                    s["target"]["end"],
                    s["draft"]["committed"],
                    s["draft"]["end"],
                )
                for s in ss
            ]
            for kind, ss in by_kind.items()
        }
        assert ptr["start"] == [(t0, t0, d0, d0)]
        assert ptr["draft"] == [(t0, t0, d0, d1)]
        assert ptr["verify"] == [(t0, t1, d0, d1)]
        assert ptr["commit"] == [(t2, t1, d2, d1)]
        assert ptr["rollback"] == [(t2, t2, d2, d2)]
        positions = by_kind["position"]
        assert [s["i"] for s in positions] == list(range(min(r.accepted + 1, len(r.draft_tokens))))
        assert [s["verdict"] for s in positions] == [
            "accept" if s["i"] < r.accepted else "reject" for s in positions
        ]
        np.testing.assert_array_equal(
            [s["a"] for s in positions], r.acceptance_probabilities[: len(positions)]
        )
        np.testing.assert_array_equal(by_kind["verify"][0]["p"], r.p_of_drafts)
        drawn = (by_kind.get("bonus") or [positions[-1]])[-1]["drawn"]
        assert drawn["token"] == r.token
        assert ("bonus" in by_kind) == (r.token_kind == "bonus")
        assert [e["token"] for e in by_kind["commit"][0]["emitted"]] == r.emitted


def close(a, b, path="") -> list[str]:
    """Where two JSON values differ: floats within 1e-5 (float32 rows from another BLAS),
    everything else exactly."""
    if isinstance(a, float) or isinstance(b, float):
        return [] if abs(a - b) <= 1e-5 * max(1.0, abs(b)) else [f"{path}: {a} != {b}"]
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return [d for key in a for d in close(a[key], b[key], f"{path}.{key}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in close(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_the_committed_page_is_what_the_code_writes():
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="round-data">(.*?)</script>', text, re.S)
    committed = json.loads(found.group(1).replace("<\\/", "</"))
    assert page_html(committed) == text, (
        "docs/explorer/round.html was written by another version of specdec/explorer.py: "
        "run python scripts/explorer_page.py"
    )
    differences = close(committed, bundled_round())
    assert not differences, (
        "docs/explorer/round.html shows another round than the code "
        "computes: run python scripts/explorer_page.py\n" + "\n".join(differences[:10])
    )


def test_show_round_without_widgets_is_the_static_page(monkeypatch):
    explored = json.loads(
        re.search(r'id="round-data">(.*?)</script>', PAGE.read_text(encoding="utf-8"), re.S).group(
            1
        )
    )
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)  # not under a Jupyter server
    shown = show_round(explored)
    assert "<iframe srcdoc=" in shown.data and "mountRound" in shown.data
    assert show_round(explored, widget=False).data == shown.data
    widget = explorer_widget(explored)  # anywidget: the dev and notebook extras
    assert widget.data == explored and "mountRound" in widget._esm
    monkeypatch.setenv("JPY_SESSION_NAME", "07_full_run.ipynb")  # JupyterLab's kernel
    assert type(show_round(explored)).__name__ == "RoundExplorer"
    monkeypatch.setitem(sys.modules, "anywidget", None)  # as where it is not installed
    widget_class.cache_clear()
    with pytest.raises(ImportError, match=r"specdec-lab\[notebook\]"):
        explorer_widget(explored)
    widget_class.cache_clear()  # the next test that asks gets the real class again
