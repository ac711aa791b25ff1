"""The checks of a submitted tree verification, `verify_tree(p_rows, tree, rng) -> (path, token)`.

The contract (reference/tree/rule.py, docs/algorithm.md "Tree drafts"): at node s, with p the
target's row after the path to s, try the children x_1, x_2, .. in order, each drawn from
q_j (its law given the earlier siblings); keep x_j with min(1, p(x_j) / q_j(x_j)) and descend
into it (p <- its own row); on a refusal p <- norm(max(0, p - q_j)); when every child is
refused, or at a leaf, emit one sample of the current p.

Two families, each scored on its own (engine/core.py):

* tree-law: do the emitted tokens (the accepted path's tokens, then the token) follow the
  target's law? True of every exact rule, so nothing here names the contract's decisions,
  except the gate: a walk that never keeps a child is exact too, and fails here only at
  tree/keeps-children (fresh trees where keeping the first child is free, fresh.py):
  1. exact cases: one-hot target rows (greedy), where the emitted tokens must be a prefix of
     the target's own greedy text, and soft rows with zeros, where every emitted token must
     have target probability > 0 after the ones before it;
  2. sampled: trees drawn here from q (siblings sampled i.i.d., drawn without replacement, or
     the draft's top-2 as point masses; V = 4-5, 5-6 nodes, depth 2), the emitted tokens
     completed by the target's own samples to depth + 1 tokens: they must follow the
     target's joint law of depth + 1 tokens (chi-square; the law is the target's, by
     enumeration, and knows nothing of acceptance or residuals).
* tree-rule: is the rule the contract's? The greedy walk (one-hot rows: the contract's
  (path, token) is certain), then the first level's acceptance on the sampled cases, against
  the rate the contract's rule reaches, enumerated over every tree the drafter can build
  (the shown examples); then fresh trees and rows drawn for this grading alone (fresh.py),
  the law of the path and of (path, token) against the contract's walk on each. An exact
  rule that keeps fewer candidates (keep x with p(x) and resample p without x; try the first
  child only) passes the law and fails here, and is reported as exact.

The trees of the sampled cases and every fresh input come from the grading's secret
(engine/secret.py); the shown examples' tables and exact trees are fixed.

A failure is explained on its case, and the hint is read from the evidence: the submission's
outcomes are held against the law of each usual mistake (`Rule` in walk.py, the rule
with one switch turned), and the mistake they fit is named. The sampled cases are built in
cases.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache

import numpy as np

from specdec.grading.engine.core import Check, Family, Outcome, Runs
from specdec.grading.engine.laws import Context, Law, binomial_p, compare
from specdec.grading.engine.submission import Submission
from specdec.grading.exercises.tree.cases import (
    SAMPLED_CASE,
    TREE_CASES,
    WITHOUT_CASE,
    TreeCase,
    describe_case,
    rule_laws,
    runs_of,
    target_law,
)
from specdec.grading.exercises.tree.fresh import (
    NEVER_KEEPS_HINT,
    fresh_rule_checks,
    keeps_children_check,
)
from specdec.grading.exercises.tree.walk import (
    CONTRACT,
    MISTAKES,
    ROOT,
    SAMPLED,
    SLOWER,
    WITHOUT_REPLACEMENT,
    Rule,
    call_tree_each,
    emitted,
    make_tree,
    rule_law,
)

# --------------------------------------------------------------------------------------------
# 1. Exact cases: greedy rows (a prefix of the target's greedy text) and zeros (support)
# --------------------------------------------------------------------------------------------

CALLS_PER_EXACT_CASE = 60
V_EXACT = 5


@dataclass(frozen=True)
class ExactCase:
    name: str
    what: str
    tree: object  # reference.tree.Tree
    P: np.ndarray  # [n, V] the target's row after the path to each node
    greedy: Context  # one-hot rows: the target's own greedy tokens after the root ("" else)


def one_hot(*tokens: int) -> np.ndarray:
    return np.eye(V_EXACT)[list(tokens)]


@cache
def exact_cases() -> dict[str, ExactCase]:
    soft = np.array([0.1, 0.4, 0.3, 0.1, 0.1])
    flat = np.full(V_EXACT, 0.2)
    # the greedy text after the root is 2 0 3: the target's first choice is the root's
    # SECOND child (node 2), whose child (node 4, a leaf) is its second choice
    descend = ExactCase(
        "greedy-descend",
        "one-hot target rows, the target's path is in the tree down to a leaf",
        make_tree(
            [4, 1, 2, 3, 0],
            [-1, 0, 0, 1, 2],
            [np.zeros(V_EXACT), soft, soft, flat, [0.3, 0.1, 0.1, 0.1, 0.4]],
            (ROOT,) + (SAMPLED,) * 4,
        ),
        one_hot(2, 3, 0, 4, 3),
        (2, 0, 3),
    )
    # the target takes node 1 (token 1), then 4, which neither of node 1's children is
    below = ExactCase(
        "greedy-refuse-below",
        "one-hot target rows, every child of the accepted node is refused",
        make_tree(
            [0, 1, 2, 3],
            [-1, 0, 1, 1],
            [np.zeros(V_EXACT), [0.2, 0.5, 0.1, 0.1, 0.1]] + [[0.1, 0.1, 0.4, 0.3, 0.1]] * 2,
            (ROOT,) + (SAMPLED,) * 3,
        ),
        one_hot(1, 4, 0, 0),
        (1, 4),
    )
    # soft rows with zeros: tokens 0 and 3 are impossible at the root, 1, 2 and 4 after node 3
    q_root = np.array([0.3, 0.2, 0.1, 0.3, 0.1])
    zeros = ExactCase(
        "zero-mass",
        "target rows with zeros, siblings without replacement: no impossible token comes out",
        make_tree(
            [2, 0, 3, 1, 2],
            [-1, 0, 0, 0, 3],
            [np.zeros(V_EXACT), q_root, q_root, q_root, [0.1, 0.1, 0.6, 0.1, 0.1]],
            (ROOT,) + (WITHOUT_REPLACEMENT,) * 3 + (SAMPLED,),
        ),
        np.array(
            [
                [0.0, 0.5, 0.3, 0.0, 0.2],
                [0.2, 0.2, 0.2, 0.2, 0.2],
                [0.2, 0.2, 0.2, 0.2, 0.2],
                [0.4, 0.0, 0.0, 0.6, 0.0],
                [0.2, 0.2, 0.2, 0.2, 0.2],
            ]
        ),
        (),
    )
    return {c.name: c for c in (descend, below, zeros)}


def possible(case: ExactCase, tokens: Context, path: tuple) -> bool:
    """Could the target emit `tokens` here? Greedy: a prefix of its text; else every token
    has probability > 0 after the ones before it (the rows along the path)."""
    if case.greedy:
        return tokens == case.greedy[: len(tokens)]
    rows = [0, *path]  # token i is scored by the row of the i-th node on the walk
    return all(case.P[r][t] > 0 for r, t in zip(rows, tokens, strict=True))


def exact_story(case: ExactCase, seen: Counter, bad: tuple) -> list[str]:
    tree = case.tree
    with np.printoptions(precision=2, suppress=True):
        story = [
            f"tree: parents {tree.parents.tolist()}, tokens {tree.tokens.tolist()}, draws "
            f"{list(tree.draws[1:])}",
            f"p_rows (row i = the target after the path to node i):\n{case.P}",
        ]
    if case.greedy:
        story.append(
            f"the target's greedy text after the root is {list(case.greedy)}: every emitted "
            f"sequence must be a prefix of it"
        )
    else:
        story.append("every emitted token must have target probability > 0 where it is emitted")
    (path, token) = bad
    story.append(
        f"observed path {list(path)}, token {token}: emitted {list(emitted(tree, path, token))}, "
        f"which the target cannot produce ({seen[bad]} of {seen.total()} calls)"
    )
    return story


def likeliest(case: ExactCase, seen: Counter, rules) -> Rule | None:
    """Of `rules` ((rule, hint) pairs), the rule under which the observed outcomes are the
    most likely (every one of them possible), or None if no rule allows them all."""
    best, best_score = None, -np.inf
    for rule, _ in rules:
        law = rule_law(case.P, case.tree, rule)
        if any(law.get(o, 0.0) <= 0 for o in seen):
            continue
        score = sum(c * np.log(law[o]) for o, c in seen.items())
        if score > best_score:
            best, best_score = rule, score
    return best


def exact_check(name: str) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        case = exact_cases()[name]
        rng = np.random.default_rng(8)
        seen = Counter(call_tree_each(sub, [(case.P, case.tree)] * CALLS_PER_EXACT_CASE, rng))
        wrong = Counter(
            {o: c for o, c in seen.items() if not possible(case, emitted(case.tree, *o), o[0])}
        )
        if not wrong:
            return Outcome(
                True,
                f"only tokens the target can emit ({len(seen)} distinct outcome"
                + ("s)" if len(seen) > 1 else ")"),
                n=seen.total(),
            )
        bad = wrong.most_common(1)[0][0]
        mistake = likeliest(case, seen, MISTAKES)
        hint = dict(MISTAKES)[mistake] if mistake else EXACT_FALLBACK
        summary = (
            f"emitted {list(emitted(case.tree, *bad))} ({wrong[bad]} of {seen.total()} calls), "
            f"which the target cannot produce"
        )
        return Outcome(False, summary, exact_story(case, seen, bad), hint, n=seen.total())

    return Check(f"tree/{name}", exact_cases()[name].what, False, run)


EXACT_FALLBACK = (
    "the emitted tokens include one the target gives probability 0: at each node judge the "
    "children against the current p (the node's row, then the residual after each refusal), "
    "descend with p <- p_rows[child], and sample the last token from the current p"
)


def greedy_walk_check() -> Check:
    """The rule family's exact case: with one-hot rows the contract's walk is certain."""

    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        total = 0
        for name in ("greedy-descend", "greedy-refuse-below"):
            case = exact_cases()[name]
            ((expected, _),) = rule_law(case.P, case.tree).items()
            rng = np.random.default_rng(9)
            seen = Counter(call_tree_each(sub, [(case.P, case.tree)] * 20, rng))
            total += seen.total()
            if set(seen) == {expected}:
                continue
            got = max((o for o in seen if o != expected), key=seen.get)
            story = [
                f"the {name} case (one-hot target rows): the contract's walk follows the "
                f"target's argmax as far as the tree has it: path {list(expected[0])}, token "
                f"{expected[1]}",
                f"observed path {list(got[0])}, token {got[1]} ({seen[got]} of {seen.total()})",
            ]
            mistake = likeliest(case, seen, MISTAKES + SLOWER)
            if mistake is None:
                hint = "with one-hot rows the walk keeps exactly the children the target picks"
            elif mistake in dict(SLOWER):
                hint = (
                    f"your walk stops before the target's path ends although the tree holds "
                    f"it, like {dict(SLOWER)[mistake]}: try every child in order, each "
                    f"against the residual the refused ones left"
                )
            else:
                hint = dict(MISTAKES)[mistake]
            return Outcome(
                False,
                f"on {name}, path {list(got[0])} and token {got[1]} where the contract's walk "
                f"gives path {list(expected[0])} and token {expected[1]}",
                story,
                hint,
                n=total,
            )
        return Outcome(True, "the target's greedy path and token, every call", n=total)

    return Check(
        "tree-rule/greedy-walk",
        "one-hot rows: the walk follows the target's argmax as far as the tree has it",
        False,
        run,
    )


# --------------------------------------------------------------------------------------------
# 2. Sampled: trees drawn from q, the emitted tokens completed by the target
# --------------------------------------------------------------------------------------------


def law_check(case: TreeCase, runs: Runs) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        tokens = Counter()
        for (seq, _), c in counts.items():
            tokens[seq] += c
        law = target_law(case)
        cmp = compare(tokens, law)
        ok = cmp.p_value >= threshold
        summary = f"{len(law)} sequences of {case.depth + 1} tokens, p = {cmp.p_value:.2g}"
        if ok:
            return Outcome(True, summary, p_value=cmp.p_value, n=n)
        first, first_law = Counter(), {}
        for seq, c in tokens.items():
            first[seq[0]] += c
        for seq, w in law.items():
            first_law[seq[0]] = first_law.get(seq[0], 0.0) + w
        first_ok = compare(first, first_law).p_value >= 1e-6
        story = [
            f"{n} rounds: {describe_case(case, True)}; the emitted tokens (path + token), "
            f"completed by the target's own samples to {case.depth + 1} tokens, against the "
            f"target's law",
            f"largest deviations: {cmp.worst()}; total variation {cmp.distance:.3f}",
            "the first token's law is "
            + ("right: the error is below the first level" if first_ok else "already off"),
        ]
        return Outcome(False, summary, story, sampled_hint(case, tokens), cmp.p_value, n)

    return Check(f"tree/{case.name}", f"{describe_case(case)}: the target's law", True, run)


def sampled_hint(case: TreeCase, tokens: Counter) -> str:
    """The mistake whose law the sample fits best (p > 1e-4), else a plain statement."""
    best, best_p = None, 1e-4
    correct = rule_laws(case, CONTRACT)[0]
    for rule, hint in MISTAKES:
        law = rule_laws(case, rule)[0]
        if max_gap(law, correct) < 1e-9:
            continue  # this mistake changes nothing on these trees
        p = compare(tokens, law).p_value
        if p > best_p:
            best, best_p = hint, p
    return best or (
        "the emitted tokens do not follow the target's law. At each node: try the children in "
        "order, keep x_j with min(1, p(x_j)/q_j(x_j)) (q_j: its law given the earlier "
        "siblings), else p <- norm(max(0, p - q_j)); descend with p <- p_rows[child]; with no "
        "child kept, or at a leaf, sample the current p"
    )


def max_gap(a: Law, b: Law) -> float:
    return max(abs(a.get(o, 0.0) - b.get(o, 0.0)) for o in set(a) | set(b))


# --------------------------------------------------------------------------------------------
# 3. The rule: the first level's acceptance against the contract's
# --------------------------------------------------------------------------------------------


def acceptance_check(case: TreeCase, runs: Runs) -> Check:
    def run(sub: Submission, threshold: float, look: int) -> Outcome:
        counts = runs.counts(sub, look)
        n = counts.total()
        kept = sum(c for (_, length), c in counts.items() if length > 0)
        want = rule_laws(case, CONTRACT)[1]
        p = binomial_p(kept, n, want)
        ok = p >= threshold
        rate = kept / n
        summary = f"first level kept {rate:.3f} (the contract's rule: {want:.3f}), p = {p:.2g}"
        if ok:
            return Outcome(True, summary, p_value=p, n=n, measure=rate)
        tokens = Counter()
        for (seq, _), c in counts.items():
            tokens[seq] += c
        exact = compare(tokens, target_law(case)).p_value >= 1e-3
        story = [
            f"{n} rounds: {describe_case(case, True)}",
            f"some child of the root kept in {rate:.3f} of the rounds; the contract's rule keeps "
            f"{want:.3f} (enumerated over every tree the drafter can build)",
            "the emitted tokens "
            + ("follow the target's law on these runs" if exact else "are biased as well"),
        ]
        return Outcome(
            False, summary, story, rule_hint(case, rate, want, exact, n), p, n, measure=rate
        )

    return Check(
        f"tree-rule/{case.name}-acceptance",
        f"{describe_case(case)}: first-level acceptance",
        True,
        run,
    )


def rule_hint(case: TreeCase, rate: float, want: float, exact: bool, n: int) -> str:
    sd = np.sqrt(want * (1 - want) / n)
    if exact and rate < want:
        named = next(
            (h for rule, h in SLOWER if abs(rule_laws(case, rule)[1] - rate) < 4 * sd),
            "a rule that keeps fewer candidates",
        )
        return (
            f"your walk looks exact but keeps fewer candidates than it could ({rate:.3f} "
            f"instead of {want:.3f}), as {named} does. The contract's rule keeps x_j with "
            f"min(1, p(x_j)/q_j(x_j)), p being the residual the earlier siblings left: at each "
            f"sibling the most an exact one-candidate step can keep, sum(min(p, q_j))"
        )
    if rate > want:
        return (
            f"the first level keeps a child in {rate:.3f} of the rounds, more than the "
            f"{want:.3f} that min(1, p/q) allows: check q_j (siblings drawn without "
            f"replacement: q minus the earlier siblings' tokens, renormalised) and the residual "
            f"update between siblings"
        )
    return (
        f"the first level keeps a child in {rate:.3f} of the rounds instead of {want:.3f}: "
        f"keep x_j with min(1, p(x_j)/q_j(x_j)) against the residual the earlier siblings left"
    )


# --------------------------------------------------------------------------------------------
# The families, and the verdict read from both
# --------------------------------------------------------------------------------------------


def tree_families(policy: str = "shrink") -> list[Family]:
    # `policy` is a loop's round policy: a single tree verification has none
    runs = {case: runs_of(case) for case in TREE_CASES}  # each case's runs, for both families
    law = [exact_check(name) for name in exact_cases()] + [keeps_children_check()]
    law += [law_check(c, runs[c]) for c in TREE_CASES]
    rule = [greedy_walk_check()]
    rule += [acceptance_check(c, runs[c]) for c in (SAMPLED_CASE, WITHOUT_CASE)]
    rule += fresh_rule_checks()
    return [
        Family("tree-law", "the emitted tokens follow the target's law", law),
        Family(
            "tree-rule",
            "the rule is the contract's: min(1, p/q) against each sibling's residual",
            rule,
        ),
    ]


def revise_tree_hints(results: dict) -> dict[str, str]:
    """{check name: Result} -> {family: verdict line}: an exact rule that keeps fewer
    candidates is told so (the tree-law family passed, the tree-rule family did not)."""
    law = [r for r in results.values() if r.family == "tree-law"]
    rule = [r for r in results.values() if r.family == "tree-rule"]
    failed = [r for r in results.values() if r.status == "fail" and r.outcome is not None]
    if any(r.outcome.pattern == "never-keeps" for r in failed):  # the gate, or a fresh tree
        for r in failed:
            if r.family == "tree-rule" and r.check.name == "tree-rule/greedy-walk":
                r.outcome.hint = NEVER_KEEPS_HINT  # (its one-hot rows: keeping is certain)
        return {
            "tree-law": "your walk never keeps a child, even where keeping is free: an exact "
            "answer, but no verification (see below)"
        }
    if not law or not rule or any(r.status != "pass" for r in law):
        return {}
    want = rule_laws(SAMPLED_CASE, CONTRACT)[1]
    acceptance = results.get(f"tree-rule/{SAMPLED_CASE.name}-acceptance")
    rate = acceptance.outcome.measure if acceptance and acceptance.outcome else None
    failed = next((r for r in rule if r.status == "fail"), None)
    if failed is None:
        return {"tree-rule": f"the contract's rule: the first level kept {rate:.3f} ({want:.3f})"}
    if rate is not None and failed is acceptance:
        measured = (
            f"the first level kept {rate:.3f} where min(1, p/q) against the residuals keeps "
            f"{want:.3f} ({rate / want:.0%} of it)"
        )
    elif failed.outcome is not None:
        measured = failed.outcome.summary
    else:
        measured = "it crashed on the rule's cases"
    return {
        "tree-rule": (
            f"exact, but not the contract's rule: your output follows the target's law, "
            f"but {measured}"
        )
    }
