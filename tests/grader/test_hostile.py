"""The catalogue of hostile submissions (tests/grader/hostile_catalogue.py), handed to the
grader by the three routes a student's file takes, each run as its user runs it:

(a) `specdec grade FILE:verify --json --timeout S --gradescope PATH`, one file at a time;
(b) `grade-class`: one class folder holding every quick hostile verify and bob, who hands in
    the honest solution; the ones that never return in a class of their own (see
    CLASS_LIMIT_S); the tree exercise's in a third, beside alice's honest walk;
(c) the exercise's Gradescope zip, in a clean venv, as Gradescope runs it.

And each route twice: as root with every capability (a machine or a VM: the worker gets a
mount namespace of its own), and as root without CAP_SYS_ADMIN (a container's default, likely
Gradescope's: no namespace; Landlock and seccomp hold the worker instead). Without it, the
class route holds only the files that reach for the machine (`machine` in the catalogue:
what they meet is the confinement's), and the honest solutions are graded by (a) alone: the
others attack the grader's own checks, which are the same code in both modes and are graded
by (a) and (c) in this mode too. That keeps the module's time within the suite's budget.

Each hostile file must score 0 with its reason, and the honest ones full marks; nothing
outside the graders' scratch folders may change (the submissions, the class, the zip's copy of
the grader: compared before and after); no process of a worker's user may be left; every
grading runs with TMPDIR in a folder of this module's, which must be empty at the end
(timeouts included); no file that escapes_confinement.py leaves may be found in /tmp,
/dev/shm or /var/tmp; no forged line may start a line of any answer; results.json stays
under its bound whatever the submission returns.

Every folder here is made world-readable (0755, files 0644) outside pytest's private tree
(/tmp/pytest-of-root is 0700): that is what a class folder or a checkout made under the
usual umask looks like, and under a 0700 folder the workers' users could read nothing at
all, which would hide whether the grader itself stops them.

No marker: collected like test_gradescope_zips.py; `make test`'s --dist loadfile keeps the
module on one xdist worker, so that its fixtures run once per mode.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import io
import json
import os
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

from .capabilities import can_drop, without_sys_admin
from .hostile_catalogue import (
    CATALOGUE,
    FAKE_LINES,
    FORGED_STARTS,
    HONEST,
    HONEST_TREE,
    PRINTED_HEADER,
    QUICK,
    RESULTS_BOUND,
    STOPPED,
    TREE,
    Hostile,
)
from .zips import autograde, build_zip, requirements_of

REPO = Path(__file__).resolve().parents[2]
MARK = "hostile_was_here.txt"  # what patches_grader.py leaves in a grader it can write to
LEFT = "specdec-hostile-left"  # what escapes_confinement.py names the files it leaves
SHARED_TEMPORARY = ("/tmp", "/dev/shm", "/var/tmp")

ALONE_LIMIT_S = 20  # (a): a hostile file fails in a second or two
STOPPED_LIMIT_S = 8  # the wait of the ones that never return, on (a) and (b)
HONEST_LIMIT_S = 300  # an honest solution: ~15 s alone, more on a loaded machine
# (b): bob is graded beside the others, 2 at a time on a machine the rest of the suite loads
# too (20 s was not enough for him); a sleeper would hold a class that long, so they have a
# class of their own, with STOPPED_LIMIT_S
CLASS_LIMIT_S = 300
GRADES = ("grades.csv", "grades.md")  # what grade-class writes
SKELETON = {"verify": ("my_verify.py", "verify"), "tree": ("my_tree.py", "verify_tree")}
HONEST_OF = {"verify": HONEST, "tree": HONEST_TREE}


# --------------------------------------------------------------------------------------------
# The two modes: with and without CAP_SYS_ADMIN
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    name: str
    preexec: object  # None, or capabilities.without_sys_admin for every grading's process
    base: Path  # this mode's folders; their names hold "specdec-hostile-" (class_thief.py)
    tmp: Path  # every grading's TMPDIR

    @property
    def env(self) -> dict[str, str]:
        return {"TMPDIR": str(self.tmp)}

    @property
    def full(self) -> bool:
        """Every file and the honest ones by every route (with CAP_SYS_ADMIN), or the class
        route for the `machine` files only, the honest ones by (a) only (without it)."""
        return self.name == "sys-admin"

    def in_class(self, hostile: Hostile) -> bool:
        return self.full or hostile.machine


@pytest.fixture(scope="module", params=["sys-admin", "no-sys-admin"])
def mode(request) -> Mode:
    """A world-readable folder of this mode's own, removed at its end."""
    if request.param == "no-sys-admin" and not can_drop():
        pytest.skip("dropping CAP_SYS_ADMIN needs root on Linux")
    base = open_folder(Path(tempfile.mkdtemp(prefix=f"specdec-hostile-{request.param}-")))
    tmp = base / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)  # as /tmp is: the graders make their own folders inside
    preexec = without_sys_admin if request.param == "no-sys-admin" else None
    yield Mode(request.param, preexec, base, tmp)
    shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# What every route checks: files unchanged, no process left, nothing left in a temporary folder
