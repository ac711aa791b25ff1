"""The tree exercise's checks on fresh inputs: small trees and target rows drawn for each
grading from its secret (engine/secret.py), so that a walk that answers the shown cases from
a table of their inputs passes none of these. The expected laws are the contract's walk,
enumerated here (walk.rule_law) on the very rows and tree the walk is handed.

* tree/keeps-children (tree-law family, exact): 40 trees where keeping the root's first child
  is free (p = q) or likely (p(x) >= 0.5); not one child kept fails. A walk that never keeps
  a child (always ((), a sample of p_rows[0])) passes every law, but it is no verification.
* tree-rule/fresh-paths, tree-rule/fresh-walk (tree-rule family, sampled): 10 random trees
  (3-6 nodes, V = 3-5, siblings sampled, without replacement or point masses, p rows of every
  overlap with q), 500 calls each: the law of the accepted path, then the joint law of
  (path, token), one chi-square over the trees (engine/laws.compare_cases).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specdec.grading.engine.core import Check, Outcome, Runs
from specdec.grading.engine.laws import Law, compare, compare_cases, marginal
from specdec.grading.engine.secret import grader_rng, grading_secret
from specdec.grading.engine.submission import CHUNK, Submission, streams
from specdec.grading.exercises.tree.walk import (
    MISTAKES,
    POINT,
    ROOT,
    SAMPLED,
    SLOWER,
    WITHOUT_REPLACEMENT,
    call_tree_each,
    make_tree,
    rule_law,
)
from specdec.grading.exercises.verify.exact import draw
from specdec.grading.exercises.verify.fresh import sparse_row

FRESH_SEED = 51  # the grader's streams (from the secret) of the fresh trees and of the gate
GATE_SEED = 52
FRESH_TREES = 10
FRESH_N = 5_000  # calls in all, in turn over the trees: 500 each (100 at the quick look)
GATE_CALLS = 40  # half with p = q at the root; p(x) >= 0.5 at the first child in all


@dataclass(frozen=True)
class FreshTree:
    tree: object  # reference.tree.Tree
    P: np.ndarray  # [n, V] the target's row after the path to each node
    law: Law  # the contract's walk: {(path, token): probability}
    paths: Law  # its marginal: {path: probability}

    def shown(self) -> list[str]:
        tree = self.tree
        with np.printoptions(precision=3, suppress=True):
            return [
                f"tree: parents {tree.parents.tolist()}, tokens {tree.tokens.tolist()}, draws "
                f"{list(tree.draws[1:])}",
                f"tree.q (row i: the law node i was drawn from) =\n{tree.q}",
                f"p_rows (row i: the target after the path to node i) =\n{self.P}",
            ]


def walked(tree, P: np.ndarray) -> FreshTree:
    law = rule_law(P, tree)
    return FreshTree(tree, P, law, marginal(law, lambda o: o[0]))


def random_parents(n: int, rng: np.random.Generator) -> list[int]:
    # breadth-first (parents nondecreasing, each before its child), depth 3 at most
    parents, depth = [-1, 0], [0, 1]
    for i in range(2, n):
        choices = [s for s in range(parents[-1], i) if depth[s] < 3]
        parent = int(rng.choice(choices))
        parents.append(parent)
        depth.append(depth[parent] + 1)
    return parents


def target_row(q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    # [V] the target's row facing children drawn from q: q itself (a fifth: keeping is free),
    # an unrelated row (little overlap, zeros), or a mixture w q + (1 - w) r
    style = rng.random()
    if style < 0.2:
        return q.copy()
    if style < 0.35:
        return sparse_row(len(q), rng, 0.4)
    w = rng.random()
    return w * q + (1 - w) * sparse_row(len(q), rng, 0.3)


def fresh_tree(rng: np.random.Generator) -> tuple[object, np.ndarray]:
    """One random tree, drawn as a drafter would, and the target's rows -> (tree, P [n, V])."""
    V, n = int(rng.integers(3, 6)), int(rng.integers(3, 7))
    parents = random_parents(n, rng)
    tokens, q = [int(rng.integers(V))] + [0] * (n - 1), np.zeros((n, V))
    draws, P = [ROOT] + [SAMPLED] * (n - 1), np.zeros((n, V))
    for node in range(n):
        kids = [i for i in range(n) if parents[i] == node]
        if not kids:
            P[node] = sparse_row(V, rng, 0.2)
            continue
        how = rng.choice([SAMPLED, WITHOUT_REPLACEMENT, POINT]) if len(kids) <= V else SAMPLED
        row = sparse_row(V, rng, 0.0 if how == WITHOUT_REPLACEMENT else 0.2)
        if how == POINT:
            picked = [int(t) for t in np.argsort(-row, kind="stable")[: len(kids)]]
            rows = [np.eye(V)[t] for t in picked]
            P[node] = target_row(rows[0], rng) if rng.random() < 0.5 else target_row(row, rng)
        else:
            left, picked = row.copy(), []
            for _ in kids:
                picked.append(draw(left, rng))
                if how == WITHOUT_REPLACEMENT:
                    left[picked[-1]] = 0.0
            rows = [row] * len(kids)
            P[node] = target_row(row, rng)
        for kid, token, kid_row in zip(kids, picked, rows, strict=True):
            tokens[kid], q[kid], draws[kid] = token, kid_row, str(how)
    return make_tree(tokens, parents, q, tuple(draws)), P


