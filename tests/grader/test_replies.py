"""The grader trusts nothing the worker says (issue 45, items 2 and 5): every reply is checked
on the grading side, what the submission said reaches a report cut and quoted, a load error,
the student's error and the grader's own failure are told apart, and a link is never read.

Each hostile file (tests/grader/hostile/) is graded as a student's file is, by
`python -m specdec.grading FILE:verify --json --gradescope PATH`, and must score 0 with a
message that names what was wrong, no traceback of the grader's, and a results.json under
report.JSON_LIMIT (1 MiB). Each fails within seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from specdec.grading.delivery.classroom import Entry, find_entries, grade_entry
from specdec.grading.delivery.gradescope import ChildRun, failure_reason, find_submission
from specdec.grading.engine.config import GradingConfig
from specdec.grading.engine.quoting import QUOTE, one_line, shown_value, type_name
from specdec.grading.engine.replies import RemoteError, remote_error, reply_of
from specdec.grading.engine.report import JSON_LIMIT, bounded_json
from specdec.grading.engine.submission import (
    LoadError,
    SubmissionCrash,
    load_submission,
    verify_contract,
    verify_inputs,
)

REPO = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).with_name("hostile")
GRADER_FILE = REPO / "specdec/grading/engine/core.py"  # what a link would point at
RUN_LIMIT_S = 90  # a hostile file fails in a few seconds; an old grader hung on one


@dataclass
class Graded:
    returncode: int
    report: dict | None  # the --json report (None: none printed)
    results: dict  # results.json
    size: int  # results.json's bytes
    stderr: str

    def everything(self) -> str:
        """Every text the student sees: results.json's outputs and the report's strings."""
        texts = [self.results["output"], *(t["output"] for t in self.results["tests"])]
        return "\n".join(texts) + "\n" + json.dumps(self.report or {})


def grade_file(tmp_path: Path, source: Path | str, name: str = "my_verify.py") -> Graded:
    """`python -m specdec.grading tmp/NAME:verify --json --gradescope tmp/results.json`, with
    the hostile file `source` (a path, copied) or the text `source` handed in as NAME."""
    file = tmp_path / name
    if isinstance(source, Path):
        shutil.copyfile(source, file)
    else:
        file.write_text(source)
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "specdec.grading", f"{file}:verify", "--json"]
        + ["--gradescope", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_S,
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = None
    assert out.is_file(), done.stderr[-3000:]
    return Graded(
        done.returncode, report, json.loads(out.read_text()), out.stat().st_size, done.stderr
    )


def assert_zero_for(graded: Graded, *said: str) -> None:
    """0 points, the reason in what the student sees, no traceback of the grader's, and
    results.json within its bound."""
    assert graded.results["score"] == 0
    assert all(t["score"] == 0 for t in graded.results["tests"])
    seen = graded.everything()
    for words in said:
        assert words in seen, (words, seen[:3000])
    assert "Traceback" not in seen and "could not be loaded" not in seen
    assert "the grader failed" not in seen and "Traceback" not in graded.stderr
    assert graded.size <= JSON_LIMIT


# --------------------------------------------------------------------------------------------
# 1. Every reply is checked against its request
# --------------------------------------------------------------------------------------------


def test_a_rewritten_handler_that_answers_no_results_scores_0(tmp_path):
    # Worker.op_repeat / op_each rewritten from inside to answer []: the exact cases would
    # pass with nothing to fail on (and the sampled ones' streams never end: the old grader
    # hung). Every batched reply must hold one result per call
    graded = grade_file(tmp_path, HOSTILE / "patches_handler.py")
    assert graded.returncode == 1
    assert_zero_for(graded, "the worker answered 0 results for 25 calls")
    for name in ("law", "rule"):  # repeated calls (the exact cases), one call a row (A/B)
        family = graded.report["families"][name]
        assert family["status"] == "fail" and "answered 0 results for" in family["verdict"]


def test_a_reply_that_is_no_answer_breaks_the_exchange():
    assert reply_of(("ok", [1, 2], [])) == ("ok", [1, 2])
    assert reply_of(("error", {"type": "ValueError"}, [])) == ("error", {"type": "ValueError"})
    for reply in [("ok", 1), ("done", 1, []), ("error", "x" * 10**6, []), ["ok", 1, []], None]:
        with pytest.raises(ValueError) as refused:
            reply_of(reply)
        assert len(str(refused.value)) < 300


def test_an_empty_list_for_the_randomness_runs_is_the_students_error(tmp_path):
    # the randomness family's runs (100 calls each) answered [] (its family runs once the law
    # passed: called here directly); before: "not enough values to unpack", a load error
    from specdec.grading.exercises.verify.checks import randomness_checks

    (tmp_path / "my_verify.py").write_text((HOSTILE / "empty_randomness.py").read_text())
    sub = load_submission(f"{tmp_path / 'my_verify.py'}:verify")
    try:
        for check in randomness_checks():
            with pytest.raises(SubmissionCrash) as crashed:
                check.run(sub, 0.0, 0)
            assert "the worker answered 0 results for 100 calls" in crashed.value.headline()
    finally:
        sub.close()


@pytest.mark.parametrize(
    "value, said",
    [
        ((float("inf"), 0), "accepted is inf, not an int in 0..k = 0..2"),
        ((float("nan"), 0), "accepted is nan"),
        ((10**5000, 0), "accepted = <an int of about 5,001 digits> is not in 0..k"),
        ((True, 0), "accepted is a bool (True)"),
        (("1", 0), "accepted is a str"),
        ((1.5, 0), "accepted is 1.5"),
        ((0, 2**70), "token = 1180591620717411303424 is not in 0..V-1 = 0..3"),
        ([[[0] * 10] * 10] * 100_000, "it returned [[[0, 0,"),
        ("9" * 10_000_000, "(10,000,000 characters)"),
    ],
    ids=["inf", "nan", "huge-int", "bool", "str", "fraction", "token-range", "nested", "string"],
)
def test_a_malformed_answer_breaks_the_contract_in_a_few_words(value, said):
    shown = verify_inputs(np.full((3, 4), 0.25), np.full((2, 4), 0.25), (0, 1))
    with pytest.raises(SubmissionCrash) as crashed:
        verify_contract(value, shown)
    headline = crashed.value.headline()
    assert headline.startswith("the value your verify returned broke the contract")
    assert said in headline and len(crashed.value.describe()) < 5000, headline


def test_int_valued_answers_are_still_taken():
    shown = verify_inputs(np.full((3, 4), 0.25), np.full((2, 4), 0.25), (0, 1))
    for value in [(2, 3), (np.int64(2), np.int32(3)), (2.0, 3.0), (np.array(2), 3)]:
        assert verify_contract(value, shown) == (2, 3)


def test_an_inf_answer_scores_0_without_the_graders_traceback(tmp_path):
    # before: int(inf) raised OverflowError in the grader: "out of memory? your code ending
    # the process?" with the grader's traceback and its absolute paths
    graded = grade_file(tmp_path, HOSTILE / "answers_inf.py")
    assert graded.returncode == 1
    assert_zero_for(graded, "accepted is inf, not an int in 0..k")
    assert str(REPO) not in graded.everything()


def test_a_5000_digit_answer_scores_0_and_is_not_a_load_error(tmp_path):
    # before: str() of the int raised ValueError, which the command took for "could not be
    # loaded" (exit code 2)
    graded = grade_file(tmp_path, HOSTILE / "answers_huge_int.py")
    assert graded.returncode == 1
    assert_zero_for(graded, "accepted = <an int of about 5,001 digits> is not in 0..k")


# --------------------------------------------------------------------------------------------
# 2. What the submission says is cut and quoted
# --------------------------------------------------------------------------------------------


FORGED = ("PASS  law:", "PASS  rule:", "RESULT: PASS")


def starts_a_line(text: str, words: str) -> bool:
    return any(line.startswith(words) for line in text.splitlines())


def test_a_message_of_several_lines_is_quoted_and_forges_no_line(tmp_path):
    graded = grade_file(tmp_path, HOSTILE / "forged_message.py")
    texts = [graded.results["output"], *(t["output"] for t in graded.results["tests"])]
    for law in graded.report["laws"]:
        texts += [law["summary"] or "", *(law["explanation"] or []), law["crash"] or ""]
    texts += graded.report["crashes"]
    for text in texts:
        assert not any(starts_a_line(text, words) for words in FORGED), text
    assert_zero_for(graded, f"{QUOTE}RESULT: PASS (forged) 10.0 / 10.0")


def test_the_text_report_quotes_it_too(tmp_path):
    from specdec.grading import grade
    from specdec.grading.engine.report import text_report

    (tmp_path / "my_verify.py").write_text((HOSTILE / "forged_message.py").read_text())
    text = text_report(grade(f"{tmp_path / 'my_verify.py'}:verify"))
    assert f"{QUOTE}PASS  law: the output follows the target's law (forged)" in text
    assert not any(starts_a_line(text, words) for words in FORGED[:2])
    assert [line for line in text.splitlines() if line.startswith("RESULT:")] == ["RESULT: FAIL"]


def test_a_5_million_character_class_name_is_cut(tmp_path):
    # before: the name passed the worker's 2,000-character cut (of the message only): a 45 MB
    # results.json
    graded = grade_file(tmp_path, HOSTILE / "huge_type_name.py")
    assert graded.size < 64 << 10
    assert_zero_for(graded, "_cut", "a class with a long name")


def test_a_10_million_character_answer_is_cut(tmp_path):
    # before: the answer's repr in the message: a 30 MB results.json
    graded = grade_file(tmp_path, HOSTILE / "huge_answer.py")
    assert graded.size < 64 << 10
    assert_zero_for(graded, "accepted is a str", "(10,000,000 characters)")


def test_a_forged_error_description_is_checked_and_cut():
    # what the worker says of an exception is the submission's to forge, field by field
    error = remote_error(
        {
            "type": "E" * 5_000_000,
            "builtin": "yes",
            "message": "x" * 3_000_000,
            "frames": [
                ["a\nRESULT: PASS", "1", "f", "c"],
                "not a frame",
                ["f.py", 3, "g", "y" * 10**6],
            ],
            "last": 7,
            "call": "2",
        }
    )
    assert isinstance(error, RemoteError)
    assert type(error).__name__ == "E" * 96 + "_cut" and len(error.message) < 2100
    assert error.frames == [["f.py", 3, "g", "y" * 300 + "... (cut: 1,000,000 characters)"]]
    assert error.last == [] and error.call is None
    for data in [{}, {"type": None, "message": 5, "frames": None}, {"type": "1 2", "frames": [1]}]:
        assert type(remote_error(data)).__name__ == "Exception"


def test_text_helpers_bound_what_they_show():
    assert len(shown_value(list(range(10**6)))) < 400
    assert len(shown_value({str(i): [i] * 1000 for i in range(10**4)})) < 400
    assert shown_value(10**5000) == "<an int of about 5,001 digits>"
    nested: list = []
    inner = nested
    for _ in range(30):
        inner.append([])
        inner = inner[0]
    assert len(shown_value(nested)) < 100
    assert one_line("a\nRESULT: PASS\u2028b") == "a\\nRESULT: PASS\\nb"
    assert type_name("1abc") == "Exception" and type_name("Fine") == "Fine"


def test_results_json_is_bounded_whatever_it_holds():
    data = {"output": "x" * (45 << 20), "tests": [{"output": "é" * (5 << 20)}] * 3, "score": 0}
    text = bounded_json(data)
    assert len(text.encode()) <= JSON_LIMIT
    back = json.loads(text)
    assert "cut here" in back["output"] and back["score"] == 0


# --------------------------------------------------------------------------------------------
# 3. A load error, the student's error and the grader's failure, told apart
# --------------------------------------------------------------------------------------------


def test_only_a_file_that_does_not_load_is_reported_as_not_loaded(tmp_path):
    graded = grade_file(tmp_path, "def verify(p, q, x, rng)\n    return 0, 0\n")
    assert graded.returncode == 2
    assert "your code could not be loaded:" in graded.results["output"]
    with pytest.raises(LoadError):
        load_submission(f"{tmp_path / 'nothing.py'}:verify")


def test_a_failure_of_the_grader_is_named_so_without_its_paths(tmp_path, monkeypatch, capsys):
    from specdec.grading import main
    from specdec.grading.delivery import cli

    def broken(*args, **kwargs):
        raise KeyError(f"{REPO}/specdec/grading/engine/core.py")

    monkeypatch.setattr(cli, "grade", broken)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_verify.py").write_text("def verify(p, q, x, rng):\n    return 0, 0\n")
    code = main(["my_verify.py:verify", "--gradescope", "results.json"])
    err = capsys.readouterr().err
    assert code == cli.GRADER_FAILED_EXIT == 3
    line = err.strip().splitlines()[-1]
    assert line.startswith(cli.GRADER_FAILED) and "please report it" in line
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 0
    assert "the grader failed (KeyError: '.../core.py')" in results["output"]
    assert str(REPO) not in results["output"] and "could not be loaded" not in results["output"]
    child = ChildRun("x.py:verify", 60.0, 3, "", err, 1.0, None)  # as the zip's runner reads it
    reason = failure_reason(child)
    assert reason.startswith("the grader failed (KeyError") and str(REPO) not in reason


# --------------------------------------------------------------------------------------------
# 4. A link is refused before anything reads it
# --------------------------------------------------------------------------------------------


LINK_REFUSED = "my_verify.py is a symbolic link; upload the file itself"


def test_a_symlinked_file_is_refused_unread(tmp_path):
    # before: the link into the grader's source was followed, loaded, and its lines quoted
    (tmp_path / "my_verify.py").symlink_to(GRADER_FILE)
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "specdec.grading", f"{tmp_path / 'my_verify.py'}:verify"]
        + ["--gradescope", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_S,
    )
    assert done.returncode == 2 and LINK_REFUSED in done.stderr
    results = json.loads(out.read_text())
    assert results["score"] == 0 and LINK_REFUSED in results["output"]
    assert "core.py" not in results["output"] and "specdec" not in results["output"]


def test_the_zips_search_refuses_links_and_follows_none(tmp_path):
    config = GradingConfig()  # submission_file = my_verify.py
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "my_verify.py").write_text("def verify(p, q, x, rng):\n    return 0, 0\n")
    top = tmp_path / "top"
    top.mkdir()
    (top / "my_verify.py").symlink_to(GRADER_FILE)
    assert find_submission(top, config) == (None, LINK_REFUSED)
    nested = tmp_path / "nested"
    (nested / "folder").mkdir(parents=True)
    (nested / "folder" / "my_verify.py").symlink_to(GRADER_FILE)
    assert find_submission(nested, config) == (None, LINK_REFUSED)
    only = tmp_path / "only"
    only.mkdir()
    (only / "mine.py").symlink_to(GRADER_FILE)
    refused = (None, "mine.py is a symbolic link; upload the file itself")
    assert find_submission(only, config) == refused
    through = tmp_path / "through"  # a linked folder is not searched
    through.mkdir()
    (through / "linked").symlink_to(outside, target_is_directory=True)
    file, why = find_submission(through, config)
    assert file is None and "no file my_verify.py" in why
    (through / "my_verify.py").write_text("x = 1\n")  # a regular file beside it: graded
    assert find_submission(through, config) == (through / "my_verify.py", "")


def test_a_class_folders_links_get_a_row_of_0_with_the_reason(tmp_path):
    config = GradingConfig()
    classroom = tmp_path / "class"
    classroom.mkdir()
    (classroom / "eve.py").symlink_to(GRADER_FILE)
    (classroom / "ann").mkdir()
    (classroom / "ann" / "my_verify.py").symlink_to(GRADER_FILE)
    (tmp_path / "elsewhere").mkdir()
    (classroom / "bob").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    entries = {e.student: e for e in find_entries(classroom)}
    assert set(entries) == {"ann", "bob", "eve"}
    reasons = {}
    for student, entry in entries.items():
        row = grade_entry(entry, config, None)
        assert row.score == 0 and not row.graded
        reasons[student] = row.failure
    assert reasons == {
        "ann": LINK_REFUSED,
        "bob": "bob is a symbolic link; upload the file itself",
        "eve": "eve.py is a symbolic link; upload the file itself",
    }
    assert isinstance(entries["eve"], Entry) and os.path.islink(entries["eve"].path)
