"""The modules that moved into specdec/fast_cpu/ and specdec/measure/ (issue 47) still import
by their old names for one release: the new module itself, with a DeprecationWarning that
names the new path (specdec/__init__.py, MOVED)."""

from __future__ import annotations

import importlib
import runpy
import sys
import warnings
from pathlib import Path

import pytest

import specdec
from specdec import MOVED

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def forget(monkeypatch):
    # -> forget(name): the alias is imported afresh (its warning fires once per process),
    # and removed again after the test, so later tests see the module as before
    def forget(old: str) -> None:
        monkeypatch.delitem(sys.modules, old, raising=False)
        monkeypatch.delattr(specdec, old.rpartition(".")[2], raising=False)

    return forget


def test_every_old_name_points_at_a_module_that_exists():
    """Each new path is a file of the checkout and no old one is (a file left at the old
    place would be imported instead of the alias); only specdec's own names are aliased."""
    for old, new in MOVED.items():
        assert (ROOT / (new.replace(".", "/") + ".py")).is_file(), new
        assert not (ROOT / (old.replace(".", "/") + ".py")).exists(), old
        assert old.count(".") == 1 and old.startswith("specdec."), old


@pytest.mark.parametrize(
    ("old", "name"), [("specdec.choose_k", "best_k"), ("specdec.bench_summary", "main")]
)
def test_an_old_name_warns_and_gives_the_new_module(old, name, forget):
    """`import specdec.choose_k` warns, names specdec.measure.choose_k, and hands back that
    very module, its own spec unchanged; `from specdec.choose_k import X` works too."""
    forget(old)
    new = importlib.import_module(MOVED[old])
    with pytest.warns(DeprecationWarning, match=MOVED[old].replace(".", r"\.")) as caught:
        aliased = importlib.import_module(old)
    assert len(caught) == 1
    assert aliased is new and sys.modules[old] is new
    assert new.__spec__.name == new.__name__ == MOVED[old]
    forget(old)
    with pytest.warns(DeprecationWarning):
        exec(f"from {old} import {name} as found", namespace := {})
    assert namespace["found"] is getattr(new, name)


def test_names_that_never_moved_import_as_before():
    """A module that did not move imports without a warning; a name that never existed
    fails as it always did."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.import_module("specdec.costs")
    with pytest.raises(ModuleNotFoundError, match="specdec.no_such_module"):
        importlib.import_module("specdec.no_such_module")


def test_python_dash_m_with_an_old_name_runs_the_new_module(forget):
    """`python -m specdec.bench_summary` runs specdec/measure/summary.py, with a warning a
    person at the terminal sees (FutureWarning, shown by default)."""
    forget("specdec.bench_summary")
    with pytest.warns(FutureWarning, match=r"python -m specdec\.measure\.summary"):
        ran = runpy.run_module("specdec.bench_summary", run_name="not_main")
    assert callable(ran["main"])