# --------------------------------------------------------------------------------------------


def open_folder(path: Path) -> Path:
    """A folder anyone may read and enter, as `mkdir` makes it under umask 022."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def hand_in(hostile_or_file: Hostile | Path, target: Path) -> Path:
    """A copy of the file at `target` (a symbolic link for a hostile `link` one)."""
    open_folder(target.parent)
    hostile = hostile_or_file if isinstance(hostile_or_file, Hostile) else None
    if hostile is not None and hostile.link is not None:
        target.symlink_to(hostile.link)
        return target
    shutil.copyfile(hostile.file if hostile else hostile_or_file, target)
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
    another test running meanwhile), and a zombie (it has ended)."""
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


def left_behind(mode: Mode) -> list[str]:
    """What gradings left: anything in this mode's TMPDIR, and the files escapes_confinement.py
    tries to leave in the machine's shared temporary folders."""
    found = [str(p) for p in mode.tmp.iterdir()]
    for folder in SHARED_TEMPORARY:
        found += glob.glob(f"{folder}/{LEFT}-*")
    return sorted(found)


def printed_lines(stderr: str) -> list[str]:
    """The lines a submission printed, as the grader relays them on stderr."""
    return [line for line in stderr.splitlines() if line.startswith("  | ")]


def forged(text: str) -> list[str]:
    """The lines of an answer that start like the grader's own verdicts but were forged."""
    return [line for line in text.splitlines() if line.lstrip().startswith(FORGED_STARTS)]


def answer_texts(results: dict) -> str:
    """Every text of results.json a student reads, one after the other."""
    texts = [results.get("output", "")]
    texts += [t.get("output", "") for t in results.get("tests", [])]
    return "\n".join(texts)


# --------------------------------------------------------------------------------------------
# (b) grade-class: started first, in the background, and read at the end of the module
# --------------------------------------------------------------------------------------------


@dataclass
class ClassRun:
    folders: list[Path]
    out: list[Path]
    processes: list[subprocess.Popen]
    before: dict[str, str]
    mode: Mode
    finished: dict | None = None

    def finish(self) -> dict:
        """Wait for the classes -> rows by student, their tables, changes, leftovers."""
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
                "left": left_behind(self.mode),
            }
        return self.finished


