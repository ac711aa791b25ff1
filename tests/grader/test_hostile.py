"""The catalogue of hostile submissions (tests/grader/hostile_catalogue.py), handed to the
grader by the three routes a student's file takes, each run as its user runs it:

(a) `specdec grade FILE:verify --json --timeout S --gradescope PATH`, one file at a time;
(b) `grade-class`, one class folder holding every hostile submission and bob, who hands in
    the honest solution (the sleeper in a class of its own: see CLASS_LIMIT_S);
(c) the verify exercise's Gradescope zip, in a clean venv, as Gradescope runs it.

Each hostile file must score 0 with its reason, and bob full marks; nothing outside the
graders' scratch folders may change (the submissions, the class, the zip's copy of the
grader: compared before and after), and no process of a worker's user may be left.

Every folder here is made world-readable (0755, files 0644) outside pytest's private tree
(/tmp/pytest-of-root is 0700): that is what a class folder or a checkout made under the
usual umask looks like, and under a 0700 folder the workers' users could read nothing at
all, which would hide whether the grader itself stops them.

Runtime, ~50 s on two cores: the class runs in the background from the first test on
(~45 s), while (a) (~35 s) and (c) (~10 s, and the session's venv) grade two files at a
time. Only bob and the honest solution of (a) take long (~15 s of CPU each); a hostile
file fails within seconds, unless an attack works: its stolen answer is then graded in full.
No marker: collected like test_gradescope_zips.py; `make test`'s --dist loadfile keeps the
module on one xdist worker, so that its fixtures run once.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import pwd
import shutil
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from specdec.grading.engine.worker_setup import FREE_IDS, WORKER_USER

from .hostile_catalogue import (
    CATALOGUE,
    FAKE_LINES,
    HONEST,
    PRINTED_HEADER,
    QUICK,
    SLEEPER,
    Hostile,
)
from .zips import autograde, build_zip, requirements_of

REPO = Path(__file__).resolve().parents[2]
MARK = "hostile_was_here.txt"  # what patches_grader.py leaves in a grader it can write to

ALONE_LIMIT_S = 20  # (a): a hostile file fails in a second or two
SLEEPER_LIMIT_S = 10  # the sleeper's wait, on (a) and (b)
HONEST_LIMIT_S = 300  # the honest solution: ~15 s alone, more on a loaded machine
# (b): bob is graded beside the others, 2 at a time on a machine the rest of the suite loads
# too (20 s was not enough for him); the sleeper would hold a class that long, so it has a
# class of its own, with SLEEPER_LIMIT_S
CLASS_LIMIT_S = 300
GRADES = ("grades.csv", "grades.md")  # what grade-class writes


# --------------------------------------------------------------------------------------------
# What every route checks: files unchanged, no process left
# --------------------------------------------------------------------------------------------


def open_folder(path: Path) -> Path:
    """A folder anyone may read and enter, as `mkdir` makes it under umask 022."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def hand_in(source: Path, target: Path) -> Path:
    open_folder(target.parent)
    shutil.copyfile(source, target)
    target.chmod(0o644)
    return target


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file (its hash) and folder under `folder`: a change, a deletion or an addition
    shows as a difference."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        found[name] = "folder" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))


def worker_ids() -> set[int]:
    ids = set(FREE_IDS)
    try:
        ids.add(pwd.getpwnam(WORKER_USER).pw_uid)
    except KeyError:
        pass
    return ids


