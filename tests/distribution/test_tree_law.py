"""Tree drafts keep the target's law: exact laws by enumeration, one sampled family, power.

Exact laws (zero variance, float64). A tree round on a tiny vocabulary (V = 3) with random
target and draft tables (oracle.TableRows): every tree the drafter can build is enumerated
HERE, with the probability of its sibling draws written out for each rule (i.i.d. from q,
without replacement, the draft's top-b as point masses) -- nothing is taken from the
drafter in reference/tree.py; each tree's outcomes come from reference.tree.verify_tree_law;
each emitted sequence is extended with the target's own rows to depth + 1 tokens. That law
must equal the target's autoregressive law of depth + 1 tokens (oracle.target_law) to 1e-12,
for every shape of width <= 3 and depth <= 3 listed.

The same check with the target's rows computed by the real one-pass tree forward of a tiny
GPT (float32, so to 2e-5), against rows from its plain uncached forward.

The real deterministic drafters (ModelTreeDrafter's top-b, HeadsTreeDrafter): their tree for
a prompt, judged against the target's float64 rows, gives the target's law to 1e-12.

Power: the broken variants of the issue, each of which must move the law by far more than
the tolerance: the residual not updated between siblings, q not updated for siblings drawn
without replacement, point-mass candidates judged with the soft q, repeated i.i.d. siblings
merged, position ids by node index instead of depth, a mask that lets a node see its
siblings.

Sampled: verify_tree's outcomes against verify_tree_law on fixed trees (chi-square, one Holm
family at ALPHA = 1e-3), rejecting a sampler that skips the residual update; and the whole
loop, tree_speculative_generate with four tree drafters, against the target's law of 4
tokens (a second family), rejecting a loop that commits the path without compaction. That
loop is the one under test (`--tree`, default the reference's; `make oracle-gpu` grades the
GPU twin's); everything else here checks the reference's pure functions, and the power tests
break the reference's own loop.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

import reference.tree.forward as tree_forward_mod
import reference.tree.loop as tree_loop
import reference.tree.rule as tree_rule
from reference.sampling import SamplingParams
from reference.tree import (
    POINT,
    ROOT,
    SAMPLED,
    WITHOUT_REPLACEMENT,
    Tree,
    TreeShape,
    tree_verification_pass,
    verify_tree,
    verify_tree_law,
)
from specdec.oracle.laws import (
    ALPHA,
    EXACT_ATOL,
    POWER_P,
    ModelRows,
    TableRows,
    chi_square_test,
    holm,
    max_abs_difference,
    target_law,
    tiny_gpt,
)

pytestmark = pytest.mark.distribution

V = 3
PROMPT = (1, 0, 2)
SHAPES = [(1,), (3,), (2, 1), (1, 1, 1), (2, 2), (3, 1), (1, 1, 3), (2, 1, 1)]
DRAWS = [SAMPLED, WITHOUT_REPLACEMENT, POINT]
BROKEN_GAP = 1e-3  # a broken variant must move some probability by more than this
REAL_ATOL = 2e-5  # float32 rows of the real tree forward against float64 uncached rows


def tables(seed: int, draw: str, n_vocab: int = V):
    # (p_rows, q_rows): random conditionals; p copies q on a fifth of the contexts (an empty
    # residual). Without replacement needs q's support to hold every sibling: no zeros.
    full = draw == WITHOUT_REPLACEMENT
    q = TableRows(
        n_vocab, seed + 1, zero_frac=0.0 if full else 0.25, one_hot_frac=0.0 if full else 0.1
    )
    p = TableRows(n_vocab, seed, copy=q, copy_frac=0.2)
    return p, q


# ---------------------------------------------------------------- the trees a drafter builds


def sibling_draws(q: np.ndarray, b: int, draw: str):
    # q [V], b siblings -> [(tokens, their q rows, probability of drawing exactly these)]
    V = len(q)
    if draw == POINT:  # the b most likely tokens, deterministically
        top = np.argsort(-q, kind="stable")[:b]
        return [(tuple(int(t) for t in top), [np.eye(V)[t] for t in top], 1.0)]
    out = []
    for tokens in itertools.product(range(V), repeat=b):
        if draw == SAMPLED:  # i.i.d.: the product of q
            w = float(np.prod([q[t] for t in tokens]))
        else:  # sequentially without replacement: q(t_j) / (1 - q(t_1) - .. - q(t_{j-1}))
            if len(set(tokens)) < b:
                continue
            w, used = 1.0, 0.0
            for t in tokens:
                w *= q[t] / (1.0 - used)
                used += q[t]
        if w > 0:
            out.append((tokens, [q] * b, w))
    return out


def drafted_trees(shape: TreeShape, draw: str, q_rows, context: tuple):
    # -> [(Tree, probability)]: every tree the drafter can build on `shape`, level by level
    parents = list(shape.parents)
    groups = [p for p in sorted(set(parents[1:]))]  # parents with children, breadth-first
    n = len(parents)

    def path_to(tokens, node):
        out = []
        while node > 0:
            out.append(tokens[node])
            node = parents[node]
        return tuple(out[::-1])

    trees = []

    def fill(g: int, tokens: list, rows: list, w: float) -> None:
        if g == len(groups):
            q = np.stack([np.zeros(q_rows.n_vocab)] + rows[1:])
            draws = (ROOT,) + (draw,) * (n - 1)
            trees.append((Tree(np.array(tokens), np.array(parents), q, draws), w))
            return
        parent = groups[g]
        kids = [i for i in range(n) if parents[i] == parent]
        q = q_rows(context + path_to(tokens, parent))
        for picked, kid_rows, wk in sibling_draws(q, len(kids), draw):
            t2, r2 = list(tokens), list(rows)
            for kid, tok, row in zip(kids, picked, kid_rows, strict=True):
                t2[kid], r2[kid] = tok, row
            fill(g + 1, t2, r2, w * wk)

    fill(0, [context[-1]] + [0] * (n - 1), [None] * n, 1.0)
    return trees, path_to


def tree_round_law(p_rows, q_rows, shape: TreeShape, draw: str, rows_of=None, judged=None) -> dict:
    """Law of the first depth+1 tokens: one tree round, then the target's own rows.

    rows_of(tree) -> p [n, V] is how the round gets its target rows (default: the table at
    each node's path); judged(tree, path_to) -> the tree verification is handed (default:
    the drafted tree itself; a broken variant may hand it other q rows)."""
    depth = int(shape.depths.max())
    law: dict = {}

    def extend(out: tuple, w: float) -> None:
        if len(out) == depth + 1:
            law[out] = law.get(out, 0.0) + w
            return
        row = p_rows(PROMPT + out)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    trees, path_to = drafted_trees(shape, draw, q_rows, PROMPT)
    for tree, w in trees:
        if rows_of is None:
            p = np.stack([p_rows(PROMPT + path_to(tree.tokens, i)) for i in range(tree.n_nodes)])
        else:
            p = rows_of(tree)
        seen = tree if judged is None else judged(tree, path_to)
        p = p if seen is tree else p[: seen.n_nodes]  # a judged tree may keep a prefix
        for (path, token), m in verify_tree_law(p, seen).items():
            extend(tuple(seen.path_tokens(path)) + (token,), w * m)
    return law


# ---------------------------------------------------------------- exact laws


@pytest.mark.parametrize("draw", DRAWS)
@pytest.mark.parametrize("widths", SHAPES)
@pytest.mark.parametrize("seed", [11, 12, 17, 25])  # 11: a one-hot target row at the root
def test_a_tree_round_emits_the_targets_law(widths, draw, seed):
    p_rows, q_rows = tables(seed, draw)
    shape = TreeShape.of_widths(widths)
    got = tree_round_law(p_rows, q_rows, shape, draw)
    expected = target_law(p_rows, PROMPT, max_new_tokens=len(widths) + 1)
    assert max_abs_difference(got, expected) < EXACT_ATOL


@pytest.mark.parametrize("draw", DRAWS)
@pytest.mark.parametrize("widths", [(3,), (3, 1)])
def test_three_siblings_in_a_larger_vocabulary(widths, draw):
    """V = 4: the third sibling drawn without replacement still has two tokens to choose
    from, so its q (the row minus BOTH earlier siblings) matters."""
    p_rows, q_rows = tables(12, draw, n_vocab=4)
    got = tree_round_law(p_rows, q_rows, TreeShape.of_widths(widths), draw)
    expected = target_law(p_rows, PROMPT, max_new_tokens=len(widths) + 1)
    assert max_abs_difference(got, expected) < EXACT_ATOL


def test_greedy_rows_in_a_tree_give_the_greedy_sequence():
    """One-hot target rows: whatever the tree, the law is a point mass on the target's
    greedy continuation."""
    p_rows = TableRows(V, 5, one_hot_frac=1.0)
    _, q_rows = tables(6, SAMPLED)
    got = tree_round_law(p_rows, q_rows, TreeShape.of_widths((2, 2)), SAMPLED)
    expected = target_law(p_rows, PROMPT, max_new_tokens=3)
    assert len(expected) == 1
    assert max_abs_difference(got, expected) < EXACT_ATOL


def test_a_real_one_pass_tree_forward_gives_the_targets_law():
    """Rows from the real tree verification pass of a tiny GPT (cache, tree mask, position
    ids = depth; float32) against the target's rows from its plain uncached forward."""
    target, draft = tiny_gpt(V, 16, 8, 2, 2, 0.8, 21), tiny_gpt(V, 16, 8, 1, 2, 0.8, 22)
    got, expected = real_model_laws(target, draft)
    assert max_abs_difference(got, expected) < REAL_ATOL


