"""`grade(spec)`: a submission loaded (in a worker), its exercise's families of checks run.

The one call every way of grading goes through: `specdec grade` and `python -m
specdec.grading` (delivery/cli.py), the child each class or Gradescope run starts
(delivery/gradescope.py), a notebook's `from specdec.grading import grade`.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from specdec.grading.engine.config import GradingConfig
from specdec.grading.engine.core import Grade, run_families
from specdec.grading.engine.sandbox import offering
from specdec.grading.engine.secret import secret_held
from specdec.grading.engine.submission import load_submission
from specdec.grading.exercises import families_of, revise_of

POLICIES = ("shrink", "full")


def grade(
    spec: str,
    kind: str = "auto",
    policy: str = "shrink",
    config: GradingConfig | None = None,
    threads: int = 1,
    isolated: bool = True,
) -> Grade:
    """Load the function named by `spec` and run its families of checks.

    A file runs in a worker process (sandbox.py); `isolated=False` imports it here, for
    trusted code only. BLAS and torch are held to `threads` threads while the submission is
    loaded and graded: with as many threads as cores, any other busy process makes them wait
    for each other. Each grading draws its scored checks' inputs from a secret of its own
    (engine/secret.py; SPECDEC_GRADING_SECRET pins it, to grade again on the same inputs).
    """
    if policy not in POLICIES:
        raise ValueError(f"--policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    config = config or GradingConfig()
    from threadpoolctl import threadpool_limits

    # the config's `libraries` are offered to the submission's worker, beside its exercise's
    with threadpool_limits(limits=threads, user_api="blas"), offering(config.libraries):
        submission = load_submission(spec, kind, threads, isolated)
        try:
            with torch_threads(threads), secret_held():  # torch: the module may import it
                families = families_of(submission.kind, policy, config.require_rule)
                result = run_families(submission, families, revise_of(submission.kind))
        finally:
            submission.close()
            show_output(submission)
    result.counted = config.counted()
    return result


def show_output(submission) -> None:
    """What a submitted file printed in its worker, on stderr, marked as its own: never
    mixed with the report (a printed "PASS" is the student's text, not a verdict)."""
    printed = submission.sandbox.output() if submission.sandbox is not None else ""
    if printed.strip():
        lines = printed.rstrip("\n").splitlines()
        print(f"what {Path(submission.source or '').name} printed while graded:", file=sys.stderr)
        print("\n".join(f"  | {line}" for line in lines), file=sys.stderr)


@contextlib.contextmanager
def torch_threads(threads: int):
    """Hold torch (if the submission imported it) to `threads` intra-op threads, then restore."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
