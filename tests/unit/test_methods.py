"""The method table (specdec/measure/methods.py) and the drafters it runs by name
(specdec/drafting.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import reference
from reference.eagle import init_eagle_params
from reference.weights import write_safetensors
from specdec.costs import CostProfile
from specdec.drafting import DRAFTERS, RANDOM_EAGLE, generate_function, make_drafter
from specdec.measure.bench import run_bench
from specdec.measure.methods import (
    EQUAL_NODES,
    METHOD_KS,
    best_points,
    methods_markdown,
    parse_drafters,
    run_methods,
)
from specdec.standins import random_exit_head, random_heads

PLAN = {
    "model": [1, 2],
    "lookup": [2],
    "early-exit": [2],
    "heads": [1, 2],
    "lookup+heads": [2],
    "tree": [2],
    "tree-heads": [2],
    "eagle": [1, 2],
    "eagle-tree": [2, 3],
}


@pytest.fixture(scope="module")
def parts(tmp_path_factory, target):
    # a folder of self-drafting parts for the unit target, as specdec/training/train_heads.py writes
    folder = tmp_path_factory.mktemp("self_draft")
    C = target.config.n_embd
    write_safetensors(folder / "exit-1.safetensors", random_exit_head(C, 0))
    write_safetensors(folder / "heads.safetensors", random_heads(C, 4, 0))
    write_eagle(folder / "eagle", target)
    return folder


def write_eagle(folder, target) -> None:
    # an EAGLE-1 drafter for `target` as specdec/training/train_eagle.py writes it (float16)
    folder.mkdir()
    params = init_eagle_params(target.config, np.random.default_rng(0), std=0.3)
    write_safetensors(
        folder / "eagle.safetensors", {n: w.astype(np.float16) for n, w in params.items()}
    )
    meta = {"feature_layers": [target.config.n_layer], "variant": "eagle-1", "target": "target"}
    (folder / "metadata.json").write_text(json.dumps(meta))


def options(parts) -> dict:
    # the unit target has 2 blocks: early exit after 1
    return {"self_draft_dir": parts, "exit_layer": 1, "eagle_dir": parts / "eagle"}


@pytest.fixture(scope="module")
def costs():
    return CostProfile(
        target_step=1e-3, draft_step=2e-4, target_append={T: 1e-3 * T for T in range(1, 5)}
    )


def test_every_drafter_name_builds_and_matches_generate_at_greedy(target, draft, parts):
    prompt = np.array([1, 2, 3, 1, 2])
    want = reference.generate(
        target,
        prompt,
        max_new_tokens=10,
        rng=np.random.default_rng(0),
        sampling=reference.SamplingParams(0.0),
    )
    for name in DRAFTERS:
        drafter = make_drafter(name, reference, target, draft, **options(parts))
        out = generate_function(reference, drafter)(
            target,
            drafter,
            prompt,
            k=2,
            max_new_tokens=10,
            rng=np.random.default_rng(0),
            sampling=reference.SamplingParams(0.0),
        )
        assert out.tokens == list(want), name


def test_heads_without_trained_heads_say_how_to_make_them(target, draft, tmp_path):
    with pytest.raises(FileNotFoundError, match="specdec.training.train_heads"):
        make_drafter("heads", reference, target, draft, self_draft_dir=tmp_path)


def test_eagle_without_trained_weights_says_how_to_make_them(target, draft, tmp_path):
    for name in ("eagle", "eagle-tree"):
        with pytest.raises(FileNotFoundError, match="specdec.training.train_eagle"):
            make_drafter(name, reference, target, draft, eagle_dir=tmp_path)
        with pytest.raises(ValueError, match="specdec.training.train_eagle"):  # no folder at all
            make_drafter(name, reference, target, draft, eagle_dir=None)


def test_eagle_loads_the_weights_of_its_folder_or_random_ones(target, draft, parts):
    trained = make_drafter("eagle", reference, target, draft, eagle_dir=parts / "eagle")
    random = make_drafter("eagle", reference, target, draft, eagle_dir=RANDOM_EAGLE, eagle_seed=1)
    assert isinstance(trained, reference.EagleDrafter) and isinstance(
        random, reference.EagleDrafter
    )
    assert not np.array_equal(trained.w, random.w)  # the folder's weights, not random ones
    again = make_drafter("eagle", reference, target, draft, eagle_dir=RANDOM_EAGLE, eagle_seed=1)
    np.testing.assert_array_equal(again.w, random.w)  # --random: seeded


def test_eagle_tree_at_k_verifies_at_most_k_nodes(target, draft, parts):
    """eagle-tree's k is its node budget (and depth limit): set against the chain at the
    same k, it verifies as many nodes per round at most."""
    for k in (1, 3):
        drafter = make_drafter(
            "eagle-tree", reference, target, draft, tree_nodes=k, **options(parts)
        )
        out = generate_function(reference, drafter)(
            target,
            drafter,
            np.array([1, 2, 3, 1, 2]),
            k=k,
            max_new_tokens=12,
            rng=np.random.default_rng(0),
            sampling=reference.SamplingParams(1.0),
        )
        assert 0 < out.stats.nodes <= k * out.stats.rounds, (k, out.stats)
        assert out.stats.k == k


def test_parse_drafters():
    assert parse_drafters("all")[:3] == ["model", "lookup", "hybrid"]
    assert parse_drafters("model, heads") == ["model", "heads"]
    for bad in ("", "model,medusa", ","):
        with pytest.raises(ValueError, match="comma list"):
            parse_drafters(bad)


def test_several_drafters_share_one_autoregressive_baseline(target, draft, parts, costs):
    prompts = [np.array([1, 2, 3]), np.array([4, 5, 6, 7])]
    report = run_bench(
        target,
        draft,
        prompts,
        [],
        [0.0, 1.0],
        8,
        repeats=2,
        costs=costs,
        ks_by_drafter=PLAN,
        drafter_options=options(parts),
        shared_baseline=True,  # as specdec.measure.methods.run_methods runs it
    )
    runs = [(p.temperature, p.drafter, p.k) for p in report.points]
    assert runs == [(t, name, k) for t in (0.0, 1.0) for name, ks in PLAN.items() for k in ks]
    for t in (0.0, 1.0):  # one AR baseline per temperature: every point's AR rate is the same
        assert len({p.ar_tps for p in report.points if p.temperature == t}) == 1
    for p in report.points:
        assert p.drafted_per_round <= p.k
        assert len(p.alpha_by_position) == p.k  # one rate per position (a tree: per depth)
        if p.drafter == "heads":
            assert p.drafted_per_round <= min(p.k, 4)  # four heads
        if p.drafter.startswith("tree"):  # a tree verifies more nodes than its depth
            assert p.nodes_per_round > p.drafted_per_round, p
        elif p.drafter == "eagle-tree":  # its k is its node budget: at most k nodes
            assert p.drafted_per_round <= p.nodes_per_round <= p.k, p
        else:  # a chain verifies its drafts
            assert p.nodes_per_round == p.drafted_per_round, p


def test_the_method_table_shows_each_drafters_best_k(target, draft, parts, costs):
    prompts = {"a": [np.array([1, 2, 3])], "b": [np.array([3, 2, 1, 3, 2])]}
    ks = {"model": [1, 2], "heads": [1, 2]}
    reports = run_methods(
        target,
        draft,
        prompts,
        ["model", "heads"],
        [0.0],
        6,
        2,
        costs,
        ks=ks,
        drafter_options=options(parts),
    )
    assert sorted(reports) == ["a", "b"]
    best = best_points(reports["a"], 0.0)
    assert [p.drafter for p in best] == ["model", "heads"]
    for p in best:
        same = [q.speedup for q in reports["a"].points if q.drafter == p.drafter]
        assert p.speedup == max(same)
    text = methods_markdown(reports, "a test machine", "specdec bench --drafter model,heads")
    assert text.count("| model |") == 2 * (1 + 2)  # best rows of both sets + every k of both
    assert "**a**, 1 prompts, T = 0" in text and "Leviathan" in text


def test_eagle_and_its_tree_are_measured_at_equal_nodes(target, draft, parts, costs):
    """The method table sets the dynamic tree against the chain at the same k, its node
    budget: same ks in METHOD_KS, and a table of the pairs."""
    assert METHOD_KS["eagle-tree"] == METHOD_KS[EQUAL_NODES["eagle-tree"]] == METHOD_KS["eagle"]
    assert parse_drafters("all")[-2:] == ["eagle", "eagle-tree"]
    ks = {"heads": [2], "eagle": [2, 3], "eagle-tree": [2, 3]}
    reports = run_methods(
        target,
        draft,
        {"a": [np.array([1, 2, 3, 1, 2])]},
        list(ks),
        [0.0, 1.0],
        8,
        1,
        costs,
        ks=ks,
        drafter_options=options(parts),
    )
    text = methods_markdown(
        reports, "a test machine", "specdec bench --drafter heads,eagle,eagle-tree"
    )
    assert [p.drafter for p in best_points(reports["a"], 0.0)] == list(ks)
    for row in ("| eagle | 2 |", "| eagle-tree | 2 |", "| eagle | 3 |", "| eagle-tree | 3 |"):
        assert row in text, row
    pairs = text.split("Chain against dynamic tree at equal nodes", 1)[1].split("\n\n")[1]
    rows = [line for line in pairs.splitlines() if line.startswith("| a, ")]
    assert len(rows) == 2 * 2  # two temperatures x two ks
    assert all("| eagle / eagle-tree |" in row for row in rows)
    assert "alpha by position 1..k" in text