def real_model_laws(target, draft, widths=(2, 1)):
    sampling = SamplingParams()
    p_rows, q_rows = ModelRows(target, sampling), ModelRows(draft, sampling)

    def rows_of(tree):
        cache = target.new_cache()
        target.forward(np.array(PROMPT[:-1]), cache)
        cache.commit(len(PROMPT) - 1)
        p, _, _ = tree_verification_pass(target, cache, np.array(PROMPT), tree, sampling)
        return p.astype(np.float64) / p.sum(axis=-1, keepdims=True, dtype=np.float64)

    shape = TreeShape.of_widths(widths)
    got = tree_round_law(p_rows, q_rows, shape, SAMPLED, rows_of)
    return got, target_law(p_rows, PROMPT, max_new_tokens=len(widths) + 1)


# ---------------------------------------------------------------- power: broken variants


def gap(widths, draw, seed=12):
    p_rows, q_rows = tables(seed, draw)
    got = tree_round_law(p_rows, q_rows, TreeShape.of_widths(widths), draw)
    return max_abs_difference(got, target_law(p_rows, PROMPT, max_new_tokens=len(widths) + 1))


def test_the_residual_must_be_updated_between_siblings(monkeypatch):
    """A verifier that judges every sibling against the original p (no residual update)."""
    monkeypatch.setattr(tree_rule, "residual_distribution", lambda p, q: p)
    assert gap((3,), SAMPLED) > BROKEN_GAP
    assert gap((2, 1), POINT) > BROKEN_GAP


