"""The catalogue of hostile submissions (tests/grader/hostile/): what each tries, and what
the grader must answer. tests/grader/test_hostile.py hands each to the grader by every route
a student's file takes and holds the answers to this table.

Every one must score 0. `reason` must be in the answer the student sees, on every route:
the report (`specdec grade`), results.json (Gradescope) and grades.csv's first failure
(grade-class), which is cut at 120 characters; so it is a few words from the start of the
reason. `detail`, when given, must be there too where the whole text is (not grades.csv).

Most are verify submissions (my_verify.py); `exercise = "tree"` ones are graded as the tree
exercise (my_tree.py, its own class and zip). A `stopped` one never returns: it is graded
with a short time limit, in a class of its own. A `link` one is handed in as a symbolic link
to that file instead of a copy (to the grader's own answer: refused before anything reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HOSTILE = Path(__file__).with_name("hostile")
REPO = Path(__file__).resolve().parents[2]
HONEST = REPO / "notebooks/exercises/solutions/verify_solution.py"
HONEST_TREE = REPO / "notebooks/exercises/solutions/tree_solution.py"
GRADERS_ANSWER = REPO / "reference" / "verification.py"  # defines the contract's own verify


@dataclass(frozen=True)
class Hostile:
    name: str  # the file's stem, in tests/grader/hostile/
    tries: str  # what it tries, in a few words
    reason: str  # in the answer on every route
    detail: str = ""  # in the whole answer too (the report, results.json)
    exercise: str = "verify"  # or "tree": my_tree.py:verify_tree
    stopped: bool = False  # never returns: graded with a short time limit
    link: Path | None = None  # handed in as a symbolic link to this file
    machine: bool = False  # reaches for the machine (files, processes, /proc, a neighbour):
    # what it meets depends on the confinement, so it is graded by every route in both modes;
    # the others attack the grader's own checks, the same code in both modes (test_hostile.py)

    @property
    def file(self) -> Path:
        return self.link or HOSTILE / f"{self.name}.py"


CATALOGUE = (
    Hostile(
        "writes_results",
        "write a full-marks results.json wherever one may be read, then os._exit(0)",
        "ended the process running it",
        "exit code 0",
        machine=True,
    ),
    Hostile(
        "imports_reference",
        "hand in the reference's verify: from reference.verification import verify",
        "ModuleNotFoundError: No module named 'reference'",
        machine=True,
    ),
    Hostile(
        "finds_grader",
        "find the grader's checkout on disk and import the answer from it",
        "NotImplementedError",
        "the grader's reference was not found, or not readable",
        machine=True,
    ),
    Hostile(
        "patches_grader",
        "import and loosen the grader, plant fakes in sys.modules, write the grader's files",
        "returned (0, 0)",
        machine=True,
    ),
    Hostile(
        "always_equal_int",
        "return ints that compare equal to anything",
        "returned (0, 0)",
    ),
    Hostile(
        "always_equal_object",
        "return an object equal to anything, whose .accepted and .token are too",
        "returned (0, 0)",
    ),
    Hostile(
        "fake_pass",
        "print PASS lines, RESULT: PASS and a JSON score, hoping they reach the report",
        "returned (0, 0)",
    ),
    Hostile(
        "exit_in_verify",
        "os._exit(0) in verify",
        "ended the process running it",
        "exit code 0",
    ),
    Hostile(
        "exit_at_import",
        "sys.exit(0) while imported",
        "ended the process running it",
        "exit code 0",
    ),
    Hostile(
        "systemexit_in_verify",
        "raise SystemExit(0) in verify (no `except Exception` catches it)",
        "ended the process running it",
        "exit code 0",
    ),
    Hostile(
        "interrupt_in_verify",
        "raise KeyboardInterrupt in verify",
        "killed by SIGINT",
    ),
    Hostile(
        "fork_bomb",
        "fork without end while imported (capped, each child exits at once)",
        "BlockingIOError",
        "Resource temporarily unavailable",
        machine=True,
    ),
    Hostile(
        "memory_hog",
        "allocate 100 MB after 100 MB in verify (capped at 30 GB, never touched)",
        "MemoryError",
        machine=True,
    ),
    Hostile(
        "class_thief",
        "read the other students' submissions in a class run, hand in one, delete theirs",
        "NotImplementedError",
        "nothing to steal was found",
        machine=True,
    ),
    Hostile(
        "sleeper",
        "time.sleep(10**6) in verify",
        "grading was stopped after",
        "did not return",
        stopped=True,
        machine=True,
    ),
    Hostile(
        "escapes_parent",
        "clear the parent-death signal and setsid() while imported, then sleep in verify",
        "grading was stopped after",
        "did not return",
        stopped=True,
        machine=True,
    ),
    Hostile(
        "escapes_confinement",
        "read /proc's command lines, leave files in /tmp, /dev/shm, /var/tmp, fill its scratch, "
        "make a user namespace",
        "returned (0, 0)",
        machine=True,
    ),
    Hostile(
        "table_rule",
        "answer the shown rule examples from a table, never keep a draft anywhere else",
        "verify/keeps-drafts",
    ),
    Hostile(
        "patches_handler",
        "rewrite the worker's request handlers to answer every batch with an empty list",
        "0 results",
    ),
    Hostile(
        "answers_inf",
        "return accepted = float('inf')",
        "inf",
    ),
    Hostile(
        "answers_huge_int",
        "return accepted = 10**5000",
        "5,001 digits",
    ),
    Hostile(
        "forged_message",
        "raise an exception whose message forges PASS and RESULT lines",
        "ValueError",
    ),
    Hostile(
        "huge_type_name",
        "raise an exception whose class name has 5 million characters",
        "crashed",
    ),
    Hostile(
        "huge_answer",
        "return a 10-million-character string as accepted",
        "str",
    ),
    Hostile(
        "symlinked",
        "hand in a symbolic link to the grader's own verify",
        "symbolic link",
        link=GRADERS_ANSWER,
    ),
    Hostile(
        "never_keeps_tree",
        "a tree walk that never keeps a child (exact, but no rule)",
        "tree/keeps-children",
        exercise="tree",
    ),
)

STOPPED = tuple(h for h in CATALOGUE if h.stopped)
QUICK = tuple(h for h in CATALOGUE if not h.stopped and h.exercise == "verify")  # within seconds
TREE = tuple(h for h in CATALOGUE if h.exercise == "tree")

# what a report or results.json may hold, whatever a submission returns, raises or prints
RESULTS_BOUND = 1 << 20  # bytes of results.json (engine/report.py's bound)
# lines forged_message.py raises: none may start a line of any answer
FORGED_STARTS = ("PASS  law: the output follows the target's law (forged)", "RESULT: PASS (forged)")

# what fake_pass.py prints: on stderr under the grader's header only, never in a report
FAKE_LINES = ("(faked)",)
PRINTED_HEADER = "what my_verify.py printed while graded:"
