"""`specdec grade-class FOLDER`: a whole class graded at once, into a CSV and a markdown table.

    specdec grade-class submissions/ --exercise verify --jobs 2 --out grades/
    python -m specdec.grading.delivery.classroom submissions/ ...  # the same, without the CLI

FOLDER holds one sub-folder per student (the student is the folder's name; the exercise's
file is found in it as Gradescope's run finds it) or one .py file per student (the student is
the file's stem), or both. Each submission is graded by `python -m specdec.grading` in a child
process of its own, with a time limit (gradescope.py's runner, beside this file), `--jobs` at a
time. A submission that is missing, does not load, crashes the grader or runs past the limit
still gets its row: 0 and the reason.

The output goes to `--out` (default ./class-grades): grades.csv and grades.md, one row per
student (total score, score per family, the first failure in a few words, seconds), and a
summary line. Grades are students' data: the default folder is refused when it would land
inside the repository's tree, where it could be committed; an explicit --out is obeyed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import queue
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

from specdec.grading.delivery.gradescope import (
    SOURCE,
    failure_reason,
    find_submission,
    results_of,
    run_grader,
    stop_running,
)
from specdec.grading.engine.config import FAMILIES, GradingConfig, load_config
from specdec.grading.engine.quoting import one_line
from specdec.grading.engine.report import zero_results
from specdec.grading.engine.submission import file_problem
from specdec.grading.engine.worker_setup import not_dumpable, stop_on_sigterm
from specdec.grading.exercises import KINDS, exercise, kind_of_name

DEFAULT_OUT = "class-grades"
SKIPPED = ("__MACOSX", "__pycache__")  # folders an unzipped upload or Python leaves behind
FAILURE_WIDTH = 120  # characters of the first failure kept in the table


@dataclass(frozen=True)
class Entry:
    """One student's submission as found in the class folder."""

    student: str  # the sub-folder's name or the file's stem
    path: Path  # a folder (the exercise's file is looked for in it) or the .py file itself


@dataclass(frozen=True)
class Row:
    """One student's line of the table."""

    student: str
    score: float
    max_score: float
    families: dict[str, float]  # family -> points earned
    passed: bool  # every counted family passed
    graded: bool  # False: missing, not loading, crashed or timed out (score 0, `failure` why)
    failure: str  # the first failed check and the first line of its reason ("" if passed)
    seconds: float


# --------------------------------------------------------------------------------------------
# The class folder
# --------------------------------------------------------------------------------------------


def find_entries(folder: Path) -> list[Entry]:
    """Every student's submission in `folder`, by name; ValueError when there is none.

    A symbolic link (to a file or a folder) is a student's entry too, so that the student
    gets a row: 0, and that a link is not graded (submission_file refuses it unread)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder (give the folder of the class's submissions)")
    entries: dict[str, Entry] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name in SKIPPED:
            continue
        if not (path.is_dir() or path.suffix == ".py"):
            continue  # a stray file (a zip, a CSV of an earlier run): not a submission
        student = path.name if path.is_dir() else path.stem
        if student in entries:
            raise ValueError(
                f"{folder}: student {student!r} has both a folder and a file "
                f"({entries[student].path.name} and {path.name}); keep one of them"
            )
        entries[student] = Entry(student, path)
    if not entries:
        raise ValueError(
            f"{folder}: no submissions found; expected one sub-folder per student or one .py "
            f"file per student"
        )
    return list(entries.values())


def submission_file(entry: Entry, config: GradingConfig) -> tuple[Path | None, str]:
    """(the file to grade, a note) or (None, why there is none): the file itself, or the one
    found in the student's folder (gradescope.find_submission). A link, at either level, is
    refused before anything reads it."""
    if entry.path.is_symlink() or not entry.path.is_dir():
        refused = file_problem(entry.path)
        return (None, refused) if refused else (entry.path, "")
    return find_submission(entry.path, config)


def class_config(config: GradingConfig, kind: str | None, timeout_s: float | None):
    """The config with the exercise's file, function and kind (the registry's, when `kind`
    is given) and the time limit; an 'auto' kind is read from the function's name."""
    if kind is not None:
        chosen = exercise(kind)
        config = replace(
            config, submission_file=chosen.skeleton, function=chosen.function, kind=chosen.kind
        )
    if config.kind == "auto":
        config = replace(config, kind=kind_of_name(config.function) or "auto")
    if timeout_s is not None:
        if timeout_s <= 0:
            raise ValueError(f"--timeout must be > 0 seconds, got {timeout_s:g}")
        config = replace(config, timeout_s=timeout_s)
    return config