def test_q_must_lose_the_rejected_token_without_replacement(monkeypatch):
    """Siblings drawn without replacement judged with the q they were NOT drawn from (the
    full row, rejected tokens still in it)."""
    assert gap((3,), WITHOUT_REPLACEMENT) < EXACT_ATOL
    monkeypatch.setattr(tree_rule, "without_tokens", lambda q, tokens: q.astype(np.float64))
    assert gap((3,), WITHOUT_REPLACEMENT) > BROKEN_GAP


def test_point_mass_candidates_must_be_judged_as_point_masses():
    """The draft's top-b (deterministic) judged with the draft's soft q: a real bug of
    several projects (argmax drafts judged with soft q)."""
    p_rows, q_rows = tables(12, WITHOUT_REPLACEMENT)  # q without zeros: q(x) > 0 for all x

    def with_soft_q(tree, path_to):
        rows = [np.zeros(V)] + [
            q_rows(PROMPT + path_to(tree.tokens, int(tree.parents[i])))
            for i in range(1, tree.n_nodes)
        ]
        draws = (ROOT,) + (SAMPLED,) * (tree.n_nodes - 1)
        return Tree(tree.tokens, tree.parents, np.stack(rows), draws)

    shape = TreeShape.of_widths((2, 1))
    expected = target_law(p_rows, PROMPT, max_new_tokens=3)
    right = tree_round_law(p_rows, q_rows, shape, POINT)
    assert max_abs_difference(right, expected) < EXACT_ATOL
    wrong = tree_round_law(p_rows, q_rows, shape, POINT, judged=with_soft_q)
    assert max_abs_difference(wrong, expected) > BROKEN_GAP


