"""`specdec grade-class` (specdec/grading/delivery/classroom.py) and `specdec grade --timeout`.

A small class is graded end to end, each submission in its own child process: a wrong verify
in each layout (a file, a folder), a folder without the file, a syntax error and a verify
that never returns. Every one gets its row, with its score and the reason in a few words. A
correct verify takes ~11 s to grade, too long for CI, so its row is built from a report.
"""

from __future__ import annotations

import csv
import inspect
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import specdec.grading.delivery.gradescope as gradescope
from specdec.grading import main as grade_main
from specdec.grading.delivery.classroom import (
    ClassGrades,
    Entry,
    check_out,
    class_config,
    csv_text,
    find_entries,
    markdown_table,
    row_of,
    summary_line,
)
from specdec.grading.delivery.classroom import main as class_main
from specdec.grading.engine.config import GradingConfig
from specdec.oracle import broken

from . import more_broken

REPO = Path(__file__).resolve().parents[2]
VERIFY_FAMILIES = ["law", "rule", "randomness", "in-loop"]

# what a student's file may use: NumPy, and what it writes itself (the grader's worker holds
# no `reference`): the two names the broken variants take from it, written out
HEADER = (
    "from collections import namedtuple\n\n"
    "import numpy as np\n\n"
    "Verification = namedtuple('Verification', 'accepted token')\n\n\n"
    "def sample_token(row, rng):\n"
    "    cdf = np.cumsum(row, dtype=np.float64)\n"
    "    u = rng.random() * cdf[-1]\n"
    "    return int(min(np.searchsorted(cdf, u, side='right'), len(row) - 1))\n\n\n"
)
HELPERS = (more_broken.pick, more_broken.leftover, broken.normalised, broken.residual)


def student_file(variant) -> str:
    """A broken verify of specdec/oracle/broken.py or more_broken.py as a student's file:
    its helpers, then the function renamed `verify`."""
    body = inspect.getsource(variant).replace(f"def {variant.__name__}(", "def verify(", 1)
    return HEADER + "".join(inspect.getsource(h) + "\n\n" for h in HELPERS) + body


SYNTAX_ERROR = "def verify(p_target, q_draft, draft_tokens, rng)\n    return 0, 0\n"
ENDLESS = textwrap.dedent(
    """
    def verify(p_target, q_draft, draft_tokens, rng):
        accepted = 0
        while accepted <= len(draft_tokens):  # never changes: never returns
            pass
        return accepted, 0
    """
)


# --------------------------------------------------------------------------------------------
# A class, end to end
# --------------------------------------------------------------------------------------------


CLASS_LIMIT_S = 20