def check_out(out: str | None, folder: Path) -> Path:
    """The output folder: --out as given, or ./class-grades unless that is inside the
    repository (grades are students' data, not to be committed by accident)."""
    chosen = Path(out if out is not None else DEFAULT_OUT).resolve()
    if chosen.is_relative_to(Path(folder).resolve()):
        raise ValueError(
            f"--out {chosen} is inside the submissions folder {folder}: the next run would "
            f"grade it as a student; choose a folder outside it"
        )
    if out is None and chosen.is_relative_to(SOURCE):
        raise ValueError(
            f"the default output ./{DEFAULT_OUT} would be inside the repository ({SOURCE}), "
            f"where students' grades could be committed by accident; pass --out DIR (outside "
            f"the repository, or inside it on purpose)"
        )
    return chosen


# --------------------------------------------------------------------------------------------
# Grading
# --------------------------------------------------------------------------------------------


def grade_entry(
    entry: Entry, config: GradingConfig, config_file: Path | None, slots: queue.Queue | None = None
) -> Row:
    """Grade one student in a child process; a row whatever happens. `slots` hands out the
    numbers of the concurrent gradings (their workers run as different users under root)."""
    slot = slots.get() if slots is not None else 0
    try:
        return grade_in_slot(entry, config, config_file, slot)
    finally:
        if slots is not None:
            slots.put(slot)


def grade_in_slot(entry: Entry, config: GradingConfig, config_file: Path | None, slot: int) -> Row:
    start = time.perf_counter()
    file, note = submission_file(entry, config)
    if file is None:
        results = zero_results(note, config, config.kind)
        return row_of(entry.student, results, None, note, time.perf_counter() - start, False)
    spec = f"{file.resolve()}:{config.function}"
    child = run_grader(
        spec, config.kind, config.policy, config_file, config.timeout_s, ("--json",), slot=slot
    )
    reason = failure_reason(child)
    report = read_report(child.stdout) if reason is None else None
    if reason is not None:  # the spec is the student's own file: in the table, it is noise
        reason = reason.replace(f"{spec!r}: ", "")
    if reason is None and report is None:
        reason = "the grader gave a score but its report could not be read; grade it alone"
    results = results_of(child, config, note)
    seconds = time.perf_counter() - start
    return row_of(entry.student, results, report, reason, seconds, child.results is not None)


def read_report(stdout: str) -> dict | None:
    # the child's stdout holds only its JSON report (what the submission prints goes to stderr)
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        return None


def row_of(
    student: str,
    results: dict,
    report: dict | None,
    reason: str | None,
    seconds: float,
    graded: bool,
) -> Row:
    """A row from Gradescope's results (the scores) and the JSON report (the failures); no
    report: `reason` says why (not graded, or a grade whose report could not be read)."""
    families = {t["name"].split(":")[0]: float(t["score"]) for t in results["tests"]}
    max_score = float(sum(t["max_score"] for t in results["tests"]))
    if report is None:
        failure = first_line(reason or "not graded, and no reason given")
    else:
        failure = first_failure(report)
    passed = report is not None and bool(report["passed"])
    score = float(results["score"])
    return Row(student, score, max_score, families, passed, graded, failure, seconds)