def test_repeated_siblings_must_not_be_merged():
    """Siblings drawn i.i.d. may repeat a token; a drafter that drops the repeats (to save
    rows) while verification still judges the survivors as i.i.d. draws from q gives the
    repeated token fewer chances than the rule counts on."""
    p_rows, q_rows = tables(17, SAMPLED)

    def merged(tree, path_to):
        first = sorted(
            {int(t): i for i, t in reversed(list(enumerate(tree.tokens[1:], 1)))}.values()
        )
        keep = [0, *first]
        return Tree(tree.tokens[keep], tree.parents[keep], tree.q[keep], tree.draws[: len(keep)])

    shape = TreeShape.of_widths((3,))
    expected = target_law(p_rows, PROMPT, max_new_tokens=2)
    assert max_abs_difference(tree_round_law(p_rows, q_rows, shape, SAMPLED), expected) < EXACT_ATOL
    wrong = tree_round_law(p_rows, q_rows, shape, SAMPLED, judged=merged)
    assert max_abs_difference(wrong, expected) > BROKEN_GAP


def test_position_ids_must_be_depths_and_siblings_must_not_see_each_other(monkeypatch):
    """The tree forward's two classic mistakes, on the real model: each moves the law by
    at least ten times the tolerance of the check above."""
    target, draft = tiny_gpt(V, 16, 8, 2, 2, 0.8, 21), tiny_gpt(V, 16, 8, 1, 2, 0.8, 22)
    real_mask = tree_forward_mod.ancestor_mask

    def sees_siblings(parents):
        mask = real_mask(parents)
        for i, parent in enumerate(parents):
            mask[i, : i + 1] |= np.asarray(parents[: i + 1]) == parent
        return mask

    with monkeypatch.context() as m:
        m.setattr(tree_forward_mod, "position_ids", lambda parents, n: n + np.arange(len(parents)))
        got, expected = real_model_laws(target, draft)
        assert max_abs_difference(got, expected) > 10 * REAL_ATOL
    with monkeypatch.context() as m:
        m.setattr(tree_forward_mod, "ancestor_mask", sees_siblings)
        got, expected = real_model_laws(target, draft)
        assert max_abs_difference(got, expected) > 10 * REAL_ATOL


# ---------------------------------------------------------------- sampled: the real sampler

N_SAMPLES = 20_000


def fixed_trees():
    # name -> (p [n, V], tree): one drafted tree per rule, with p tables that copy q nowhere
    out = {}
    for draw, widths, seed in [
        (SAMPLED, (3, 1), 31),
        (WITHOUT_REPLACEMENT, (3, 1), 32),
        (POINT, (2, 2), 34),
    ]:
        p_rows, q_rows = tables(seed, draw)
        trees, path_to = drafted_trees(TreeShape.of_widths(widths), draw, q_rows, PROMPT)
        tree, _ = max(trees, key=lambda tw: (tw[1], tw[0].tokens.tolist()))  # the likeliest
        p = np.stack([p_rows(PROMPT + path_to(tree.tokens, i)) for i in range(tree.n_nodes)])
        out[f"{draw} {widths}"] = (p, tree)
    return out