def start_class(folder: Path, out: Path, exercise: str, limit_s: float, mode: Mode):
    argv = [str(folder), "--exercise", exercise, "--jobs", "2", "--timeout", str(limit_s)]
    return subprocess.Popen(
        [sys.executable, "-m", "specdec.grading.delivery.classroom", *argv, "--out", str(out)],
        cwd=REPO,
        env=os.environ | mode.env,
        preexec_fn=mode.preexec,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def class_run(mode) -> ClassRun:
    """Three classes, all started now: bob and every quick hostile verify; the ones that never
    return; alice's honest tree walk and the hostile walks. `finish()` waits for them."""
    base = mode.base
    main, alone, tree = (open_folder(base / n) for n in ("class", "stopped-class", "tree-class"))
    if mode.full:
        hand_in(HONEST, main / "bob" / "my_verify.py")
        hand_in(HONEST_TREE, tree / "alice" / "my_tree.py")
    for hostile in filter(mode.in_class, QUICK):
        hand_in(hostile, main / hostile.name / "my_verify.py")
    for hostile in filter(mode.in_class, STOPPED):
        hand_in(hostile, alone / hostile.name / "my_verify.py")
    for hostile in filter(mode.in_class, TREE):
        hand_in(hostile, tree / hostile.name / "my_tree.py")
    folders = [f for f in (main, alone, tree) if any(f.iterdir())]
    before = {}
    for folder in folders:
        before |= {f"{folder.name}/{k}": v for k, v in fingerprint(folder).items()}
    classes = {main: ("verify", CLASS_LIMIT_S), alone: ("verify", STOPPED_LIMIT_S)}
    classes[tree] = ("tree", CLASS_LIMIT_S)
    out = [base / f"grades-{f.name}" for f in folders]
    processes = [start_class(f, o, *classes[f], mode) for f, o in zip(folders, out, strict=True)]
    run = ClassRun(folders, out, processes, before, mode)
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
    size: int  # of results.json, in bytes

    @property
    def text(self) -> str:
        """All the student is shown: the report and results.json."""
        return self.stdout + json.dumps(self.results)


def grade_alone(file: Path, exercise: str, folder: Path, limit_s: float, mode: Mode) -> Answer:
    """`python -m specdec.grading FILE:FUNCTION --kind KIND --json --timeout S --gradescope
    PATH`, from `folder` (a user's own folder, not the checkout)."""
    results = folder / "results.json"
    function = SKELETON[exercise][1]
    command = [sys.executable, "-m", "specdec.grading", f"{file}:{function}", "--json"]
    command += ["--kind", exercise, "--timeout", str(limit_s), "--gradescope", str(results)]
    done = subprocess.run(
        command,
        cwd=folder,
        env=os.environ | mode.env,
        preexec_fn=mode.preexec,
        capture_output=True,
        text=True,
        timeout=limit_s + 120,
    )
    assert results.is_file(), done.stdout + done.stderr
    data = results.read_bytes()
    return Answer(done.returncode, done.stdout, done.stderr, json.loads(data), len(data))


@pytest.fixture(scope="module")
def graded_alone(mode, class_run) -> dict:
    """Every file of the catalogue and the honest solutions, graded by `specdec grade`, two at
    a time, the slow ones first. The submissions sit side by side in one folder, as an
    instructor's downloads would (the class thief looks for its neighbours). `class_run` is
    asked for only to start the classes first: they grade in the background meanwhile."""
    submissions = open_folder(mode.base / "alone")
    answers_at = open_folder(mode.base / "answers")
    entries = {"honest": ("verify", HONEST), "honest_tree": ("tree", HONEST_TREE)}
    entries |= {h.name: (h.exercise, h) for h in CATALOGUE}
    limits = {"honest": HONEST_LIMIT_S, "honest_tree": HONEST_LIMIT_S}
    limits |= {h.name: STOPPED_LIMIT_S for h in STOPPED}
    files = {
        name: (exercise, hand_in(source, submissions / name / SKELETON[exercise][0]))
        for name, (exercise, source) in entries.items()
    }
    before = fingerprint(submissions)
    with ThreadPoolExecutor(2) as pool:  # in the order of `entries`: the slow ones first
        futures = {
            name: pool.submit(
                grade_alone,
                file,
                exercise,
                open_folder(answers_at / name),
                limits.get(name, ALONE_LIMIT_S),
                mode,
            )
            for name, (exercise, file) in files.items()
        }
        answers = {name: future.result() for name, future in futures.items()}
    return {
        "answers": answers,
        "changed": changes(before, fingerprint(submissions)),
        "leftovers": leftover_workers(),
        "left": left_behind(mode),
    }


@pytest.mark.parametrize("hostile", CATALOGUE, ids=lambda h: h.name)
def test_specdec_grade_gives_each_hostile_file_0_with_its_reason(graded_alone, hostile: Hostile):
    answer = graded_alone["answers"][hostile.name]
    assert answer.returncode in (1, 2), answer.stderr  # 1: failed, 2: not loaded
    assert answer.results["score"] == 0, answer.results["output"]
    assert all(t["score"] == 0 for t in answer.results["tests"]), answer.results
    assert hostile.reason in answer.text and hostile.detail in answer.text, answer.text[:5000]
    if answer.stdout:  # a report was written: the JSON one, saying it failed
        assert json.loads(answer.stdout)["passed"] is False
    assert answer.size <= RESULTS_BOUND
    assert len(answer.stdout) <= RESULTS_BOUND
    assert forged(answer.stdout) == [] and forged(answer_texts(answer.results)) == []


@pytest.mark.parametrize("name", ["honest", "honest_tree"])
def test_specdec_grade_still_gives_the_honest_solutions_full_marks(graded_alone, name):
    answer = graded_alone["answers"][name]
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert json.loads(answer.stdout)["passed"] is True
    full = sum(t["max_score"] for t in answer.results["tests"])
    assert full > 0 and answer.results["score"] == full, answer.results["output"]


def test_specdec_grade_leaves_every_submission_as_it_was(graded_alone):
    assert graded_alone["changed"] == []


def test_specdec_grade_leaves_no_process_of_a_worker(graded_alone):
    assert graded_alone["leftovers"] == []


def test_specdec_grade_leaves_nothing_in_a_temporary_folder(graded_alone):
    assert graded_alone["left"] == []


def test_a_submission_can_neither_write_the_checkout_nor_a_results_file(graded_alone):
    # what the two files that try say they did (their own words, relayed on stderr)
    answers = graded_alone["answers"]
    for name in ("patches_grader", "writes_results"):
        said = printed_lines(answers[name].stderr)
        assert not [line for line in said if "could write" in line or "| wrote" in line], said
    assert not (REPO / "specdec" / "grading" / MARK).exists()


def test_no_attempt_to_leave_the_worker_works(graded_alone):
    said = printed_lines(graded_alone["answers"]["escapes_confinement"].stderr)
    assert not [line for line in said if "ESCAPED" in line], said


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


def test_the_report_names_the_confinement_the_worker_ran_under(graded_alone, mode):
    # the honest grading's results say how its worker was held, as it was in this mode
    said = json.dumps(graded_alone["answers"]["honest"].results)
    expected = "mount namespace" if mode.name == "sys-admin" else "Landlock"
    assert expected in said, said[:3000]


# --------------------------------------------------------------------------------------------
# (c) the Gradescope zip, in a clean venv
# --------------------------------------------------------------------------------------------


def unchanged_tree(root: Path, zipped: Path, handed_in: dict[str, str | Path]) -> list[str]:
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
    submitted = {
        p.name: (Path(p.readlink()) if p.is_symlink() else p.read_text())
        for p in (root / "submission").iterdir()
    }
    if submitted != handed_in:
        differences.append("submission/")
    return sorted(differences)


def zip_files(hostile: Hostile) -> dict[str, str | Path]:
    name = SKELETON[hostile.exercise][0]
    return {name: hostile.link if hostile.link else hostile.file.read_text()}


@pytest.fixture(scope="module")
def graded_by_zip(mode, zip_python, tmp_path_factory) -> dict:
    """Every quick file of the catalogue through its exercise's zip, and the honest tree walk
    (Gradescope's root in a world-readable folder; the venvs are the session's, in pytest's
    private tree)."""
    zips = {e: build_zip(tmp_path_factory.mktemp(f"hostile-zip-{e}"), e) for e in SKELETON}
    python = {e: zip_python(requirements_of(z)) for e, z in zips.items()}
    chosen = [*QUICK, *TREE]
    roots = {h.name: open_folder(mode.base / "gradescope" / h.name) for h in chosen}
    files = {h.name: zip_files(h) for h in chosen}
    exercise = {h.name: h.exercise for h in chosen}
    if mode.full:
        roots["honest_tree"] = open_folder(mode.base / "gradescope" / "honest_tree")
        files["honest_tree"] = {"my_tree.py": HONEST_TREE.read_text()}
        exercise["honest_tree"] = "tree"

    def run(name: str) -> dict:
        e = exercise[name]
        return autograde(zips[e], python[e], roots[name], files[name], mode.env, mode.preexec)

    with ThreadPoolExecutor(2) as pool:
        futures = {n: pool.submit(run, n) for n in sorted(roots, key=lambda n: n != "honest_tree")}
        results = {name: future.result() for name, future in futures.items()}
    return {
        "results": results,
        "changed": {n: unchanged_tree(roots[n], zips[exercise[n]], files[n]) for n in roots},
        "leftovers": leftover_workers(),
        "left": left_behind(mode),
    }


@pytest.mark.parametrize("hostile", (*QUICK, *TREE), ids=lambda h: h.name)
def test_the_zip_gives_each_hostile_file_0_with_its_reason(graded_by_zip, hostile: Hostile):
    results = graded_by_zip["results"][hostile.name]
    text = json.dumps(results)
    assert results["score"] == 0, results["output"]
    assert all(t["score"] == 0 for t in results["tests"]), results
    assert hostile.reason in text and hostile.detail in text, text[:5000]
    assert not any(fake in text for fake in FAKE_LINES)
    assert len(text.encode()) <= RESULTS_BOUND * 1.01  # the file as json.dumps writes it
    assert forged(answer_texts(results)) == []


def test_the_zip_still_gives_the_honest_tree_walk_full_marks(graded_by_zip, mode):
    if not mode.full:
        pytest.skip("without CAP_SYS_ADMIN the honest walk is graded by specdec grade (a)")
    results = graded_by_zip["results"]["honest_tree"]
    full = sum(t["max_score"] for t in results["tests"])
    assert full > 0 and results["score"] == full, results["output"]


def test_the_zip_leaves_its_grader_and_each_submission_as_they_were(graded_by_zip):
    changed = {n: c for n, c in graded_by_zip["changed"].items() if c}
    assert changed == {}


def test_the_zip_leaves_no_process_of_a_worker(graded_by_zip):
    assert graded_by_zip["leftovers"] == []


def test_the_zip_leaves_nothing_in_a_temporary_folder(graded_by_zip):
    assert graded_by_zip["left"] == []


# --------------------------------------------------------------------------------------------
# (b) grade-class, read last: it ran in the background all along
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hostile", CATALOGUE, ids=lambda h: h.name)
def test_grade_class_gives_each_hostile_student_0_with_the_reason(
    class_run, mode, hostile: Hostile
):
    if not mode.in_class(hostile):
        pytest.skip("without CAP_SYS_ADMIN: graded by (a) and (c); the class holds `machine` ones")
    row = class_run.finish()["rows"][hostile.name]
    assert row["score"] == "0" and row["passed"] == "no", row
    assert hostile.reason in row["first_failure"], row


@pytest.mark.parametrize("student", ["bob", "alice"])
def test_grade_class_gives_the_honest_students_full_marks_beside_them(class_run, mode, student):
    if not mode.full:
        pytest.skip("without CAP_SYS_ADMIN the honest ones are graded by specdec grade (a)")
    row = class_run.finish()["rows"][student]
    assert row["score"] == "10" and row["passed"] == "yes", row


def test_grade_class_leaves_every_student_folder_as_it_was(class_run):
    assert class_run.finish()["changed"] == []


def test_grade_class_leaves_no_process_of_a_worker(class_run):
    assert class_run.finish()["leftovers"] == []


def test_grade_class_leaves_nothing_in_a_temporary_folder(class_run):
    assert class_run.finish()["left"] == []


def test_grade_class_keeps_what_a_student_prints_out_of_the_table(class_run):
    tables = class_run.finish()["tables"]
    assert not any(fake in tables for fake in FAKE_LINES)
    assert forged(tables) == []
