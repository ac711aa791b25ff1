"""The layout: `reference/` is the pure-NumPy core and never reaches into the lab around it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import reference
from reference import batch, speculative

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "reference"
# what the core may import: the standard library, numpy, and itself
ALLOWED_THIRD_PARTY = {"numpy"}
# ... and one named exception per file. reference/weights.py reads and writes checkpoints
# through the `safetensors` library (a small runtime dependency, no torch): checkpoint I/O
# is the core's edge, and a hand-written parser of the format is what the library replaces.
ALLOWED_PER_FILE = {"weights.py": {"safetensors"}}


def imported_modules(path: Path) -> set[str]:
    # every top-level package named by an import statement of the file, at any depth
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_core_never_imports_the_lab_or_anything_but_numpy():
    """No file of reference/ imports specdec, gpu, tests or a package other than numpy
    (the standard library aside; weights.py may also use safetensors): the core stays
    readable on its own and the tooling depends on it, never the other way round."""
    for path in sorted(CORE.rglob("*.py")):  # reference/tree/ too
        name = path.relative_to(CORE).as_posix()
        foreign = foreign_imports(path, ALLOWED_PER_FILE.get(name, set()))
        assert not foreign, f"reference/{name} imports {sorted(foreign)}"


def foreign_imports(path: Path, also_allowed: set[str]) -> set[str]:
    # the packages a core file imports beyond the stdlib, numpy, itself and its exception
    import sys

    allowed = set(sys.stdlib_module_names) | ALLOWED_THIRD_PARTY | {"reference"} | also_allowed
    return imported_modules(path) - allowed


def test_the_safetensors_exception_is_for_checkpoint_io_only(tmp_path):
    """Only weights.py may import safetensors; the same import anywhere else in the core is
    caught, and weights.py importing anything else (torch, say) would be caught too."""
    assert "safetensors" in imported_modules(CORE / "weights.py")
    elsewhere = tmp_path / "sampling.py"
    elsewhere.write_text("import safetensors.numpy\n")
    assert foreign_imports(elsewhere, ALLOWED_PER_FILE.get(elsewhere.name, set())) == {
        "safetensors"
    }
    more = tmp_path / "weights.py"
    more.write_text("import safetensors.numpy\nimport torch\n")
    assert foreign_imports(more, ALLOWED_PER_FILE[more.name]) == {"torch"}


def test_the_checker_sees_a_forbidden_import(tmp_path):
    """The check above would catch an import of the lab, also inside a function."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from specdec.timing import StageClock\n    import matplotlib\n")
    assert {"specdec", "matplotlib"} <= imported_modules(bad)


def test_the_core_holds_only_core_files():
    """config, tokenizer, model (GPT-2; llama: the Llama family's block), KV cache, sampling,
    verification, drafters (a draft model; prompt lookup and the hybrid; early exit; extra
    heads), the loops (one sequence, tree drafts, and a ragged batch), the lossy
    typical-acceptance contrast, checkpoint I/O and input checks, and the records a run
    returns: nothing else lives in reference/."""
    expected = {
        "__init__",
        "config",
        "tokenizer",
        "model",
        "llama",
        "kv_cache",
        "sampling",
        "verification",
        "drafters",
        "lookup",
        "early_exit",
        "eagle",
        "heads",
        "speculative",
        "records",
        "tree",
        "typical",
        "batch",
        "autoregressive",
        "weights",
        "checks",
    }
    assert {p.stem for p in CORE.glob("*.py")} | {"tree"} == expected
    # trees are a package of one module per concern (issue 20: no 875-line file)
    tree_parts = {"__init__", "shape", "forward", "rule", "compaction", "drafters", "loop", "eagle"}
    assert {p.stem for p in (CORE / "tree").glob("*.py")} == tree_parts
    assert {p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"} == {"tree"}


def test_core_files_stay_small():
    """A file of the core is one concern a reader can hold: none grows past 620 lines."""
    sizes = {
        p.relative_to(CORE).as_posix(): len(p.read_text().splitlines()) for p in CORE.rglob("*.py")
    }
    assert max(sizes.values()) <= 620, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]