def sampled_check(name, p, tree, seed, verify=verify_tree):
    rng = np.random.default_rng(seed)
    counts = Counter()
    for _ in range(N_SAMPLES):
        r = verify(p, tree, rng)
        counts[(r.path, r.token)] += 1
    return chi_square_test(counts, verify_tree_law(p, tree), name)


def test_verify_tree_samples_its_exact_law():
    results = {
        name: sampled_check(name, p, tree, seed=100 + i)
        for i, (name, (p, tree)) in enumerate(fixed_trees().items())
    }
    adjusted = holm({name: r.p_value for name, r in results.items()})
    for name, r in results.items():
        assert adjusted[name] >= ALPHA, r.describe()


def test_the_sampled_check_rejects_a_sampler_without_residual_update(monkeypatch):
    name, (p, tree) = next(iter(fixed_trees().items()))
    law_p = verify_tree_law(p, tree)  # the correct law, before breaking the sampler
    monkeypatch.setattr(tree_rule, "residual_distribution", lambda p, q: p)
    rng = np.random.default_rng(7)
    counts = Counter()
    for _ in range(N_SAMPLES):
        r = verify_tree(p, tree, rng)
        counts[(r.path, r.token)] += 1
    assert chi_square_test(counts, law_p, name).p_value < POWER_P


# ---------------------------------------------------------------- the real deterministic drafters


def deterministic_tree_law(p_rows, tree, length: int) -> dict:
    # law of `length` tokens: one round on this (deterministic) tree, then the target's rows
    law: dict = {}

    def path_to(node):
        out = []
        while node > 0:
            out.append(int(tree.tokens[node]))
            node = int(tree.parents[node])
        return tuple(out[::-1])

    def extend(out: tuple, w: float) -> None:
        if len(out) == length:
            law[out] = law.get(out, 0.0) + w
            return
        row = p_rows(PROMPT + out)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    p = np.stack([p_rows(PROMPT + path_to(i)) for i in range(tree.n_nodes)])
    for (path, token), m in verify_tree_law(p, tree).items():
        extend(tuple(tree.path_tokens(path)) + (token,), m)
    return law


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_real_top_b_and_heads_trees_keep_the_targets_law(temperature):
    """Trees built by the real ModelTreeDrafter (top-b point masses) and HeadsTreeDrafter
    (pruned Cartesian tree of the heads' favourites), judged against the target's float64
    rows: a deterministic tree of point masses emits the target's law exactly."""
    from reference.heads import HeadsDrafter
    from reference.tree import HeadsTreeDrafter, ModelTreeDrafter
    from specdec.standins import random_heads

    target = tiny_gpt(V, 16, 12, 2, 2, 0.8, 21)
    draft = tiny_gpt(V, 16, 8, 1, 2, 0.8, 22)
    sampling = SamplingParams(temperature=temperature)
    p_rows = ModelRows(target, sampling)
    expected = target_law(p_rows, PROMPT, max_new_tokens=4)
    rng = np.random.default_rng(0)

    top_b = ModelTreeDrafter(draft, (2, 2, 1), POINT)
    top_b.reset()
    top_b.prefill(np.array(PROMPT[:-1]))
    tree = top_b.propose_tree(np.array(PROMPT), 3, 99, sampling, rng)
    assert tree.depth == 3
    assert max_abs_difference(deterministic_tree_law(p_rows, tree, 4), expected) < EXACT_ATOL

    heads = HeadsTreeDrafter(HeadsDrafter(target, random_heads(12, 3, seed=5)), (3, 2, 2), 9)
    heads.observe(target.norm(target.residual(np.array(PROMPT[:-1])), "ln_f")[-1])
    tree = heads.propose_tree(np.array(PROMPT), 3, 99, sampling, rng)
    assert tree.n_nodes == 10  # the root and the 9 likeliest of 3 + 6 + 12 candidates
    assert max_abs_difference(deterministic_tree_law(p_rows, tree, 4), expected) < EXACT_ATOL


# ---------------------------------------------------------------- sampled: the whole loop

LOOP_RUNS = 4000
# the broken rounds below are shown caught on a quarter of the check's runs (p ~ 1e-26 and
# 1e-17 there, far below POWER_P): with all LOOP_RUNS they are caught with more room still
POWER_RUNS = LOOP_RUNS // 4
LOOP_TOKENS = 4