def first_failure(report: dict) -> str:
    """'check/name: the first line of what it found' for the first failed check ('' if none)."""
    failed = [law for law in report["laws"] if law["status"] == "fail"]
    if not failed:
        return ""
    law = failed[0]
    if law.get("crash"):  # what was raised and the student's file and line
        return f"{law['name']}: {law['crash']}"
    if law["crashed"] and report.get("crash"):
        return f"{law['name']}: {first_line(report['crash'])}"
    return f"{law['name']}: {first_line(law['summary'] or 'failed')}"


def first_line(text: str) -> str:
    # cut before it is split: a reason may be megabytes of one line
    text = text[: FAILURE_WIDTH * 4].strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= FAILURE_WIDTH else line[: FAILURE_WIDTH - 3] + "..."


@dataclass(frozen=True)
class ClassGrades:
    rows: list[Row]  # by student name
    families: tuple[str, ...]  # the table's family columns, in report order
    points: dict[str, float]  # family -> its points
    seconds: float  # wall time of the whole class
    jobs: int


def grade_class(
    entries: list[Entry],
    config: GradingConfig,
    config_file: Path | None,
    jobs: int,
    progress=None,
) -> ClassGrades:
    """Grade every entry, `jobs` children at a time; `progress(done, total, row)` after each.

    Threads only wait here: each grading runs in its own process (one BLAS thread), so jobs
    = cores keeps every core busy without two gradings fighting over one."""
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    start = time.perf_counter()
    rows: list[Row] = []
    slots: queue.Queue = queue.Queue()
    for slot in range(jobs):
        slots.put(slot)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(grade_entry, e, config, config_file, slots) for e in entries]
        try:
            for future in as_completed(futures):
                rows.append(future.result())
                if progress:
                    progress(len(rows), len(entries), rows[-1])
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            stop_running()
            raise
    families = FAMILIES.get(config.kind) or tuple(
        dict.fromkeys(f for r in rows for f in r.families)
    )
    points = {f: config.points(f) for f in families}
    rows.sort(key=lambda r: r.student)
    return ClassGrades(rows, tuple(families), points, time.perf_counter() - start, jobs)


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