def leftover_workers() -> list[str]:
    """Processes of a worker's user that no grading is waiting on: a worker whose grading
    ended, or anything a worker started. Not one: a worker whose parent is a live grading (of
    another test running meanwhile), and a zombie (it has ended; a worker killed with its
    grading at a timeout is one until init reaps it)."""
    table = subprocess.run(
        ["ps", "-eo", "uid=,pid=,ppid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    processes = {}
    for line in table.splitlines():
        uid, pid, ppid, stat, *args = line.split(None, 4)
        processes[int(pid)] = (int(uid), int(ppid), stat, args[0] if args else "")
    ids, left = worker_ids(), []
    for pid, (uid, ppid, stat, args) in processes.items():
        parent = processes.get(ppid)
        grading = parent is not None and parent[0] == 0 and "specdec.grading" in parent[3]
        if uid in ids and not grading and not stat.startswith("Z"):
            left.append(f"uid {uid} pid {pid} parent {ppid} ({stat}): {args}")
    return left


def printed_lines(stderr: str) -> list[str]:
    """The lines a submission printed, as the grader relays them on stderr."""
    return [line for line in stderr.splitlines() if line.startswith("  | ")]


@pytest.fixture(scope="module")
def base() -> Path:
    """A world-readable folder of this module's own, removed at its end. Its name holds
    "specdec-hostile-": the only folders class_thief.py tries to delete in."""
    folder = open_folder(Path(tempfile.mkdtemp(prefix="specdec-hostile-")))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# (b) grade-class: started first, in the background, and read at the end of the module
# --------------------------------------------------------------------------------------------


@dataclass
class ClassRun:
    folders: list[Path]
    out: list[Path]
    processes: list[subprocess.Popen]
    before: dict[str, str]
    finished: dict | None = None

    def finish(self) -> dict:
        """Wait for both classes -> rows by student, their tables, changes, leftovers."""
        if self.finished is None:
            outputs = [p.communicate(timeout=600) for p in self.processes]
            for process, (stdout, stderr) in zip(self.processes, outputs, strict=True):
                assert process.returncode == 0, stdout + stderr
            rows = {}
            for out in self.out:
                sheet = io.StringIO((out / "grades.csv").read_text())
                rows |= {r["student"]: r for r in csv.DictReader(sheet)}
            tables = "".join((o / n).read_text() for o in self.out for n in GRADES)
            after = {}
            for folder in self.folders:
                after |= {f"{folder.name}/{k}": v for k, v in fingerprint(folder).items()}
            self.finished = {
                "rows": rows,
                "tables": tables,
                "changed": changes(self.before, after),
                "leftovers": leftover_workers(),
            }
        return self.finished


def start_class(folder: Path, out: Path, limit_s: float) -> subprocess.Popen:
    argv = [str(folder), "--exercise", "verify", "--jobs", "2", "--timeout", str(limit_s)]
    return subprocess.Popen(
        [sys.executable, "-m", "specdec.grading.delivery.classroom", *argv, "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def class_run(base) -> ClassRun:
    """The class (bob and every quick hostile file, one folder each) and the sleeper's class,
    both started now; `finish()` waits for them."""
    main, alone = open_folder(base / "class"), open_folder(base / "sleeper-class")
    hand_in(HONEST, main / "bob" / "my_verify.py")
    for hostile in QUICK:
        hand_in(hostile.file, main / hostile.name / "my_verify.py")
    hand_in(SLEEPER.file, alone / SLEEPER.name / "my_verify.py")
    before = {}
    for folder in (main, alone):
        before |= {f"{folder.name}/{k}": v for k, v in fingerprint(folder).items()}
    out = [base / "grades", base / "sleeper-grades"]
    processes = [
        start_class(main, out[0], CLASS_LIMIT_S),
        start_class(alone, out[1], SLEEPER_LIMIT_S),
    ]
    run = ClassRun([main, alone], out, processes, before)
    yield run
    run.finish()  # never left running: its gradings would outlive it


# --------------------------------------------------------------------------------------------
# (a) specdec grade, one file at a time
# --------------------------------------------------------------------------------------------


@dataclass
class Answer:
    returncode: int
    stdout: str
    stderr: str
    results: dict  # the --gradescope results.json

    @property
    def text(self) -> str:
        """All the student is shown: the report and results.json."""
        return self.stdout + json.dumps(self.results)


def grade_alone(file: Path, folder: Path, limit_s: float) -> Answer:
    """`python -m specdec.grading FILE:verify --json --timeout S --gradescope PATH`, from
    `folder` (a user's own folder, not the checkout)."""
    results = folder / "results.json"
    command = [sys.executable, "-m", "specdec.grading", f"{file}:verify", "--json"]
    command += ["--timeout", str(limit_s), "--gradescope", str(results)]
    done = subprocess.run(
        command, cwd=folder, capture_output=True, text=True, timeout=limit_s + 120
    )
    assert results.is_file(), done.stdout + done.stderr
    return Answer(done.returncode, done.stdout, done.stderr, json.loads(results.read_text()))


@pytest.fixture(scope="module")
def graded_alone(base, class_run) -> dict:
    """Every file of the catalogue and the honest solution, graded by `specdec grade`, two at
    a time, the slow ones first. The submissions sit side by side in one folder, as an
    instructor's downloads would (the class thief looks for its neighbours). `class_run` is
    asked for only to start the class first: it grades in the background meanwhile."""
    submissions, answers_at = open_folder(base / "alone"), open_folder(base / "answers")
    sources = {"honest": HONEST, SLEEPER.name: SLEEPER.file, **{h.name: h.file for h in QUICK}}
    limits = {"honest": HONEST_LIMIT_S, SLEEPER.name: SLEEPER_LIMIT_S}
    files = {n: hand_in(f, submissions / n / "my_verify.py") for n, f in sources.items()}
    before = fingerprint(submissions)
    with ThreadPoolExecutor(2) as pool:  # in the order of `sources`: the slow ones first
        futures = {
            name: pool.submit(
                grade_alone, file, open_folder(answers_at / name), limits.get(name, ALONE_LIMIT_S)
            )
            for name, file in files.items()
        }
        answers = {name: future.result() for name, future in futures.items()}
    return {
        "answers": answers,
        "changed": changes(before, fingerprint(submissions)),
        "leftovers": leftover_workers(),
    }


@pytest.mark.parametrize("hostile", CATALOGUE, ids=lambda h: h.name)
def test_specdec_grade_gives_each_hostile_file_0_with_its_reason(graded_alone, hostile: Hostile):
    answer = graded_alone["answers"][hostile.name]
    assert answer.returncode in (1, 2), answer.stderr  # 1: failed, 2: not loaded
    assert answer.results["score"] == 0, answer.results["output"]
    assert all(t["score"] == 0 for t in answer.results["tests"]), answer.results
    assert hostile.reason in answer.text and hostile.detail in answer.text, answer.text
    if answer.stdout:  # a report was written: the JSON one, saying it failed
        assert json.loads(answer.stdout)["passed"] is False


def test_specdec_grade_still_gives_the_honest_solution_full_marks(graded_alone):
    answer = graded_alone["answers"]["honest"]
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert json.loads(answer.stdout)["passed"] is True
    assert answer.results["score"] == 10, answer.results["output"]


def test_specdec_grade_leaves_every_submission_as_it_was(graded_alone):
    assert graded_alone["changed"] == []


def test_specdec_grade_leaves_no_process_of_a_worker(graded_alone):
    assert graded_alone["leftovers"] == []


def test_a_submission_can_neither_write_the_checkout_nor_a_results_file(graded_alone):
    # what the two files that try say they did (their own words, relayed on stderr)
    answers = graded_alone["answers"]
    for name in ("patches_grader", "writes_results"):
        said = printed_lines(answers[name].stderr)
        assert not [line for line in said if "could write" in line or "| wrote" in line], said
    assert not (REPO / "specdec" / "grading" / MARK).exists()


def test_what_a_submission_prints_stays_out_of_the_report(graded_alone):
    answer = graded_alone["answers"]["fake_pass"]
    for fake in FAKE_LINES:
        assert fake not in answer.stdout and fake not in json.dumps(answer.results)
    lines = answer.stderr.splitlines()
    assert PRINTED_HEADER in lines, answer.stderr
    relayed = lines[lines.index(PRINTED_HEADER) + 1 :]
    assert any("RESULT: PASS (faked)" in line for line in relayed), answer.stderr
    for line in lines:  # each faked line only as the submission's, below the header
        if any(fake in line for fake in FAKE_LINES):
            assert line.startswith("  | ") and line in relayed, line


# --------------------------------------------------------------------------------------------
# (c) the Gradescope zip, in a clean venv
# --------------------------------------------------------------------------------------------


def unchanged_tree(root: Path, zipped: Path, handed_in: dict[str, str]) -> list[str]:
    """What differs from what was unzipped (the grader) and handed in (the submission);
    Python's own __pycache__ apart."""
    differences = []
    with zipfile.ZipFile(zipped) as archive:
        shipped = {n: archive.read(n) for n in archive.namelist() if not n.endswith("/")}
    found = {
        str(p.relative_to(root / "source")): p.read_bytes()
        for p in (root / "source").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    differences += [
        f"source/{n}" for n in shipped.keys() | found.keys() if shipped.get(n) != found.get(n)
    ]
    submitted = {p.name: p.read_text() for p in (root / "submission").iterdir()}
    if submitted != handed_in:
        differences.append("submission/")
    return sorted(differences)


@pytest.fixture(scope="module")
def graded_by_zip(base, zip_python, tmp_path_factory) -> dict:
    """Every quick file of the catalogue, through the verify zip (Gradescope's root in a
    world-readable folder; the venv is the session's, in pytest's private tree)."""
    zipped = build_zip(tmp_path_factory.mktemp("hostile-zip"), "verify")
    python = zip_python(requirements_of(zipped))
    roots = {h.name: open_folder(base / "gradescope" / h.name) for h in QUICK}
    files = {h.name: {"my_verify.py": h.file.read_text()} for h in QUICK}
    with ThreadPoolExecutor(2) as pool:
        futures = {n: pool.submit(autograde, zipped, python, roots[n], files[n]) for n in roots}
        results = {name: future.result() for name, future in futures.items()}
    return {
        "results": results,
        "changed": {n: unchanged_tree(roots[n], zipped, files[n]) for n in roots},
        "leftovers": leftover_workers(),
    }


@pytest.mark.parametrize("hostile", QUICK, ids=lambda h: h.name)
def test_the_zip_gives_each_hostile_file_0_with_its_reason(graded_by_zip, hostile: Hostile):
    results = graded_by_zip["results"][hostile.name]
    text = json.dumps(results)
    assert results["score"] == 0, results["output"]
    assert all(t["score"] == 0 for t in results["tests"]), results
    assert hostile.reason in text and hostile.detail in text, text
    assert not any(fake in text for fake in FAKE_LINES)


def test_the_zip_leaves_its_grader_and_each_submission_as_they_were(graded_by_zip):
    changed = {n: c for n, c in graded_by_zip["changed"].items() if c}
    assert changed == {}


def test_the_zip_leaves_no_process_of_a_worker(graded_by_zip):
    assert graded_by_zip["leftovers"] == []


# --------------------------------------------------------------------------------------------
# (b) grade-class, read last: it ran in the background all along
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hostile", CATALOGUE, ids=lambda h: h.name)
def test_grade_class_gives_each_hostile_student_0_with_the_reason(class_run, hostile: Hostile):
    row = class_run.finish()["rows"][hostile.name]
    assert row["score"] == "0" and row["passed"] == "no", row
    assert hostile.reason in row["first_failure"], row


def test_grade_class_gives_bob_full_marks_beside_them(class_run):
    row = class_run.finish()["rows"]["bob"]
    assert row["score"] == "10" and row["passed"] == "yes", row


def test_grade_class_leaves_every_student_folder_as_it_was(class_run):
    assert class_run.finish()["changed"] == []


def test_grade_class_leaves_no_process_of_a_worker(class_run):
    assert class_run.finish()["leftovers"] == []


def test_grade_class_keeps_what_a_student_prints_out_of_the_table(class_run):
    tables = class_run.finish()["tables"]
    assert not any(fake in tables for fake in FAKE_LINES)
