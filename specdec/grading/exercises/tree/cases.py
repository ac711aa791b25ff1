"""The sampled cases of the tree exercise: small trees the grader draws from q, the rows the
target gives them, and the laws (the target's own, and each rule's) they are held to.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np

from specdec.grading.engine.core import Runs
from specdec.grading.engine.laws import Context, Law, target_joint_law
from specdec.grading.engine.submission import CHUNK, Submission, streams
from specdec.grading.exercises.tree.walk import (
    POINT,
    ROOT,
    SAMPLED,
    WITHOUT_REPLACEMENT,
    Rule,
    call_tree_each,
    emitted,
    make_tree,
    rule_law,
)
from specdec.grading.exercises.verify.exact import draw
from specdec.grading.exercises.verify.tables import RandomTable


@dataclass(frozen=True)
class TreeCase:
    name: str
    parents: tuple[int, ...]  # breadth-first, -1 for the root
    draw: str  # how every group of siblings is drawn
    n_vocab: int
    context: Context  # the committed tokens; the root is the last one
    p_seed: int  # the target's table
    q_seed: int  # the draft's table
    n: int  # runs
    seed: int

    @cached_property
    def depth(self) -> int:
        depth = [0] * len(self.parents)
        for i, parent in enumerate(self.parents[1:], 1):
            depth[i] = depth[parent] + 1
        return max(depth)


# seeds chosen so that each usual mistake moves the law far (the power figures: see the test)
SAMPLED_CASE = TreeCase("sampled", (-1, 0, 0, 0, 1), SAMPLED, 4, (2,), 601, 602, 4_000, 61)
WITHOUT_CASE = TreeCase(
    "without-replacement", (-1, 0, 0, 0, 1, 2), WITHOUT_REPLACEMENT, 4, (1,), 816, 817, 5_000, 62
)
POINT_CASE = TreeCase("point-mass", (-1, 0, 0, 1, 2), POINT, 5, (3,), 621, 622, 4_000, 63)
TREE_CASES = (SAMPLED_CASE, WITHOUT_CASE, POINT_CASE)


@cache
def tables(case: TreeCase) -> tuple[RandomTable, RandomTable]:
    """(p, q): random context-dependent rows. q has no zeros when siblings are drawn without
    replacement (its support must hold every sibling); p copies q on a fifth of the contexts
    (an empty residual) and has zeros and one-hot rows elsewhere."""
    full = case.draw == WITHOUT_REPLACEMENT
    kw = dict(salt=0, keep_likeliest=True)  # the rows these cases' seeds were chosen on
    q = RandomTable(
        case.n_vocab, case.q_seed, zeros=0.0 if full else 0.25, one_hot=0.0 if full else 0.1, **kw
    )
    return RandomTable(case.n_vocab, case.p_seed, copy=q, copy_frac=0.2, **kw), q


@cache
def groups(parents: tuple[int, ...]) -> list[tuple[int, list[int]]]:
    # [(parent, its children)] in breadth-first order: a parent's token is set before its own
    return [(s, [i for i, p in enumerate(parents) if p == s]) for s in sorted(set(parents[1:]))]


def sibling_draws(q: np.ndarray, b: int, how: str, rng=None):
    """b siblings from the row q: one draw with rng, or (rng None) every possible draw ->
    [(tokens, their q rows, probability)]."""
    V = len(q)
    if how == POINT:  # the b likeliest tokens, as point masses (deterministic)
        top = [int(t) for t in np.argsort(-q, kind="stable")[:b]]
        return [(tuple(top), [np.eye(V)[t] for t in top], 1.0)]
    if rng is not None:
        left, tokens = q.copy(), []
        for _ in range(b):
            tokens.append(draw(left, rng))
            if how == WITHOUT_REPLACEMENT:
                left[tokens[-1]] = 0.0
        return [(tuple(tokens), [q] * b, 1.0)]
    out = []
    for tokens in np.ndindex(*(V,) * b):
        w, used = 1.0, 0.0
        if how == WITHOUT_REPLACEMENT and len(set(tokens)) < b:
            continue
        for t in tokens:
            w *= q[t] / (1.0 - used) if how == WITHOUT_REPLACEMENT else q[t]
            used += q[t]
        if w > 0:
            out.append((tuple(int(t) for t in tokens), [q] * b, w))
    return out


def build_trees(case: TreeCase) -> list[tuple[object, np.ndarray, float]]:
    """Every tree the drafter can build, with its probability -> [(tree, P [n, V], w)], P
    read from the target's table along each path."""
    n, V = len(case.parents), case.n_vocab
    partial = [((case.context[-1],) + (0,) * (n - 1), (np.zeros(V),) * n, 1.0)]
    for parent, kids in groups(case.parents):
        grown = []
        for tokens, rows, w in partial:
            q = tables(case)[1](case.context + path_tokens(case.parents, tokens, parent))
            for picked, kid_rows, wk in sibling_draws(q, len(kids), case.draw):
                t2, r2 = list(tokens), list(rows)
                for kid, token, row in zip(kids, picked, kid_rows, strict=True):
                    t2[kid], r2[kid] = token, row
                grown.append((tuple(t2), tuple(r2), w * wk))
        partial = grown
    return [(*tree_and_rows(case, tokens, np.stack(rows)), w) for tokens, rows, w in partial]


