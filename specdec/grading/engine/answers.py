"""A submission's answers to an exercise's cases, asked once and judged one by one: what the
exercises whose checks compare each answer with the contract's share (tree_mask, eagle_align,
eagle_block, eagle_tree, eagle_ttt).

`AskedOnce` holds the answers of the submission being graded, so that the checks of every
family ask each case once; `ask_cases` asks the missing ones, a crash named by its case;
`give_hint` gives a crash the hint its exercise finds for the call that raised; `every_wrong`
widens a group's wrong answers to all the exercise's cases (a hint's mistake must explain
them all); `group_outcome` is a check's verdict on a group of cases: the smallest wrong
case's story, how many were wrong, and a hint.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from specdec.grading.engine.core import Outcome
from specdec.grading.engine.submission import Submission, SubmissionCrash, call_each_safely


class AskedOnce:
    """`answers(sub, cases) -> {case: answer}`, each case asked once per submission: the
    missing ones in one call of `ask(sub, cases) -> [answer]`, the rest from what the last
    submission graded answered. `key()` names what else the cases' answers depend on (the
    grading's secret): a new key, like a new submission, drops what is held."""

    def __init__(
        self, ask: Callable[[Submission, list], list], key: Callable[[], Hashable] = lambda: None
    ) -> None:
        self.ask, self.key = ask, key
        self.held: dict = {}
        self.holder: tuple = (None, None)  # (the submission, its key)

    def __call__(self, sub: Submission, cases: Iterable) -> dict:
        cases = tuple(cases)
        key = self.key()
        if self.holder[0] is not sub or self.holder[1] != key:
            self.held.clear()
            self.holder = (sub, key)
        missing = list(dict.fromkeys(c for c in cases if c not in self.held))
        if missing:
            self.held.update(zip(missing, self.ask(sub, missing), strict=True))
        return {case: self.held[case] for case in cases}


def ask_cases(sub: Submission, cases: list, shown_of: Callable, name: str, fresh: Callable) -> list:
    """The submission's results on `cases`, called on each one's `arguments()` (in one
    request when it runs in a worker; here on `fresh(arguments)`); a raise is a crash on the
    case that raised: its inputs `shown_of(case)`, its call the case's `describe()`."""
    return call_each_safely(
        sub,
        [c.arguments() for c in cases],
        (),
        lambda i: shown_of(cases[i]),
        name,
        lambda i: cases[i].describe(),
        fresh,
    )


def give_hint(
    crash: SubmissionCrash,
    calls: list,
    describe: Callable[[Any], str],
    hint: Callable[[Any, BaseException], str],
) -> None:
    """Give `crash` the hint `hint(call, error)` finds for the call that raised (the one whose
    line, `describe(call)`, it names; else the first), unless it holds one already. None for a
    NotImplementedError: nothing is written yet to guess a mistake from."""
    if not isinstance(crash.error, NotImplementedError) and not crash.hint:
        failing = next((c for c in calls if crash.call == describe(c)), calls[0])
        crash.hint = hint(failing, crash.error)


def every_wrong(wrong: dict, all_wrong: Callable[[], dict]) -> dict:
    """A group's wrong answers and `all_wrong()`, every case of the exercise the submission
    gets wrong; the group's alone where it crashes (or breaks the contract) on another case."""
    try:
        return {**all_wrong(), **wrong}
    except SubmissionCrash:
        return wrong


def cases_text(n: int) -> str:
    return f"{n} case{'s' * (n > 1)}"


def group_outcome(
    seen: dict,
    wrong: dict,
    right: str,
    story: Callable[[Any, Any], list[str]],
    hint: Callable[[Any, dict], str],
) -> Outcome:
    """A check's verdict on a group of cases, answered as `seen` holds, `wrong` the answers
    that differ from the contract's. None: it passes, summed up by `right` (its `{cases}` is
    "n cases"). Else it fails on the smallest wrong case (its `size()`): the story opens on
    its call, then `story(case, answer)`, then how many were wrong; the hint is `hint(case,
    wrong)`."""
    n = len(seen)
    if not wrong:
        return Outcome(True, right.format(cases=cases_text(n)), n=n)
    case = min(wrong, key=lambda c: c.size())
    lines = [f"the smallest wrong case: {case.describe()}", *story(case, wrong[case])]
    if len(wrong) > 1:
        lines.append(f"({len(wrong)} of the {n} cases are wrong)")
    summary = f"{len(wrong)} of {cases_text(n)} differ"
    return Outcome(False, summary, lines, hint(case, wrong), n=n)