@lru_cache(maxsize=4)
def fresh_trees(secret: int) -> tuple[FreshTree, ...]:
    rng = grader_rng(FRESH_SEED, secret)
    return tuple(walked(*fresh_tree(rng)) for _ in range(FRESH_TREES))


# --------------------------------------------------------------------------------------------
# The tree-law family's gate: some child is kept where keeping is free or likely
# --------------------------------------------------------------------------------------------


def gate_tree(rng: np.random.Generator, free: bool) -> tuple[np.ndarray, object]:
    """The root and 1-3 children (sampled or without replacement), leaves; the first child's
    token x has p(x) >= 0.5 under the root's row, and q = p (free: the contract keeps it) or
    q = (p + r) / 2 (it keeps it with min(1, p/q) >= p(x)) -> (P [n, V], tree)."""
    V, b = int(rng.integers(3, 6)), int(rng.integers(1, 4))
    x, mass = int(rng.integers(V)), rng.uniform(0.5, 0.9)
    p = rng.dirichlet(np.ones(V)) * (1 - mass)
    p[x] += mass
    q = p.copy() if free else 0.5 * (p + rng.dirichlet(np.ones(V)))
    how = str(rng.choice([SAMPLED, WITHOUT_REPLACEMENT]))
    left, picked = q.copy(), [x]
    left[x] = 0.0 if how == WITHOUT_REPLACEMENT else left[x]
    for _ in range(b - 1):
        picked.append(draw(left, rng))
        if how == WITHOUT_REPLACEMENT:
            left[picked[-1]] = 0.0
    tree = make_tree(
        [int(rng.integers(V)), *picked],
        [-1] + [0] * b,
        np.vstack([np.zeros(V)] + [q] * b),
        (ROOT,) + (how,) * b,
    )
    P = np.vstack([p] + [rng.dirichlet(np.ones(V)) for _ in range(b)])
    return P, tree


NEVER_KEEPS_HINT = (
    "your walk never keeps a child, even where the root's row p equals the children's q, "
    "which makes keeping the first child free (min(1, p(x)/q(x)) = 1: the contract descends "
    "into it). Always returning ((), a sample of p_rows[0]) follows the target's law, but it "
    "is no verification: try the children in order, keep x_j when a fresh uniform from rng is "
    "below min(1, p(x_j)/q_j(x_j)), and descend; these inputs are drawn afresh each grading"
)


def keeps_children_check() -> Check:
    """Exact in practice: on the p = q trees the contract keeps the first child for sure; a
    walk that keeps it with probability at least p(x) (keep-with-p(x), first-child-only: both
    exact) keeps none of the 40 with probability <= 0.5 ** 40 < 1e-12."""

    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        grader, rng = grader_rng(GATE_SEED), streams(GATE_SEED)[1]
        calls = [gate_tree(grader, free=i % 2 == 0) for i in range(GATE_CALLS)]
        answers = call_tree_each(sub, calls, rng)
        kept = sum(len(path) > 0 for path, _ in answers)
        if kept:
            return Outcome(True, f"a child kept in {kept} of {GATE_CALLS} calls", n=GATE_CALLS)
        P, tree = calls[0]
        story = [
            f"{GATE_CALLS} calls on fresh trees (drawn for this grading): in half of them the "
            f"root's row p equals its children's q, where the contract keeps the first child; "
            f"in all, p(x) >= 0.5 at the first child. Not one child was kept (path = () every "
            f"time)",
            "one of them (p = q at the root):",
            *walked(tree, P).shown(),
            f"observed path {list(answers[0][0])}, token {answers[0][1]}",
        ]
        summary = f"not one child kept in {GATE_CALLS} calls where keeping is free or likely"
        return Outcome(False, summary, story, NEVER_KEEPS_HINT, n=GATE_CALLS, pattern="never-keeps")

    return Check(
        "tree/keeps-children",
        "fresh trees where keeping the first child is free (p = q) or likely: some is kept",
        False,
        run,
    )


# --------------------------------------------------------------------------------------------
# The tree-rule family's fresh trees: the path's law, then the joint law of (path, token)
# --------------------------------------------------------------------------------------------