def test_grader_files_stay_small():
    """The grader's files too: one family or one concern each, none past 620 lines."""
    grading = CORE.parent / "specdec" / "grading"
    sizes = {
        p.relative_to(grading).as_posix(): len(p.read_text().splitlines())
        for p in grading.rglob("*.py")  # its subpackages too
    }
    assert max(sizes.values()) <= 620, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]


def test_every_idea_of_the_article_is_one_named_function():
    """draft, verification pass, accept/reject, residual, bonus, temporary write, commit,
    rollback, catch-up and one round each have a function of their own (docs/index.md)."""
    from reference.drafters import ModelDrafter
    from reference.kv_cache import KVCache, catch_up_tokens
    from reference.verification import accepts, bonus_token, residual_token

    named = [
        ModelDrafter.propose,
        speculative.verification_pass,
        accepts,
        residual_token,
        bonus_token,
        KVCache.write,
        KVCache.commit,
        KVCache.rollback,
        catch_up_tokens,
        speculative.speculative_round,
    ]
    for fn in named:
        assert inspect.isfunction(fn)
    # and the round really is the loop's: speculative_generate calls it
    assert rounds_called(speculative, "speculative_round", run_one_sequence) > 0
    assert reference.speculative_round is speculative.speculative_round


def rounds_called(module, name: str, run) -> int:
    # how many times `run()` calls module.<name>: the loops look the round up at call time
    real, calls = getattr(module, name), []

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    setattr(module, name, counting)
    try:
        run()
    finally:
        setattr(module, name, real)
    return len(calls)


def tiny_pair():
    import numpy as np

    cfg = reference.GPTConfig(n_vocab=8, n_ctx=16, n_embd=8, n_head=2, n_layer=1)
    rng = np.random.default_rng(0)
    return reference.GPT(cfg, reference.init_params(cfg, rng)), np.random.default_rng(1)


def run_one_sequence():
    model, rng = tiny_pair()
    reference.speculative_generate(
        model, reference.ModelDrafter(model), [1, 2], k=2, max_new_tokens=4, rng=rng
    )


def run_a_batch():
    model, rng = tiny_pair()
    drafters = [reference.ModelDrafter(model) for _ in range(2)]
    reference.speculative_generate_batch(
        model, drafters, [[1], [2, 3]], k=2, max_new_tokens=4, rng=rng
    )


def test_the_batched_loop_names_the_same_ideas_per_row():
    """A ragged batch (reference/batch.py) has its own temporary write, commit and rollback
    (per-row pointers), its one verification pass for every row, and its one round, which
    its loop really calls; it reuses the single-sequence pieces instead of copying them."""
    named = [
        batch.BatchKVCache.write,
        batch.BatchKVCache.commit,
        batch.BatchKVCache.rollback,
        batch.batched_forward,
        batch.batched_verification_pass,
        batch.batched_round,
    ]
    for fn in named:
        assert inspect.isfunction(fn)
    assert rounds_called(batch, "batched_round", run_a_batch) > 0
    assert "batched_verification_pass(" in inspect.getsource(batch.batched_round)
    assert reference.batched_round is batch.batched_round
    for piece in (
        "Run",
        "check_draft",
        "plugin_verification",
        "verify_unchecked",
        "catch_up_tokens",
        "probabilities",
        "SpeculativeResult",
    ):
        assert getattr(batch, piece).__module__ != batch.__name__, f"{piece} was redefined"


def test_the_wheel_lists_every_package_of_the_checkout():
    """pyproject.toml lists the wheel's packages by hand (two of them are data folders mapped
    into specdec); a new package folder missing from the list would be missing from every
    install, though the checkout's tests would not notice."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("reference", "gpu", "specdec")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk <= listed, f"packages missing from pyproject.toml: {on_disk - listed}"
    mapped = setup["package-dir"]
    assert mapped == {"specdec.models": "models", "specdec.notebooks": "notebooks"}
    for package, folder in mapped.items():
        assert package in listed and (ROOT / folder / "__init__.py").is_file()