def python_module(module: str, *argv: str) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGV` run from the repository's root, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def classroom(*argv: str) -> str:
    """The classroom command (delivery/classroom.py) on ARGV: its stdout; it must exit 0."""
    done = python_module("specdec.grading.delivery.classroom", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> tuple[str, Path]:
    """Grade a class of five with 2 jobs and a 20 s limit; (stdout, the output folder). The
    limit leaves a wide margin to the wrong verifys (about 2 s each alone, several times that
    when the test suite's own workers load both cores): only the endless loop may meet it."""
    folder = tmp_path_factory.mktemp("class")
    (folder / "ann.py").write_text(student_file(more_broken.counts_the_rejected_draft))
    (folder / "bob").mkdir()
    (folder / "bob" / "notes.txt").write_text("I ran out of time")
    (folder / "cho.py").write_text(SYNTAX_ERROR)
    (folder / "dan.py").write_text(ENDLESS)
    (folder / "eve").mkdir()
    (folder / "eve" / "my_verify.py").write_text(student_file(broken.bonus_from_wrong_row))
    (folder / "README.md").write_text("not a submission")  # stray files are left alone
    out = tmp_path_factory.mktemp("grades")
    argv = [str(folder), "--jobs", "2", "--timeout", str(CLASS_LIMIT_S), "--out", str(out)]
    return classroom(*argv), out


def rows_of(out: Path) -> dict[str, dict]:
    return {r["student"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}


def test_every_submission_gets_a_row_with_its_score_and_reason(graded_class):
    _, out = graded_class
    rows = rows_of(out)
    assert list(rows) == ["ann", "bob", "cho", "dan", "eve"]
    for row in rows.values():  # the total is the sum of the families, out of 10
        assert float(row["score"]) == sum(float(row[f]) for f in VERIFY_FAMILIES)
        assert row["max_score"] == "10" and row["passed"] == "no"
    # the wrong verifys are graded: the law fails (the check, what it found); their
    # randomness is not credited (it runs once the law family passed)
    assert rows["ann"]["first_failure"].startswith("verify/greedy-mismatch: returned ("), rows
    assert rows["eve"]["first_failure"].startswith("verify/"), rows
    for student in ("ann", "eve"):
        assert rows[student]["law"] == "0" and rows[student]["randomness"] == "0"
    assert "no file my_verify.py in your submission" in rows["bob"]["first_failure"]
    assert rows["cho"]["first_failure"].startswith(
        "your code could not be loaded: importing cho.py raised SyntaxError"
    )
    assert (
        f"grading was stopped after {CLASS_LIMIT_S} s: your verify did not return"
        in (rows["dan"]["first_failure"])
    )
    assert float(rows["dan"]["seconds"]) >= CLASS_LIMIT_S  # it ran to the limit, and no further
    assert all(rows[s]["score"] == "0" for s in ("bob", "cho", "dan"))


def test_the_markdown_table_and_the_summary(graded_class):
    stdout, out = graded_class
    table = (out / "grades.md").read_text()
    assert table.startswith(
        "| student | score /10 | law /6 | rule /2 | randomness /1 | in-loop /1 | first failure "
        "| seconds |"
    )
    assert table.count("\n| ") == 5  # one line per student
    summary = table.strip().splitlines()[-1]
    assert summary.startswith("5 graded, 0 passed, mean score 0.00 of 10, wall time ")
    assert summary.endswith(
        "with 2 jobs (3 not gradable, scored 0: missing, not loading, crashed or timed out)"
    )
    assert summary in stdout and "written: " in stdout


# --------------------------------------------------------------------------------------------
# The class folder, the output folder, the options
# --------------------------------------------------------------------------------------------


def test_both_layouts_are_found_and_the_rest_is_left_alone(tmp_path):
    (tmp_path / "zoe").mkdir()
    (tmp_path / "adam.py").write_text("")
    for skipped in (".hidden", "__MACOSX", "__pycache__"):
        (tmp_path / skipped).mkdir()
    (tmp_path / "grades.csv").write_text("")
    entries = find_entries(tmp_path)
    assert entries == [Entry("adam", tmp_path / "adam.py"), Entry("zoe", tmp_path / "zoe")]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: None, "no submissions found; expected one sub-folder per student"),
        (lambda d: ((d / "kim").mkdir(), (d / "kim.py").write_text("")), "both a folder and"),
    ],
    ids=["empty", "folder-and-file"],
)
def test_a_class_folder_that_cannot_be_read_is_refused(tmp_path, make, message):
    make(tmp_path)
    with pytest.raises(ValueError, match=message):
        find_entries(tmp_path)
    with pytest.raises(ValueError, match="no such folder"):
        find_entries(tmp_path / "missing")


def test_the_default_output_is_refused_inside_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(ValueError, match="would be inside the repository.*pass --out DIR"):
        check_out(None, tmp_path)
    assert check_out(str(REPO / "my-grades"), tmp_path) == REPO / "my-grades"  # on purpose
    monkeypatch.chdir(tmp_path)
    submissions = tmp_path / "submissions"
    assert check_out(None, submissions) == tmp_path / "class-grades"
    with pytest.raises(ValueError, match="inside the submissions folder"):
        check_out(str(submissions / "out"), submissions)


def test_the_exercise_and_the_config_say_what_is_graded(tmp_path):
    assert class_config(GradingConfig(), None, None).kind == "verify"  # the default
    loop = class_config(GradingConfig(), "loop", 60)
    assert (loop.submission_file, loop.function, loop.kind) == (
        "my_loop.py",
        "speculative_generate",
        "loop",
    )
    assert loop.timeout_s == 60
    named = class_config(GradingConfig(function="speculative_generate"), None, None)
    assert named.kind == "loop"  # an 'auto' kind is read from the function's name
    with pytest.raises(ValueError, match="--timeout must be > 0"):
        class_config(GradingConfig(), None, 0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["--exercise", "verify", "--timeout", "-1"], "--timeout must be > 0"),
        (["--config", "nowhere.toml"], "--config nowhere.toml: no such file"),
    ],
)
def test_bad_options_get_a_clear_error(tmp_path, capsys, argv, message):
    (tmp_path / "ann.py").write_text("")
    with pytest.raises(SystemExit) as stop:
        class_main([str(tmp_path), *argv, "--out", str(tmp_path.parent / "out")])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_a_passing_submission_has_no_failure_in_the_table():
    # (a correct verify takes ~11 s to grade: its row is built from its two reports)
    tests = [
        {"name": f"{f}: ...", "score": w, "max_score": w}
        for f, w in zip(VERIFY_FAMILIES, (6, 2, 1, 1), strict=True)
    ]
    report = {"passed": True, "laws": [{"name": "law/x", "status": "pass"}], "crash": None}
    row = row_of("ann", {"score": 10, "tests": tests}, report, None, 11.0, True)
    assert row.passed and row.graded and row.failure == "" and row.score == row.max_score == 10
    points = dict(zip(VERIFY_FAMILIES, (6.0, 2.0, 1.0, 1.0), strict=True))
    grades = ClassGrades([row], tuple(VERIFY_FAMILIES), points, 11.0, 1)
    assert "| ann | 10 | 6 | 2 | 1 | 1 | passed | 11.0 |" in markdown_table(grades)
    assert csv_text(grades).splitlines()[1] == "ann,10,10,6,2,1,1,yes,,11.0"
    assert summary_line(grades).startswith("1 graded, 1 passed, mean score 10.00 of 10")
    assert "(0 not gradable" in summary_line(grades)


def test_the_specdec_cli_has_grade_class(tmp_path, capsys):
    from specdec.cli import build_parser
    from specdec.cli import main as specdec

    args = build_parser().parse_args(["grade-class", "subs", "--jobs", "3"])
    assert args.folder == "subs" and args.jobs == 3 and args.exercise is None
    with pytest.raises(SystemExit) as stop:  # through the whole command, to the first check
        specdec(["grade-class", str(tmp_path)])
    assert stop.value.code == 2 and "no submissions found" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# specdec grade --timeout
# --------------------------------------------------------------------------------------------


def grade_command(*argv: str) -> subprocess.CompletedProcess:
    return python_module("specdec.grading", *argv)


def test_grade_timeout_stops_a_verify_that_never_returns(tmp_path):
    (tmp_path / "endless.py").write_text(ENDLESS)
    done = grade_command(f"{tmp_path / 'endless.py'}:verify", "--timeout", "2")
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("grading was stopped after 2 s: your verify did not return")
    assert done.stdout.strip().endswith("RESULT: FAIL")


def test_grade_timeout_passes_the_report_on(tmp_path):
    (tmp_path / "wrong.py").write_text(student_file(more_broken.correction_is_the_draft))
    done = grade_command(f"{tmp_path / 'wrong.py'}:verify", "--timeout", "60")
    assert done.returncode == 1, done.stderr
    assert "What went wrong" in done.stdout and done.stdout.strip().endswith("RESULT: FAIL")
    assert "written:" not in done.stderr  # the child's scratch results.json stays private


def test_grade_without_timeout_stays_in_this_process(monkeypatch, capsys):
    def no_child(*args, **kwargs):
        raise AssertionError("graded in a child process without --timeout")

    monkeypatch.setattr(gradescope, "run_grader", no_child)
    with pytest.raises(SystemExit) as stop:  # loaded here: the missing file is this one's error
        grade_main(["nowhere.py:verify"])
    assert stop.value.code == 2 and "no such file" in capsys.readouterr().err


def test_grade_help_names_the_gradescope_build_and_grade_class(capsys):
    with pytest.raises(SystemExit):
        grade_main(["--help"])
    text = capsys.readouterr().out
    assert "python -m specdec.grading.delivery.gradescope build" in text
    assert "specdec grade-class" in text and "--timeout S" in text


# --------------------------------------------------------------------------------------------
# The EAGLE exercises, graded as a class
# --------------------------------------------------------------------------------------------

# kind -> (the function, a broken variant of tests/grader/broken_<kind>.py, its score /10, the
# family its first failure names, the header of the table)
EAGLE_CLASSES = {
    "eagle_block": (
        "eagle_block_forward",
        "position_embedding_added",
        "0",
        "eagle-block/",
        "| eagle-block /7 | eagle-block-round /3 |",
    ),
    "eagle_ttt": (
        "training_time_test_step",
        "own_output_detached",
        "6",
        "ttt-gradients/",
        "| ttt-inputs /3 | ttt-loss /3 | ttt-gradients /4 |",
    ),
    "eagle_tree": (
        "grow_eagle_tree",
        "first_created_kept",
        "0",
        "eagle-tree/",
        "| eagle-tree /7 | eagle-tree-round /3 |",
    ),
}


@pytest.mark.parametrize("kind", EAGLE_CLASSES)
def test_an_eagle_exercise_graded_as_a_class(kind, tmp_path):
    # two students: the worked solution, and a broken variant (its module, the variant named
    # as the exercise's function); graded with --exercise KIND, each scored per family
    function, variant, score, failure, header = EAGLE_CLASSES[kind]
    folder, out = tmp_path / "class", tmp_path / "grades"
    folder.mkdir()
    solution = REPO / "notebooks" / "exercises" / "solutions" / f"{kind}_solution.py"
    (folder / "ann.py").write_text(solution.read_text())
    broken_module = (Path(__file__).parent / f"broken_{kind}.py").read_text()
    (folder / "bob.py").write_text(f"{broken_module}\n\n{function} = {variant}\n")
    argv = [str(folder), "--exercise", kind, "--jobs", "2", "--out", str(out)]
    classroom(*argv)
    rows = rows_of(out)
    assert rows["ann"]["score"] == "10" and rows["ann"]["passed"] == "yes", rows["ann"]
    assert rows["bob"]["score"] == score and rows["bob"]["passed"] == "no", rows["bob"]
    assert rows["bob"]["first_failure"].startswith(failure), rows["bob"]
    assert header in (out / "grades.md").read_text().splitlines()[0]