def loop_setups():
    # name -> (drafter factory, sampling); the target is one tiny GPT, the draft another
    from reference.heads import HeadsDrafter
    from reference.tree import HeadsTreeDrafter, ModelTreeDrafter
    from specdec.standins import random_heads

    target = tiny_gpt(V, 16, 12, 2, 2, 0.8, 21)
    draft = tiny_gpt(V, 16, 8, 1, 2, 0.8, 22)
    return target, {
        "sampled (2, 2), T=1": (lambda: ModelTreeDrafter(draft, (2, 2), SAMPLED), 1.0),
        "without replacement (3, 1), T=0.8": (
            lambda: ModelTreeDrafter(draft, (3, 1), WITHOUT_REPLACEMENT),
            0.8,
        ),
        "top-b (2, 1, 1), T=1": (lambda: ModelTreeDrafter(draft, (2, 1, 1), POINT), 1.0),
        "heads (3, 2), T=1": (
            lambda: HeadsTreeDrafter(HeadsDrafter(target, random_heads(12, 2, seed=5)), (3, 2)),
            1.0,
        ),
    }


def loop_check(name, target, make_drafter, temperature, seed, generate_fn=None, runs=LOOP_RUNS):
    from reference.tree import tree_speculative_generate

    generate_fn = generate_fn or tree_speculative_generate
    sampling = SamplingParams(temperature=temperature)
    rng = np.random.default_rng(seed)
    drafter = make_drafter()
    counts = Counter()
    for _ in range(runs):
        out = generate_fn(
            target, drafter, PROMPT, max_new_tokens=LOOP_TOKENS, rng=rng, sampling=sampling
        )
        counts[tuple(out.tokens)] += 1
    law = target_law(ModelRows(target, sampling), PROMPT, max_new_tokens=LOOP_TOKENS)
    return chi_square_test(counts, law, name)


def test_the_tree_loop_samples_the_targets_law(tree_impl):
    """The tree loop under test (--tree), run LOOP_RUNS times per setup: the law of its 4
    tokens (over several rounds, so the caches' compaction matters) against the target's."""
    target, setups = loop_setups()
    results = {
        name: loop_check(name, target, make, temperature, seed=200 + i, generate_fn=tree_impl)
        for i, (name, (make, temperature)) in enumerate(setups.items())
    }
    adjusted = holm({name: r.p_value for name, r in results.items()})
    for name, r in results.items():
        assert adjusted[name] >= ALPHA, r.describe()


def test_the_loop_check_rejects_a_round_without_compaction(monkeypatch):
    """Committing the path's slots where they lie (no gather) keeps siblings' K/V in the
    target's cache: later rounds read the wrong history, and the loop's law moves."""
    target, setups = loop_setups()
    make, temperature = setups["sampled (2, 2), T=1"]
    monkeypatch.setattr(tree_loop, "compact", lambda cache, slots: None)
    result = loop_check("no compaction", target, make, temperature, seed=7, runs=POWER_RUNS)
    assert result.p_value < POWER_P, result.describe()


def test_the_loop_check_rejects_a_compaction_that_copies_a_siblings_kv(monkeypatch):
    """Gathering the wrong slots: every accepted node's K/V taken from its sibling's slot
    (in the (2, 2) tree, nodes 2j-1 and 2j are siblings). The committed cache then holds the
    sibling's token at that position, and the loop's law moves."""
    target, setups = loop_setups()
    make, temperature = setups["sampled (2, 2), T=1"]
    right = tree_loop.kept_slots

    def sibling(a: int) -> int:
        return a + 1 if a % 2 else a - 1

    monkeypatch.setattr(
        tree_loop, "kept_slots", lambda m, path: right(m, [sibling(a) for a in path])
    )
    result = loop_check(
        "a sibling's K/V compacted", target, make, temperature, seed=8, runs=POWER_RUNS
    )
    assert result.p_value < POWER_P, result.describe()
