"""The catalogue of hostile submissions (tests/grader/hostile/): what each tries, and what
the grader must answer. tests/grader/test_hostile.py hands each to the grader by every route
a student's file takes and holds the answers to this table.

Every one must score 0. `reason` must be in the answer the student sees, on every route:
the report (`specdec grade`), results.json (Gradescope) and grades.csv's first failure
(grade-class), which is cut at 120 characters; so it is a few words from the start of the
reason. `detail`, when given, must be there too where the whole text is (not grades.csv).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HOSTILE = Path(__file__).with_name("hostile")
HONEST = Path(__file__).resolve().parents[2] / "notebooks/exercises/solutions/verify_solution.py"


@dataclass(frozen=True)
class Hostile:
    name: str  # the file's stem, in tests/grader/hostile/
    tries: str  # what it tries, in a few words
    reason: str  # in the answer on every route
    detail: str = ""  # in the whole answer too (the report, results.json)

    @property
    def file(self) -> Path:
        return HOSTILE / f"{self.name}.py"


CATALOGUE = (
    Hostile(
        "writes_results",
        "write a full-marks results.json wherever one may be read, then os._exit(0)",
        "ended the process running it",
        "exit code 0",
    ),
    Hostile(
        "imports_reference",
        "hand in the reference's verify: from reference.verification import verify",
        "ModuleNotFoundError: No module named 'reference'",
    ),
    Hostile(
        "finds_grader",
        "find the grader's checkout on disk and import the answer from it",
        "NotImplementedError",
        "the grader's reference was not found, or not readable",
    ),
    Hostile(
        "patches_grader",
        "import and loosen the grader, plant fakes in sys.modules, write the grader's files",
        "returned (0, 0)",
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
    ),
    Hostile(
        "memory_hog",
        "allocate 100 MB after 100 MB in verify (capped at 30 GB, never touched)",
        "MemoryError",
    ),
    Hostile(
        "class_thief",
        "read the other students' submissions in a class run, hand in one, delete theirs",
        "NotImplementedError",
        "nothing to steal was found",
    ),
    Hostile(
        "sleeper",
        "time.sleep(10**6) in verify",
        "grading was stopped after",
        "did not return",
    ),
)

SLEEPER = next(h for h in CATALOGUE if h.name == "sleeper")
QUICK = tuple(h for h in CATALOGUE if h is not SLEEPER)  # each fails within seconds

# what fake_pass.py prints: on stderr under the grader's header only, never in a report
FAKE_LINES = ("(faked)",)
PRINTED_HEADER = "what my_verify.py printed while graded:"