def fresh_rule_checks() -> list[Check]:
    memo: dict = {}

    def runs_now() -> tuple[Runs, tuple[FreshTree, ...]]:
        # a grading's runs: new ones if the secret changed (the same submission graded again)
        secret = grading_secret()
        if memo.get("secret") != secret:
            cases = fresh_trees(secret)

            def outcomes(sub: Submission):
                # -> (tree, path, token), the trees in turn; the walk's generator is a stream
                # of its own, never derived from the secret
                rng = streams(FRESH_SEED)[1]
                calls = [(c.P, c.tree) for c in cases] * (CHUNK // len(cases))
                while True:
                    answers = call_tree_each(sub, calls, rng)
                    yield from ((i % len(cases), p, t) for i, (p, t) in enumerate(answers))

            memo.update(secret=secret, cases=cases, runs=Runs(outcomes, FRESH_N))
        return memo["runs"], memo["cases"]

    def check(paths_only: bool):
        def run(sub: Submission, threshold: float, look: int) -> Outcome:
            runs, cases = runs_now()
            counts = runs.counts(sub, look)
            n = counts.total()
            joint = [Counter() for _ in cases]
            for (c, path, token), m in counts.items():
                joint[c][(path, token)] += m
            if paths_only:
                samples = [(path_counts(s), f.paths) for s, f in zip(joint, cases, strict=True)]
            else:
                samples = [(s, f.law) for s, f in zip(joint, cases, strict=True)]
            p, comparisons = compare_cases(samples)
            what = "accepted paths" if paths_only else "(path, token)"
            summary = f"{len(cases)} fresh trees, {what}, p = {p:.2g}"
            if p >= threshold:
                return Outcome(True, summary, p_value=p, n=n)
            story, hint, pattern = fresh_failure(cases, joint, comparisons, n)
            return Outcome(False, summary, story, hint, p, n, pattern=pattern)

        return run

    return [
        Check(
            "tree-rule/fresh-paths",
            "fresh trees and rows (this grading's): the accepted path's law",
            True,
            check(True),
        ),
        Check(
            "tree-rule/fresh-walk",
            "fresh trees and rows (this grading's): the joint law of (path, token)",
            True,
            check(False),
        ),
    ]


def path_counts(joint: Counter) -> Counter:
    out: Counter = Counter()
    for (path, _), c in joint.items():
        out[path] += c
    return out


def fresh_failure(
    cases: tuple[FreshTree, ...], joint: list[Counter], comparisons: list, n: int
) -> tuple[list[str], str, str]:
    """-> (story, hint, pattern): never keeping first, else the tree that deviates most, with
    the usual mistake (walk.py) whose law its outcomes fit, if one does."""
    story = [
        f"fresh inputs, drawn for this grading only (the next one draws others): "
        f"{len(cases)} trees of 3-6 nodes over V = 3-5 tokens, {n // len(cases)} calls each"
    ]
    if all(path == () for s in joint for (path, _) in s):
        kept = sum(
            s.total() * (1 - f.paths.get((), 0.0)) for s, f in zip(joint, cases, strict=True)
        )
        story.append(
            f"path = () on every call; the contract's walk keeps a child on {kept:.0f} of them"
        )
        return story, NEVER_KEEPS_HINT, "never-keeps"
    worst = int(np.argmin([c.p_value for c in comparisons]))
    case, seen = cases[worst], joint[worst]
    story.append(f"the tree that deviates most (tree {worst + 1} of {len(cases)}):")
    story += case.shown()
    observed = path_counts(seen)
    for path, w in sorted(case.paths.items(), key=lambda pw: -pw[1])[:4]:
        story.append(
            f"path {list(path)}: expected {w:.3f}, observed {observed[path] / seen.total():.3f}"
        )
    story.append(f"largest deviations: {comparisons[worst].worst()}")
    best, best_p = "", 1e-4
    for rule, hint in MISTAKES + SLOWER:
        law = rule_law(case.P, case.tree, rule)
        if (
            max(abs(law.get(o, 0.0) - case.law.get(o, 0.0)) for o in set(law) | set(case.law))
            < 1e-9
        ):
            continue  # this mistake changes nothing on this tree
        p = compare(seen, law).p_value
        if p > best_p:
            best, best_p = hint, p
    return story, best or FRESH_FALLBACK, ""


FRESH_FALLBACK = (
    "the walk does not follow the contract's on these trees: at each node try the children in "
    "order, keep x_j with min(1, p(x_j)/q_j(x_j)) (q_j: its law given the earlier siblings), "
    "else p <- norm(max(0, p - q_j)); descend with p <- p_rows[child]; with no child kept, or "
    "at a leaf, sample the current p"
)
