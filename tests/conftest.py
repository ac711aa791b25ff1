"""Shared pytest configuration, and the oracle's plug-in point.

The statistical oracle (`pytest -m distribution`, tests/distribution/) grades the reference by
default. Four options make it grade another implementation with the same contract:

    pytest -m distribution --verify=my_verify.py:verify
    pytest -m distribution --verify=mypkg.core:verify
    pytest -m distribution --speculative=mypkg.loop:speculative_generate
    pytest -m distribution --batch=mypkg.loop:speculative_generate_batch
    pytest -m distribution --tree=mypkg.tree:tree_speculative_generate

--verify        verify(p_target [k+1, V], q_draft [k, V], draft_tokens [k], rng) returning an
                object with .accepted and .token, or a tuple (accepted, token)
--speculative   speculative_generate(target, drafter, prompt, *, k, max_new_tokens, rng,
                sampling, eos_id) returning an object with .tokens and
                .stats.accepted_per_round
--batch         speculative_generate_batch with the reference's signature
--tree          tree_speculative_generate(target, tree_drafter, prompt, *, max_new_tokens,
                rng, k, sampling, eos_id, trace, clock, verify_fn) returning an object with
                .tokens (tests/distribution/test_tree_law.py and test_typical_law.py run
                their loops through it; their pure functions stay the reference's)

The spec is `module.path:function` (imported; the current directory is tried too) or
`path/to/file.py:function` (loaded from that file, relative to the current directory).
A spec that cannot be loaded stops pytest before any test runs, saying why.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from specdec.grading.engine.submission import module_from_file, module_from_name

PLUGIN_OPTIONS = {
    "verify": "reference.verification:verify",
    "speculative": "reference.speculative:speculative_generate",
    "batch": "reference.batch:speculative_generate_batch",
    "tree": "reference.tree:tree_speculative_generate",
}
_LOADED = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specdec", "specdec-lab oracle (pytest -m distribution)")
    group.addoption(
        "--verify",
        action="store",
        default=None,
        metavar="MODULE:FUNCTION",
        help="grade another verify(p_target, q_draft, draft_tokens, rng) -> (accepted, token); "
        "MODULE is a dotted module name or a path/to/file.py (default: the reference)",
    )
    group.addoption(
        "--batch",
        action="store",
        default=None,
        metavar="MODULE:FUNCTION",
        help="grade another speculative_generate_batch with the reference's signature "
        "(tests/distribution/test_batch_law.py; default: the reference)",
    )
    group.addoption(
        "--tree",
        action="store",
        default=None,
        metavar="MODULE:FUNCTION",
        help="grade another tree_speculative_generate with the reference's signature "
        "(the tree loops of tests/distribution/test_tree_law.py and test_typical_law.py; "
        "default: the reference)",
    )
    group.addoption(
        "--speculative",
        action="store",
        default=None,
        metavar="MODULE:FUNCTION",
        help="grade another speculative_generate with the reference's signature; "
        "MODULE is a dotted module name or a path/to/file.py (default: the reference)",
    )


def load_callable(spec: str, option: str = "--verify") -> Callable:
    """'package.module:function' or 'path/to/file.py:function' -> the function.

    Raises pytest.UsageError, naming the option and what to change, if it cannot be loaded.
    """
    where, sep, name = str(spec).rpartition(":")
    if not sep or not where or not name:
        raise pytest.UsageError(
            f"{option}={spec!r}: expected MODULE:FUNCTION, e.g. {option}=my_verify.py:verify "
            f"or {option}=mypkg.core:verify"
        )
    if where.endswith(".py") or "/" in where or "\\" in where:
        module = _module_from_file(Path(where), spec, option)
    else:
        module = _module_from_name(where, spec, option)
    if not hasattr(module, name):
        public = sorted(n for n in vars(module) if not n.startswith("_"))[:12]
        raise pytest.UsageError(
            f"{option}={spec!r}: {where} has no attribute {name!r} (it defines: "
            f"{', '.join(public) or 'nothing public'})"
        )
    function = getattr(module, name)
    if not callable(function):
        raise pytest.UsageError(
            f"{option}={spec!r}: {where}.{name} is a {type(function).__name__}, not a function"
        )
    return function


def _module_from_file(path: Path, spec: str, option: str):
    # the grader's loader (`specdec grade` takes the same specs), its errors as usage errors
    try:
        return module_from_file(path, spec)
    except ValueError as error:
        raise pytest.UsageError(f"{option}={error}") from error


def _module_from_name(name: str, spec: str, option: str):
    try:
        return module_from_name(name, spec)
    except ValueError as error:
        raise pytest.UsageError(f"{option}={error}") from error


def pytest_configure(config: pytest.Config) -> None:
    # Load the plug-ins once, before collection, so a bad spec stops the run at once.
    config.stash[_LOADED] = {
        kind: load_callable(spec, f"--{kind}")
        for kind in PLUGIN_OPTIONS
        if (spec := config.getoption(kind, default=None))
    }


def pytest_report_header(config: pytest.Config) -> list[str]:
    graded = [
        f"{kind} = {config.getoption(kind) or default + ' (reference)'}"
        for kind, default in PLUGIN_OPTIONS.items()
    ]
    return ["specdec oracle grades: " + "; ".join(graded)]


@pytest.fixture(scope="session")
def oracle_plugins(pytestconfig: pytest.Config) -> dict[str, Callable]:
    """{'verify': fn, 'speculative': fn, ...} for the plug-ins given on the command line only."""
    return dict(pytestconfig.stash[_LOADED])


@pytest.fixture(scope="session")
def verify_impl(oracle_plugins) -> Callable:
    """The `verify` under test: --verify's function, or reference.verification.verify."""
    if "verify" in oracle_plugins:
        return oracle_plugins["verify"]
    from reference.verification import verify

    return verify


