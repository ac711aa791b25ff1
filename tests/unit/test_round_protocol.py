"""A round you can read (issues 20 and 30): a loop names its round and keeps a `Run` per
sequence, the `Drafter` protocol declares its optional parts with defaults, and the round
imports no particular drafter."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

import reference.speculative as speculative
from reference import (
    HybridDrafter,
    LookupDrafter,
    ModelDrafter,
    SamplingParams,
    speculative_generate,
)
from reference.drafters import Draft, Drafter, check_drafter, proposals_checked

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_is_what_every_loop_keeps_per_sequence():
    """`Run` is the loop's only state besides the caches; the round gets its context and
    draft length from it, and hands it back the Round."""
    params = inspect.signature(speculative.Run).parameters
    assert list(params) == ["prompt", "k", "max_new_tokens", "eos_id", "trace"]
    assert {"finished", "next_k", "record", "result"} <= set(dir(speculative.Run))


def test_the_round_imports_no_particular_drafter():
    """speculative.py imports the protocol from reference.drafters and nothing from a
    drafter's own module, and asks no drafter for a member with getattr."""
    tree = ast.parse((ROOT / "reference" / "speculative.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not modules & {
        "reference.early_exit",
        "reference.heads",
        "reference.lookup",
        "reference.tree",
    }
    getattrs = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "getattr"
    ]
    assert all(ast.unparse(g.args[0]) in {"total", "s"} for g in getattrs), [
        ast.unparse(g) for g in getattrs
    ]


class Bare:
    """A duck-typed drafter without the optional parts."""

    n_vocab, n_ctx = 16, 64

    def reset(self): ...

    def prefill(self, tokens): ...

    def propose(self, context, k, sampling, rng):
        return Draft(np.zeros(0, np.int64), np.zeros((0, 16), np.float32))

    def commit(self, n): ...

    def rollback(self): ...


class Subclassed(Bare, Drafter):
    """The same drafter subclassing the protocol: the optional parts are the defaults."""


def test_a_drafter_gets_its_optional_parts_by_subclassing(target):
    with pytest.raises(
        TypeError, match="lacks cache, observe, observe_features, library_checked: subclass"
    ):
        check_drafter(Bare())
    d = Subclassed()
    check_drafter(d)
    assert d.cache is None and d.observe(np.zeros(4)) is None and not proposals_checked(d)
    assert d.observe_features(np.zeros((2, 4))) is None
    out = speculative_generate(
        target, d, [1, 2], k=2, max_new_tokens=3, rng=np.random.default_rng(0)
    )
    assert len(out.tokens) == 3


def test_a_missing_required_part_is_named(target):
    no_commit = type("NoCommit", (), {k: v for k, v in vars(Bare).items() if k != "commit"})
    d = no_commit()
    with pytest.raises(TypeError, match="lacks commit$"):
        speculative_generate(target, d, [1, 2], k=2, max_new_tokens=3, rng=np.random.default_rng(0))


def test_a_proposal_that_is_not_a_draft_is_refused(target):
    class Forgetful(Subclassed):
        def propose(self, context, k, sampling, rng):
            return None  # forgot the return

    with pytest.raises(TypeError, match="must return a Draft"):
        speculative_generate(
            target, Forgetful(), [1, 2], k=2, max_new_tokens=3, rng=np.random.default_rng(0)
        )


class OwnPropose(ModelDrafter):
    def propose(self, context, k, sampling, rng):
        return super().propose(context, k, sampling, rng)


def test_only_the_librarys_own_proposals_skip_the_rounds_check(target, draft, monkeypatch):
    """The library's drafters are checked by their tests, once; a subclass that writes its own
    propose is a plug-in, checked every round, as is a hybrid falling back on one."""
    lookup = LookupDrafter(16, 64)
    assert proposals_checked(ModelDrafter(draft)) and proposals_checked(lookup)
    assert proposals_checked(HybridDrafter(lookup, ModelDrafter(draft)))
    assert not proposals_checked(OwnPropose(draft))
    assert not proposals_checked(HybridDrafter(lookup, OwnPropose(draft)))
    checked = []
    real = speculative.check_draft
    monkeypatch.setattr(speculative, "check_draft", lambda *a: checked.append(1) or real(*a))
    rng = np.random.default_rng(0)
    args = dict(k=3, max_new_tokens=12, sampling=SamplingParams(temperature=1.0))
    ours = speculative_generate(target, ModelDrafter(draft), [1, 2, 3], rng=rng, **args)
    assert checked == [] and ours.stats.rounds > 0
    theirs = speculative_generate(target, OwnPropose(draft), [1, 2, 3], rng=rng, **args)
    assert len(checked) == theirs.stats.rounds
