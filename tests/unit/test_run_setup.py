"""One setup for every loop (issue 47): the keywords a run is asked for are written once, as
RunSetup's fields; `@run_keywords` gives them to the six loops (chain, tree and batch, in the
reference and in the twin), and `RunSetup.checked` is their one set of checks."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import gpu
import reference
import reference.tree
from reference.speculative import RunSetup, run_keywords
from reference.tree import ModelTreeDrafter

ROOT = Path(__file__).resolve().parents[2]
KEYWORDS = [f.name for f in fields(RunSetup)]
LOOPS = {
    "reference chain": reference.speculative_generate,
    "reference tree": reference.tree.tree_speculative_generate,
    "reference batch": reference.speculative_generate_batch,
    "twin chain": gpu.speculative_generate,
    "twin tree": gpu.tree.tree_speculative_generate,
    "twin batch": gpu.speculative_generate_batch,
}


@pytest.mark.parametrize("name", LOOPS)
def test_every_loop_takes_the_setups_keywords_and_writes_none_of_them(name):
    """Each public loop's keyword-only arguments are RunSetup's fields, in their order; the
    function written in the source takes three arguments and `setup`, nothing more."""
    loop = LOOPS[name]
    params = inspect.signature(loop).parameters.values()
    keyword_only = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keyword_only == KEYWORDS
    written = list(inspect.signature(loop.__wrapped__).parameters)
    assert len(written) == 4 and written[-1] == "setup", written


def test_no_file_spells_the_loop_keywords_out_again():
    """No function of reference/ or gpu/ declares max_new_tokens, eos_id, trace, verify_fn and
    clock together as parameters (the old 11-parameter signature) -- the autoregressive
    baseline and the lossy typical loop aside, whose signatures differ."""
    together = {"max_new_tokens", "eos_id", "trace", "verify_fn", "clock"}
    spelled = []
    for path in sorted([*(ROOT / "reference").rglob("*.py"), *(ROOT / "gpu").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                args = node.args
                names = {a.arg for a in [*args.args, *args.posonlyargs, *args.kwonlyargs]}
                if together <= names:
                    spelled.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not spelled, spelled


def tiny():
    cfg = reference.GPTConfig(n_vocab=8, n_ctx=32, n_embd=8, n_head=2, n_layer=1)
    return reference.GPT(cfg, reference.init_params(cfg, np.random.default_rng(0)))


def test_a_wrong_or_missing_keyword_is_named_with_the_loop():
    model, rng = tiny(), np.random.default_rng(1)
    drafter = reference.ModelDrafter(model)
    with pytest.raises(TypeError, match=r"speculative_generate\(\).*unexpected.*'max_new'"):
        reference.speculative_generate(
            model, drafter, [1], k=2, max_new_tokens=4, rng=rng, max_new=4
        )
    with pytest.raises(TypeError, match=r"speculative_generate\(\).*'k'"):
        reference.speculative_generate(model, drafter, [1], max_new_tokens=4, rng=rng)
    with pytest.raises(TypeError, match=r"speculative_generate\(\).*positional"):
        reference.speculative_generate(model, drafter, [1], 2, 4, rng)


def test_the_keywords_reach_the_loop_as_given_and_checked():
    """Keywords by name or the three models/prompts by keyword give the same run; a tree
    loop's k defaults to its drafter's depth; a bad keyword value still gets the check's
    message, before anything is written."""
    model = tiny()
    first = reference.speculative_generate(
        model,
        reference.ModelDrafter(model),
        [1, 2],
        k=2,
        max_new_tokens=6,
        rng=np.random.default_rng(3),
        sampling=reference.SamplingParams(temperature=0.9),
    )
    again = reference.speculative_generate(
        target=model,
        drafter=reference.ModelDrafter(model),
        prompt=[1, 2],
        k=2,
        max_new_tokens=6,
        rng=np.random.default_rng(3),
        sampling=reference.SamplingParams(temperature=0.9),
    )
    assert first.tokens == again.tokens and len(first.tokens) == 6
    tree = ModelTreeDrafter(model, (2, 1))
    res = reference.tree.tree_speculative_generate(
        model, tree, [1, 2], max_new_tokens=5, rng=np.random.default_rng(0)
    )
    assert res.stats.k == tree.depth == 2
    with pytest.raises(ValueError, match="k"):
        reference.speculative_generate(
            model,
            reference.ModelDrafter(model),
            [1],
            k=0,
            max_new_tokens=4,
            rng=np.random.default_rng(0),
        )


def test_run_keywords_on_a_made_up_loop():
    """The decorator alone: what a loop receives, and `required` as the loop declares it."""
    seen = []

    @run_keywords(required=("rng",))
    def loop(a, b, c, setup):
        seen.append((a, b, c, setup))
        return "done"

    rng = np.random.default_rng(0)
    assert loop(1, 2, c=3, rng=rng, trace=True) == "done"
    a, b, c, setup = seen[0]
    assert (a, b, c) == (1, 2, 3)
    assert setup == RunSetup(rng=rng, trace=True)  # the other fields at their defaults
    assert loop.__wrapped__.__name__ == "loop"
    with pytest.raises(TypeError, match=r"loop\(\).*'rng'"):
        loop(1, 2, 3)