@pytest.fixture(scope="session")
def speculative_impl(oracle_plugins) -> Callable:
    """The loop under test: --speculative's function, or reference speculative_generate."""
    if "speculative" in oracle_plugins:
        return oracle_plugins["speculative"]
    from reference.speculative import speculative_generate

    return speculative_generate


@pytest.fixture(scope="session")
def batch_impl(oracle_plugins) -> Callable:
    """The batched loop under test: --batch's function, or the reference's."""
    if "batch" in oracle_plugins:
        return oracle_plugins["batch"]
    from reference.batch import speculative_generate_batch

    return speculative_generate_batch


@pytest.fixture(scope="session")
def tree_impl(oracle_plugins) -> Callable:
    """The tree loop under test: --tree's function, or reference tree_speculative_generate."""
    if "tree" in oracle_plugins:
        return oracle_plugins["tree"]
    from reference.tree import tree_speculative_generate

    return tree_speculative_generate


# the fixture through which each plug-in reaches a test
PLUGIN_FIXTURES = {
    "verify": "verify_impl",
    "speculative": "speculative_impl",
    "batch": "batch_impl",
    "tree": "tree_impl",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep_tests_of_plugins(config, items)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its order is the schedule's
        longest_first(items)


# The files that take longest (seconds of one worker, `make test` on a 2-core machine,
# 2026-12-01), in that order. Under `pytest -n N --dist loadfile --no-loadscope-reorder` the
# workers take files in collection order, a file at a time; starting with the longest keeps
# one long file from starting last while the other worker idles (longest-first scheduling).
# A stale list costs time, never a result.
LONGEST_FILES = (
    "grader/test_grade.py",  # 98
    "distribution/test_tree_law.py",  # 95 (the twin's run: 44)
    "distribution/test_sampled_loop.py",  # 73 (65)
    "distribution/test_self_drafting_law.py",  # 41 (27)
    "twin/test_twin_drafters.py",  # 35
    "distribution/test_power.py",  # 34
    "distribution/test_adaptive_draft_law.py",  # 32
    "distribution/test_llama_laws.py",  # ~30 (issue 48; the twin's run: ~16 at scale 0.5)
    "twin/test_device_script.py",  # 24
    "distribution/test_proposal_laws.py",  # ~25 (issue 51: 27 s of CPU under load, both backends)
    "distribution/test_lookup_law.py",  # 15 (16)
    "interop/test_grade_samplers.py",  # 15
    "twin/test_twin_loop.py",  # 15
    "distribution/test_llama_self_drafting_law.py",  # ~6 (the twin's run: ~1)
    "twin/test_fused_kernels.py",  # 7 (the CUDA emulator)
    "twin/test_batch_drafting.py",  # 9
    "distribution/test_batch_law.py",  # 10 (12), and ~5 (3) for the spread family
    "distribution/test_fast_draw_law.py",  # ~10 (issue 51: the fat tails and a loop setup)
)


def longest_first(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        where = item.nodeid.split("::")[0].removeprefix("tests/")
        return LONGEST_FILES.index(where) if where in LONGEST_FILES else len(LONGEST_FILES)

    items.sort(key=rank)  # stable: the order within a file and among the others is kept


def keep_tests_of_plugins(config: pytest.Config, items: list[pytest.Item]) -> None:
    # With plug-ins on the command line, run only the tests that grade one of them (their
    # fixtures, direct or through another fixture): a test that reads none of them grades the
    # reference or the oracle itself, the same with or without plug-ins, and runs in the
    # plain `pytest -m distribution`. Deselected, not skipped: nothing under test was skipped.
    loaded = config.stash.get(_LOADED, {})
    if not loaded:
        return
    wanted = {PLUGIN_FIXTURES[kind] for kind in loaded} | {"oracle_plugins"}
    keep, drop = [], []
    for item in items:
        (keep if wanted & set(getattr(item, "fixturenames", ())) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def load_plugin() -> Callable:
    """The loader behind --verify / --speculative, for the tests of the plug-in point."""
    return load_callable


# Folders whose modules import an extra beyond `oracle` at collection time. With only the
# oracle extra installed (`make oracle`), they are left out of collection so that
# `pytest -m distribution` runs; under CI (`make test` installs everything) nothing is left
# out, so a missing package fails the build instead of hiding tests.
EXTRA_FOLDERS = {
    "interop": ("torch", "transformers"),
    "plots": ("matplotlib",),
}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    needs = EXTRA_FOLDERS.get(collection_path.name) if collection_path.is_dir() else None
    if not needs or os.environ.get("CI") == "true":
        return None
    missing = [name for name in needs if importlib.util.find_spec(name) is None]
    if missing:
        tests_missing.append(f"tests/{collection_path.name} (needs {', '.join(missing)})")
        return True
    return None


tests_missing: list[str] = []


def pytest_terminal_summary(terminalreporter) -> None:
    for what in tests_missing:
        terminalreporter.write_line(f"not collected: {what}; `make test` installs everything")