def csv_text(grades: ClassGrades) -> str:
    """grades.csv: one line per student, each cell one line and bounded (the first failure
    is FAILURE_WIDTH characters at most, a name 100), so at most a few hundred bytes a row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["student", "score", "max_score", *grades.families, "passed", "first_failure", "seconds"]
    )
    for r in grades.rows:
        writer.writerow(
            [
                one_line(r.student, 100),
                f"{r.score:g}",
                f"{r.max_score:g}",
                *(f"{r.families.get(f, 0.0):g}" for f in grades.families),
                "yes" if r.passed else "no",
                first_line(r.failure),
                f"{r.seconds:.1f}",
            ]
        )
    return out.getvalue()


def markdown_table(grades: ClassGrades) -> str:
    total = sum(grades.points.values())
    head = ["student", f"score /{total:g}"]
    head += [f"{f} /{grades.points[f]:g}" for f in grades.families]
    head += ["first failure", "seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in grades.rows:
        cells = [one_line(r.student, 100), f"{r.score:g}"]
        cells += [f"{r.families.get(f, 0.0):g}" for f in grades.families]
        cells += [first_line(r.failure) or "passed", f"{r.seconds:.1f}"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def summary_line(grades: ClassGrades) -> str:
    rows = grades.rows
    passed = sum(r.passed for r in rows)
    ungraded = sum(not r.graded for r in rows)
    total = sum(grades.points.values())
    mean = statistics.fmean(r.score for r in rows)
    return (
        f"{len(rows)} graded, {passed} passed, mean score {mean:.2f} of {total:g}, wall time "
        f"{grades.seconds:.1f} s with {grades.jobs} jobs ({ungraded} not gradable, scored 0: "
        f"missing, not loading, crashed or timed out)"
    )


def write_outputs(grades: ClassGrades, out: Path) -> tuple[Path, Path]:
    """grades.csv and grades.md in `out` (replacing an earlier run's)."""
    out.mkdir(parents=True, exist_ok=True)
    table, sheet = out / "grades.md", out / "grades.csv"
    sheet.write_text(csv_text(grades))
    table.write_text(f"{markdown_table(grades)}\n\n{summary_line(grades)}\n")
    return sheet, table


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def add_class_parser(sub) -> None:
    """Add the `grade-class` subcommand to the `specdec` parser's subparsers."""
    parser = sub.add_parser(
        "grade-class",
        help="grade a folder of submissions at once: a CSV and a markdown table",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "folder",
        metavar="FOLDER",
        help="one sub-folder per student, or one .py file per student (the student's name "
        "is the folder's or the file's stem)",
    )
    parser.add_argument(
        "--exercise",
        choices=KINDS,
        default=None,
        help="the exercise (sets the file looked for in a student's folder, the function and "
        "the kind; default: the config's, which are verify's unless it says otherwise)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE.toml",
        help="the instructor's settings (specdec/grading/grading.toml's keys: points, the rule, "
        "timeout_s, submission_file, function, kind)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="submissions graded at once, each in its own process (default: the cores, "
        "%(default)s here)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="stop one submission's grading after S seconds and score it 0 (default: the "
        "config's timeout_s; 300 without --config)",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help=f"where grades.csv and grades.md go (default: ./{DEFAULT_OUT}, refused inside "
        "the repository)",
    )
    # `specdec` holds BLAS to args.threads around every command; this process only waits
    # (each child grades with one thread)
    parser.set_defaults(func=cmd_grade_class, threads=1)


def exposure_warning(folder: Path) -> str:
    """A warning when the workers could read the class's submissions: as your own user they
    can (engine/sandbox.py); as root they run as other users, who can if the folder lets anyone
    in."""
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return (
            "note: the students' code runs as you, so it can read this folder (other students' "
            "files included); grade an untrusted class as root in a container (docs/oracle.md)"
        )
    folder = folder.resolve()
    reachable = all(p.stat().st_mode & 0o001 for p in folder.parents)
    if reachable and folder.stat().st_mode & 0o005:
        return (
            f"warning: {folder} can be read by any user, so each student's code could read the "
            f"others' files: chmod -R go-rwx {folder}"
        )
    return ""


def cmd_grade_class(args) -> int:
    config = class_config(load_config(args.config), args.exercise, args.timeout)
    config_file = Path(args.config).resolve() if args.config else None  # for the children
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    entries = find_entries(Path(args.folder))
    out = check_out(args.out, Path(args.folder))
    not_dumpable()  # a worker run as this user cannot read this process's memory or files
    stop_on_sigterm()
    warning = exposure_warning(Path(args.folder))
    if warning:
        print(warning, file=sys.stderr)

    def progress(done: int, total: int, row: Row) -> None:
        verdict = "passed" if row.passed else row.failure
        print(
            f"[{done}/{total}] {row.student}: {row.score:g}/{row.max_score:g} in "
            f"{row.seconds:.1f} s  {verdict}",
            file=sys.stderr,
        )

    print(
        f"grading {len(entries)} submissions of {config.function} ({config.kind}), "
        f"{args.jobs} at a time, {config.timeout_s:g} s each at most",
        file=sys.stderr,
    )
    grades = grade_class(entries, config, config_file, args.jobs, progress)
    sheet, table = write_outputs(grades, out)
    print(markdown_table(grades))
    print()
    print(summary_line(grades))
    print(f"written: {sheet} and {table}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m specdec.grading.delivery.classroom FOLDER`: `specdec grade-class` without
    the CLI."""
    parser = argparse.ArgumentParser(prog="specdec")
    add_class_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["grade-class", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except ValueError as err:
        parser.exit(2, f"specdec grade-class: error: {err}\n")
    except KeyboardInterrupt:
        parser.exit(130, "specdec grade-class: interrupted\n")


if __name__ == "__main__":
    raise SystemExit(main())
