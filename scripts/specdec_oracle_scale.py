"""A pytest plug-in: the oracle's sampled checks at a fraction of their sample sizes, so that
grading the twin fits one device command (the device script, x 0.1) and CI's 12 minutes
(`make test` grades the twin at x 0.5 after the reference's full-size oracle).

    PYTHONPATH=.:scripts pytest -p specdec_oracle_scale --oracle-scale 0.25 -m distribution ...

Why a plug-in: on a GPU the oracle's cost is the twin's kernel launches, about 39 million at
full size, which at 5-15 us each would take most of a 15-minute device loan. Nothing else
loads this file: `make oracle` and `make oracle-gpu` run at full size.

What scaling keeps and what it costs. Every sampled check stays a valid test at any sample
size -- chi-square cells are merged until each expects >= 20 counts, p-values are
Holm-adjusted within each family at the same ALPHA -- so a correct twin fails no more often
than at full size. What shrinks is power: a scaled run detects only larger departures from
the target's law (the detectable effect grows like 1/sqrt(scale); at 0.25, twice the full
run's). The device run checks that the twin on CuPy follows the law grossly; `make test`
grades the same code paths in NumPy mode at half size (every broken variant of the oracle's
catalogue is caught at its own n, below the halved sizes), and `make oracle-gpu` alone at full
size.

The sizes live in the oracle's own modules (specdec/oracle/, tests/distribution/); this
plug-in rescales them after collection, before any test runs, and stops with a usage error if
one of the names it scales has gone (the oracle changed: update SCALED below), never silently
at full size or at none.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys

import pytest

FLOOR = 200  # by default no sampled check runs fewer times than this, whatever the scale
# oracle file -> the module-level names holding its sample sizes: a dict of setups (each a
# frozen dataclass with a field `n`) or an int
# (a path from the repository root; the oracle's machinery ships in specdec/oracle/, its
# checks stay in tests/distribution/)
SCALED = {
    "specdec/oracle/cases.py": (
        "VERIFY_SETUPS",
        "LOOP_SETUPS",
        "LOOKUP_SETUPS",
        "BATCH_SPREAD_SETUPS",
    ),
    "specdec/oracle/self_drafting.py": ("SELF_DRAFT_SETUPS",),
    "tests/distribution/test_batch_law.py": ("RUNS",),
    "tests/distribution/test_tree_law.py": ("LOOP_RUNS",),
}
# the machinery's modules: imported here if no check has yet, so their sizes are always scaled
MACHINERY = {"specdec/oracle/cases.py", "specdec/oracle/self_drafting.py"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("specdec").addoption(
        "--oracle-scale",
        type=float,
        default=1.0,
        metavar="F",
        help="run the oracle's sampled checks at F (0 < F <= 1) of their sample sizes "
        "(scripts/gpu_check.sh oracle; make test's grading of the twin)",
    )
    parser.getgroup("specdec").addoption(
        "--oracle-floor",
        type=int,
        default=FLOOR,
        metavar="N",
        help=f"no scaled check runs fewer than N times (default {FLOOR}; the script's dry "
        "run, which checks its plumbing and not the law, goes lower)",
    )


def scale_of(config: pytest.Config) -> float:
    scale = config.getoption("oracle_scale")
    if not 0.0 < scale <= 1.0:
        raise pytest.UsageError(f"--oracle-scale must be in (0, 1], got {scale}")
    return scale


def pytest_report_header(config: pytest.Config) -> list[str]:
    scale, floor = scale_of(config), config.getoption("oracle_floor")
    return [
        f"oracle sample sizes x {scale:g}, at least {floor} "
        "(scripts/specdec_oracle_scale.py; `make oracle` runs them x 1)"
    ]


def scaled(n: int, scale: float, floor: int) -> int:
    return n if n <= 0 else max(min(n, floor), round(n * scale))


def oracle_module(filename: str):
    # the loaded module of <filename> (a path from the root), whatever pytest named it
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if path.replace("\\", "/").endswith(filename):
            return module
    return None


def rescale(module, name: str, scale: float, floor: int) -> None:
    if not hasattr(module, name):
        raise pytest.UsageError(
            f"--oracle-scale: {module.__file__} has no {name} any more; the oracle changed, "
            "so update SCALED in scripts/specdec_oracle_scale.py"
        )
    value = getattr(module, name)
    if isinstance(value, int):
        setattr(module, name, scaled(value, scale, floor))
        return
    for key, setup in value.items():  # in place: the families read these dicts when run
        value[key] = dataclasses.replace(setup, n=scaled(setup.n, scale, floor))


def pytest_collection_finish(session: pytest.Session) -> None:
    scale, floor = scale_of(session.config), session.config.getoption("oracle_floor")
    if scale == 1.0:
        return
    for filename, names in SCALED.items():
        module = oracle_module(filename)
        if module is None and filename in MACHINERY:  # imported now, so that its sizes count
            module = importlib.import_module(filename.removesuffix(".py").replace("/", "."))
        if module is None:
            continue  # a check file not collected in this run
        for name in names:
            rescale(module, name, scale, floor)
        if filename.endswith("test_tree_law.py"):  # loop_check(..., runs=LOOP_RUNS) bound it early
            rebind_default(module.loop_check, "runs", module.LOOP_RUNS)


def rebind_default(function, name: str, value) -> None:
    # function's default for keyword `name` := value (a default is bound when defined)
    with_defaults = [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is not inspect.Parameter.empty and p.kind != p.KEYWORD_ONLY
    ]
    if name not in with_defaults:
        raise pytest.UsageError(
            f"--oracle-scale: {function.__qualname__} has no `{name}` keyword any more; "
            "update scripts/specdec_oracle_scale.py"
        )
    defaults = list(function.__defaults__)
    defaults[with_defaults.index(name)] = value
    function.__defaults__ = tuple(defaults)
