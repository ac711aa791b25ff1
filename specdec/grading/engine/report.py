"""The grade as text (the verdict of each family, one line per law, then the failures in
plain words), as JSON, and as the results.json that Gradescope's autograder reads.

What the submission said (an exception's message, what it returned) reaches these reports cut
and quoted (engine/quoting.py: a message of several lines has each line prefixed with "  > ",
so that none can start a line as "PASS ..." or "RESULT: PASS" does). Each JSON document is
bounded, whatever the submission returned: results.json and the JSON report hold at most
JSON_LIMIT bytes (1 MiB), their longest strings cut, with a note, until they fit.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from specdec.grading.engine.config import FAMILIES, GradingConfig
from specdec.grading.engine.core import ALPHA, Grade, Result
from specdec.grading.engine.quoting import one_line

JSON_LIMIT = 1 << 20  # bytes of results.json and of the JSON report, at most
CUT_NOTE = "\n... (cut here: the whole report is kept under {limit} KiB)"

FAILED_VERDICT = {
    "law": "your verify's output does NOT follow the target's law: it is biased (see below)",
    "rule": "the rule is not the contract's min(1, p/q) (see below)",
    "randomness": "your verify does not take fresh randomness from rng (see below)",
    "in-loop": "inside the reference loop, the output does not follow the target's law",
    "loop": "your loop's output or its rounds do not follow the laws (see below)",
    "cache": "your cache does not keep the contract's state after every call (see below)",
    "sampling": "your distribution differs from the contract's on some logits (see below)",
    "speedup": "your formula or your choice of k differs from the model's (see below)",
    "lookup": "your proposals differ from the contract's, or their q is not the point mass",
    "tree-law": "the emitted tokens do NOT follow the target's law: the walk is biased",
    "tree-rule": "the walk is not the contract's rule (see below)",
    "tree-mask": "your mask lets a node see what it must not, or hides what it must (see below)",
    "tree-positions": "your positions are not length + depth (see below)",
    "tree-compaction": "your kept slots or their moves differ from the reference's (see below)",
    "loop-callables": "your loop's output or its calls do not follow the laws (see below)",
    "batch-positions": "some row's positions are not start + i, or padding's not 0 (see below)",
    "batch-mask": "your mask lets a row see a slot it must not, or hides one (see below)",
    "batch-writes": "some row writes slots other than its real tokens' (see below)",
    "eagle-pairs": "some pair is not (x(t + 1), f(t)), or a cached one is fed again (see below)",
    "eagle-round": "inside a real EAGLE drafter your pairs build another cache (see below)",
}


def family_crash(grade: Grade, name: str):
    """The crash that failed the family `name`, or None: a family fails at its first failed
    check (core.run_families), so that check's crash, if it raised, is the family's."""
    failed = next((r for r in grade.results if r.family == name and r.status == "fail"), None)
    return None if failed is None else failed.crash


def family_verdict(grade: Grade, family) -> str:
    status = grade.family_status(family.name)
    crash = family_crash(grade, family.name) if status == "fail" else None
    if crash is not None:  # headed as what it was, not as a wrong law (the detail is below)
        text = crash.headline() + " (see below)"
    elif family.name in grade.verdicts:
        text = grade.verdicts[family.name]
    elif status == "pass":
        text = family.what
    elif status == "fail":
        text = FAILED_VERDICT.get(family.name, f"{family.what}: no")
    else:
        reasons = {r.reason for r in grade.results if r.family == family.name}
        text = "not run: " + "; ".join(sorted(reasons))
    counted = grade.counted is None or family.name in grade.counted
    mark = {"pass": "PASS", "fail": "FAIL", "not run": " -- "}[status]
    return f"{mark}  {family.name}: {text}" + ("" if counted else " (for information)")


def confinement_line(grade: Grade) -> str:
    """How the worker that ran the submission was held ("" for code run in this process):
    said in every report, so that an instructor sees what a grading could and could not do."""
    sandbox = grade.submission.sandbox
    if sandbox is None:
        return ""
    return f"worker: {sandbox.describe_confinement()}"


def text_report(grade: Grade) -> str:
    sub = grade.submission
    lines = [f"grading {one_line(sub.spec)} as a {sub.kind} ({sub.kind_reason})"]
    lines += [confinement_line(grade)] * bool(confinement_line(grade)) + [""]
    lines += [family_verdict(grade, f) for f in grade.families] + [""]
    width = max(len(r.check.name) for r in grade.results)
    for r in grade.results:
        mark = {"pass": "PASS", "fail": "FAIL", "not run": " -- "}[r.status]
        detail = r.outcome.summary if r.outcome else ("crashed" if r.status == "fail" else "")
        lines.append(
            f"{mark}  {r.check.name:<{width}}  {r.check.what}" + (f": {detail}" * bool(detail))
        )
    passed = sum(r.status == "pass" for r in grade.results)
    reasons = dict.fromkeys(r.reason for r in grade.results if r.status == "not run")
    lines += [""] + [f"-- not run: {reason}" for reason in reasons]
    sampled = any(r.check.sampled for r in grade.results)
    lines += [
        f"{passed} of {len(grade.results)} {'laws' if sampled else 'checks'} passed in "
        f"{grade.seconds:.1f} s. "
        + (
            f"False alarms: correct code fails a family at most {ALPHA:g} of the time "
            f"(exact checks never)."
            if sampled
            else "Every check is exact: correct code never fails one."
        ),
    ]
    for crash in grade.crashes:
        lines += ["", "Your code crashed", "-----------------", crash.describe()]
    failures = [r for r in grade.results if r.status == "fail" and r.outcome is not None]
    if failures:
        lines += ["", "What went wrong", "---------------"]
        for r in failures:
            lines += explain(r)
            lines.append("")
    lines.append("RESULT: " + ("PASS" if grade.passed else "FAIL"))
    return "\n".join(lines)


def explain(r: Result) -> list[str]:
    lines = [f"{r.check.name}: {r.check.what}"]
    lines += ["  " + s.replace("\n", "\n  ") for s in r.outcome.story]
    if r.outcome.hint:
        lines += textwrap.wrap(
            "hint: " + r.outcome.hint, 96, initial_indent="  ", subsequent_indent="    "
        )
    return lines


def result_dict(r: Result) -> dict:
    o = r.outcome
    return {
        "name": r.check.name,
        "family": r.family,
        "law": r.check.what,
        "status": r.status,
        "exact": not r.check.sampled,
        "p_value": None if o is None else o.p_value,
        "threshold": r.threshold,
        "n": 0 if o is None else o.n,
        "summary": r.reason if o is None else o.summary,
        "explanation": [] if o is None else o.story,
        "hint": "" if o is None else o.hint,
        "crashed": r.crash is not None,
        "crash": None if r.crash is None else r.crash.headline(),
        "seconds": round(r.seconds, 3),
    }


def json_report(grade: Grade) -> str:
    return bounded_json(
        {
            "spec": grade.submission.spec,
            "kind": grade.submission.kind,
            "passed": grade.passed,
            "worker": confinement_line(grade)[len("worker: ") :] or None,
            "families": {
                f.name: {
                    "status": grade.family_status(f.name),
                    "counted": grade.counted is None or f.name in grade.counted,
                    "verdict": family_verdict(grade, f)[6:],
                    "crashed": family_crash(grade, f.name) is not None,
                }
                for f in grade.families
            },
            "alpha_per_family": ALPHA,
            "seconds": round(grade.seconds, 2),
            "crash": None if grade.crash is None else grade.crash.describe(),
            "crashes": [c.describe() for c in grade.crashes],
            "laws": [result_dict(r) for r in grade.results],
        },
    )


def gradescope_results(grade: Grade, config: GradingConfig | None = None) -> dict:
    """Gradescope's results.json: one test per family, worth the family's points when every
    check in it passed (a family is scored as a whole), with every law's line and the plain
    words of each failure in its output."""
    config = config or GradingConfig()
    tests = []
    for family in grade.families:
        status = grade.family_status(family.name)
        points = config.points(family.name)
        rows = [r for r in grade.results if r.family == family.name]
        output = [family_verdict(grade, family), ""]
        for r in rows:
            mark = {"pass": "PASS", "fail": "FAIL", "not run": " -- "}[r.status]
            detail = r.outcome.summary if r.outcome else (r.reason or "crashed")
            output.append(f"{mark}  {r.check.name}: {r.check.what}: {detail}")
        for r in rows:
            if r.status == "fail" and r.outcome is not None:
                output += [""] + explain(r)
            elif r.crash is not None:
                output += ["", r.crash.describe()]
        tests.append(
            {
                "name": f"{family.name}: {family.what}",
                "score": points if status == "pass" else 0.0,
                "max_score": points,
                "status": "passed" if status == "pass" else "failed",
                "visibility": config.setting(family.name).visibility,
                "output": "\n".join(output),
            }
        )
    verdicts = [family_verdict(grade, f) for f in grade.families]
    return {
        "score": float(sum(t["score"] for t in tests)),
        "execution_time": round(grade.seconds, 2),
        "output": f"{grade.submission.kind} {one_line(grade.submission.spec)}: "
        + ("every family passed" if grade.passed else "some families failed; see each test")
        + "\n"
        + "\n".join(verdicts)
        + ("\n" + confinement_line(grade)) * bool(confinement_line(grade)),
        "visibility": config.visibility,
        "stdout_visibility": config.stdout_visibility,
        "tests": tests,
    }


def zero_results(reason: str, config: GradingConfig | None = None, kind: str = "verify") -> dict:
    """results.json for a submission that could not be graded at all (a syntax error, no such
    function or file, a timeout): score 0, the reason in plain words, every family at 0."""
    config = config or GradingConfig()
    kind = kind if kind in FAMILIES else "verify"
    tests = [
        {
            "name": name,
            "score": 0.0,
            "max_score": config.points(name),
            "status": "failed",
            "visibility": config.setting(name).visibility,
            "output": f"not graded: {reason}",
        }
        for name in FAMILIES[kind]
    ]
    return {
        "score": 0.0,
        "output": f"Your submission could not be graded, so it scores 0.\n{reason}",
        "visibility": config.visibility,
        "stdout_visibility": config.stdout_visibility,
        "tests": tests,
    }


def write_json(data: dict, path: Path) -> None:
    """results.json (or any report) as JSON of at most JSON_LIMIT bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(bounded_json(data))


def bounded_json(data, limit: int = JSON_LIMIT) -> str:
    """json.dumps(data, indent=2) in at most `limit` bytes: while it is longer, every string
    longer than a cap is cut to it (with a note), the cap halved each time. The reports'
    strings are few (a test's output, a law's story), so one or two rounds do; ASCII
    escapes (json.dumps' default) make a character a byte, at least."""
    text = json.dumps(data, indent=2)
    cap = limit // 2
    while len(text) > limit and cap >= 64:
        data = strings_cut(data, cap, CUT_NOTE.format(limit=limit >> 10))
        text = json.dumps(data, indent=2)
        cap //= 2
    return text


def strings_cut(value, cap: int, note: str):
    """`value` with each string longer than `cap` characters cut to them, and `note` added."""
    if isinstance(value, str):
        return value if len(value) <= cap else value[:cap] + note
    if isinstance(value, dict):
        return {k: strings_cut(v, cap, note) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strings_cut(v, cap, note) for v in value]
    return value


def write_gradescope(grade: Grade, path: Path, config: GradingConfig | None = None) -> None:
    write_json(gradescope_results(grade, config), path)