def draw_tree(case: TreeCase, rng: np.random.Generator) -> tuple[object, np.ndarray]:
    """One tree drawn from the draft's rows, as a drafter would -> (tree, P [n, V])."""
    n, V = len(case.parents), case.n_vocab
    tokens = [case.context[-1]] + [0] * (n - 1)
    q = np.zeros((n, V))
    for parent, kids in groups(case.parents):
        row = tables(case)[1](case.context + path_tokens(case.parents, tokens, parent))
        ((picked, kid_rows, _),) = sibling_draws(row, len(kids), case.draw, rng)
        for kid, token, kid_row in zip(kids, picked, kid_rows, strict=True):
            tokens[kid], q[kid] = token, kid_row
    return tree_and_rows(case, tokens, q)


def path_tokens(parents: tuple[int, ...], tokens, node: int) -> Context:
    # the tokens on the path from the root (excluded) down to `node`
    out = []
    while node > 0:
        out.append(int(tokens[node]))
        node = parents[node]
    return tuple(out[::-1])


def tree_and_rows(case: TreeCase, tokens, q: np.ndarray) -> tuple[object, np.ndarray]:
    p_rows = tables(case)[0]
    tree = make_tree(tokens, case.parents, q, (ROOT,) + (case.draw,) * (len(tokens) - 1))
    paths = [path_tokens(case.parents, tokens, i) for i in range(len(tokens))]
    return tree, np.stack([p_rows(case.context + path) for path in paths])


def completed(case: TreeCase, out: Context, rng: np.random.Generator) -> Context:
    # the emitted tokens, continued with the target's own samples to depth + 1 tokens
    p_rows, _ = tables(case)
    while len(out) < case.depth + 1:
        out += (draw(p_rows(case.context + out), rng),)
    return out


def case_outcomes(case: TreeCase):
    """-> outcomes(submission): an endless stream of (completed tokens, path length)."""

    def outcomes(sub: Submission):
        # the grader's draws (trees, completions) come from this grading's secret, the
        # submission's generator from a stream of its own; a chunk's calls are made in one
        # request (CHUNK divides looks)
        grader, rng = streams(case.seed)
        while True:
            calls = [draw_tree(case, grader)[::-1] for _ in range(CHUNK)]  # (P, tree)
            for (_, tree), (path, token) in zip(
                calls, call_tree_each(sub, calls, rng), strict=True
            ):
                out = emitted(tree, path, token)[: case.depth + 1]
                yield completed(case, out, grader), len(path)

    return outcomes


def runs_of(case: TreeCase) -> Runs:
    # one stream per case and grading's families, shared by the law check and the rule check
    # that read it
    return Runs(case_outcomes(case), case.n)


@cache
def rule_laws(case: TreeCase, rule: Rule) -> tuple[Law, float]:
    """Under `rule`, over every tree the drafter can build: the law of the emitted tokens
    completed by the target to depth + 1 tokens, and the first level's acceptance."""
    p_rows, _ = tables(case)
    law: Law = {}
    kept = 0.0

    def extend(out: Context, w: float) -> None:
        if len(out) == case.depth + 1:
            law[out] = law.get(out, 0.0) + w
            return
        row = p_rows(case.context + out)
        for y in np.flatnonzero(row > 0):
            extend(out + (int(y),), w * float(row[y]))

    for tree, P, w in build_trees(case):
        for (path, token), m in rule_law(P, tree, rule).items():
            extend(emitted(tree, path, token)[: case.depth + 1], w * m)
            kept += w * m * (len(path) > 0)
    return law, kept


def target_law(case: TreeCase) -> Law:
    p_rows, _ = tables(case)
    return target_joint_law(p_rows, case.context, case.depth + 1)


DRAWN = {
    SAMPLED: "siblings sampled i.i.d. from q",
    WITHOUT_REPLACEMENT: "siblings drawn from q without replacement",
    POINT: "the draft's top-2 as point masses",
}


def describe_case(case: TreeCase, long: bool = False) -> str:
    short = f"{len(case.parents)} nodes, V = {case.n_vocab}, {DRAWN[case.draw]}"
    return short if not long else f"trees of parents {list(case.parents)}, " + short
