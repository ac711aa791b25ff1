"""The grade as text (one line per law, then the failures in plain words), as JSON, and as
the results.json that Gradescope's autograder reads."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from lab.grading.core import ALPHA, Grade, Result


def text_report(grade: Grade) -> str:
    sub = grade.submission
    lines = [f"grading {sub.spec} as a {sub.kind} ({sub.kind_reason})", ""]
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
    lines += [
        f"{passed} of {len(grade.results)} laws passed in {grade.seconds:.1f} s. "
        f"False alarms: a correct {sub.kind} fails a family at most {ALPHA:g} of the time "
        f"(exact checks never).",
    ]
    if grade.crash is not None:
        lines += ["", "Your code crashed", "-----------------", grade.crash.describe()]
    failures = [r for r in grade.results if r.status == "fail" and r.outcome is not None]
    if failures:
        lines += ["", "What went wrong", "---------------"]
        for r in failures:
            lines += [f"{r.check.name}: {r.check.what}"]
            lines += ["  " + s.replace("\n", "\n  ") for s in r.outcome.story]
            if r.outcome.hint:
                lines += textwrap.wrap(
                    "hint: " + r.outcome.hint, 96, initial_indent="  ", subsequent_indent="    "
                )
            lines.append("")
    lines.append("RESULT: " + ("PASS" if grade.passed else "FAIL"))
    return "\n".join(lines)


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
        "seconds": round(r.seconds, 3),
    }


def json_report(grade: Grade) -> str:
    return json.dumps(
        {
            "spec": grade.submission.spec,
            "kind": grade.submission.kind,
            "passed": grade.passed,
            "alpha_per_family": ALPHA,
            "seconds": round(grade.seconds, 2),
            "crash": None if grade.crash is None else grade.crash.describe(),
            "laws": [result_dict(r) for r in grade.results],
        },
        indent=2,
    )


def gradescope_results(grade: Grade) -> dict:
    """Gradescope's results.json: one test per law, 1 point each, with the plain words."""
    tests = []
    for r in grade.results:
        o = r.outcome
        if o is None:
            output = grade.crash.describe() if grade.crash and r.status == "fail" else r.reason
        else:
            output = "\n".join([o.summary, *o.story] + ([f"hint: {o.hint}"] if o.hint else []))
        tests.append(
            {
                "name": f"{r.check.name}: {r.check.what}",
                "score": 1.0 if r.status == "pass" else 0.0,
                "max_score": 1.0,
                "status": "passed" if r.status == "pass" else "failed",
                "output": output,
            }
        )
    return {
        "score": float(sum(t["score"] for t in tests)),
        "execution_time": round(grade.seconds, 2),
        "output": f"{grade.submission.kind} {grade.submission.spec}: "
        + ("all laws passed" if grade.passed else "some laws failed; see each test"),
        "tests": tests,
    }


def write_gradescope(grade: Grade, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(gradescope_results(grade), indent=2))
