"""The submitted function: loading it, telling a `verify` from a loop, and calling it safely.

A crash in the submission is caught once, where it is called, and turned into a
`SubmissionCrash` that names the student's own line (the traceback with the grader's frames
stripped), the call (shapes, k) and the inputs that caused it; a crash that passes through the
grader's own loop is not wrapped again. `call_verify` also holds a submitted verify to its
contract and hands it float64 rows normalised to sum 1; both the verify checks and the in-loop
checks call it from here.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.grading.exercises import EXERCISES, KINDS, kind_of_name

# what a bare file is searched for: verify and the loop first (the exercises graded most)
EXERCISE_NAMES = tuple(
    dict.fromkeys(["verify", "speculative_generate", *(e.function for e in EXERCISES)])
)


@dataclass(frozen=True)
class Submission:
    spec: str  # what the user typed, e.g. my_verify.py:verify
    function: Callable
    kind: str  # "verify" or "loop"
    kind_reason: str  # how the kind was decided, for the report
    source: str | None  # the file the function lives in, to find the student's line


class SubmissionCrash(Exception):
    """The submission raised: where (the student's deepest frame), in which call, on what."""

    def __init__(
        self,
        error: BaseException,
        where: str,
        inputs: str,
        call: str = "",
        frames: list[str] | None = None,
        hint: str = "",
    ) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error, self.where, self.inputs, self.call = error, where, inputs, call
        self.frames, self.hint = frames or [], hint

    def key(self) -> tuple:
        # the same mistake met by several checks is reported once
        return type(self.error).__name__, str(self.error), self.where

    def describe(self) -> str:
        lines = [
            f"your code raised {type(self.error).__name__}: {self.error}",
            f"  at {self.where}",
        ]
        if self.call:
            lines.append(f"  in the call {self.call}")
        if len(self.frames) > 1:  # one frame is the line above
            lines += ["  traceback (your code only):", *("    " + f for f in self.frames)]
        lines += ["  on the inputs", self.inputs]
        if self.hint:
            lines += textwrap.wrap(
                f"hint: {self.hint}", 96, initial_indent="  ", subsequent_indent="    "
            )
        return "\n".join(lines)


def load_submission(spec: str, kind: str = "auto") -> Submission:
    """'path/to/file.py:function', 'path/to/file.py' or 'package.module:function' -> Submission.

    Raises ValueError saying what to change when the spec cannot be loaded.
    """
    where, sep, name = str(spec).rpartition(":")
    if not sep:  # a bare file: the one exercise function it defines (`verify` first)
        where, name = str(spec), ""
    if not where:
        raise ValueError(f"{spec!r}: expected PATH.py:FUNCTION, e.g. my_verify.py:verify")
    if where.endswith(".py") or "/" in where or "\\" in where:
        module, source = module_from_file(Path(where), spec), str(Path(where).resolve())
    else:
        module = module_from_name(where, spec)
        source = getattr(module, "__file__", None)
    if not name:
        name = next((n for n in EXERCISE_NAMES if hasattr(module, n)), "")
        if not name:
            raise ValueError(
                f"{spec!r}: the file defines no exercise's function ({', '.join(EXERCISE_NAMES)}"
                f"); name the function: {where}:FUNCTION"
            )
    function = getattr(module, name, None)
    if function is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and n[0] != "_")
        raise ValueError(
            f"{spec!r}: {where} has no function {name!r} (it defines: "
            f"{', '.join(public[:12]) or 'no functions'})"
        )
    if not callable(function):
        raise ValueError(f"{spec!r}: {name} is a {type(function).__name__}, not a function")
    kind, reason = decide_kind(function, kind)
    return Submission(str(spec), function, kind, reason, source)


def module_from_file(path: Path, spec: str):
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"{spec!r}: no such file {path}")
    module_name = f"_specdec_graded_{path.stem}_{abs(hash(str(path)))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ValueError(f"{spec!r}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        if isinstance(error, SyntaxError):  # no frame of the student's file: read the error
            line = f"{path.name}, line {error.lineno}: {(error.text or '').strip()}"
        else:
            line = student_line(error, str(path))
        raise ValueError(
            f"{spec!r}: importing {path.name} raised {type(error).__name__}: {error} ({line})"
        ) from error
    return module


def module_from_name(name: str, spec: str):
    cwd = str(Path.cwd())
    added = cwd not in sys.path
    if added:  # `specdec` (unlike `python -m`) leaves the current directory off sys.path
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except Exception as error:
        raise ValueError(
            f"{spec!r}: cannot import module {name!r} ({type(error).__name__}: {error}); give "
            f"a module on sys.path or a path/to/file.py"
        ) from error
    finally:
        if added:
            sys.path.remove(cwd)


def decide_kind(function: Callable, kind: str) -> tuple[str, str]:
    """An exercise's kind (specdec/grading/exercises.py), from --kind, from the function's name
    (the name its skeleton defines), or, for a verify or a loop, from its parameters."""
    if kind in KINDS:
        return kind, "--kind"
    if kind != "auto":
        raise ValueError(f"--kind must be auto or one of {', '.join(KINDS)}, got {kind!r}")
    named = kind_of_name(getattr(function, "__name__", ""))
    if named:
        return named, f"its name, {function.__name__}, is the {named} exercise's"
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        parameters = []
    names = [p.name for p in parameters]
    for loop_name in ("drafter", "max_new_tokens"):
        if loop_name in names:
            return "loop", f"its signature has {loop_name}"
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if len(positional) == 4 or len(required) == 4:
        return "verify", "its signature takes four arguments, like verify(p, q, drafts, rng)"
    raise ValueError(
        f"cannot tell from its signature ({', '.join(names) or 'unknown'}) whether "
        f"{getattr(function, '__name__', 'the function')} is a verify, a whole loop or "
        f"another exercise; say which with --kind ({', '.join(KINDS)})"
    )


def student_line(error: BaseException, source: str | None) -> str:
    """'file.py, line N, in f: <code>' for the deepest frame in the student's file."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = student_frames(frames, source)
    frame = (mine or frames or [None])[-1]
    if frame is None:
        return "no traceback"
    return f"{Path(frame.filename).name}, line {frame.lineno}, in {frame.name}: {frame.line}"


def student_frames(frames: list, source: str | None) -> list:
    # the frames in the submitted file (the grader's and the libraries' are left out)
    if not source:
        return []
    here = Path(source).resolve()
    return [f for f in frames if Path(f.filename).resolve() == here]


def shown_frames(error: BaseException, source: str | None) -> list[str]:
    # the traceback of the student's own frames, as Python prints them
    return [
        f"File {Path(f.filename).name!r}, line {f.lineno}, in {f.name}: {f.line}"
        for f in student_frames(traceback.extract_tb(error.__traceback__), source)
    ]


def show_inputs(**inputs) -> str:
    # the arguments of a crashed call, small enough to read
    lines = []
    with np.printoptions(precision=4, suppress=True, linewidth=90):
        for name, value in inputs.items():
            text = repr(np.asarray(value)) if isinstance(value, (np.ndarray, list)) else repr(value)
            lines.append(f"    {name} = " + text.replace("\n", "\n" + " " * (len(name) + 7)))
    return "\n".join(lines)


def describe_call(name: str, shown: dict) -> str:
    # "verify(p_target [3, 4] float64, ...)": the shapes of a crashed call, at a glance
    parts = []
    for key, value in shown.items():
        if isinstance(value, np.ndarray):
            parts.append(f"{key} {list(value.shape)} {value.dtype}")
        else:
            parts.append(f"{key}={value!r}")
    drafts = shown.get("draft_tokens")
    k = f", k = {len(drafts)}" if isinstance(drafts, np.ndarray) else ""
    return f"{name}({', '.join(parts)}, rng){k}"


def crash_hint(error: BaseException, shown: dict) -> str:
    """A hint for the crashes a correct idea commonly meets."""
    drafts = shown.get("draft_tokens")
    if isinstance(drafts, np.ndarray) and len(drafts) == 0:
        return (
            "k = 0 here: no drafts (the loop asks so when one token is left to generate). The "
            "contract: verify returns (0, a sample of p_target[0]) — loops over range(k) must "
            "not assume k >= 1, and q_draft has shape [0, V]"
        )
    if isinstance(error, ValueError) and "do not sum to 1" in str(error):
        return (
            "the rows you receive are float64 and sum to 1, so a vector you built yourself "
            "(a residual max(0, p - q)) is not normalised: divide it by its sum before "
            "rng.choice(V, p=...)"
        )
    return ""


def call_safely(submission: Submission, args: tuple, kwargs: dict, shown: dict, name: str = ""):
    """Call the submission; a raise becomes a SubmissionCrash naming the student's line."""
    try:
        return submission.function(*args, **kwargs)
    except SubmissionCrash:
        raise  # a crash of the student's verify inside the grader's loop: reported as it was
    except Exception as error:
        where = student_line(error, submission.source)
        raise SubmissionCrash(
            error,
            where,
            show_inputs(**shown),
            describe_call(name or getattr(submission.function, "__name__", "f"), shown),
            shown_frames(error, submission.source),
            crash_hint(error, shown),
        ).with_traceback(None) from None


def normalised(rows: np.ndarray) -> np.ndarray:
    # [n, V] -> float64 rows that sum to 1 (the contract: `rng.choice(V, p=row)` works on them)
    rows = np.array(rows, dtype=np.float64)
    if rows.size:
        rows /= rows.sum(axis=1, keepdims=True)
    return rows


def call_verify(
    sub: Submission, P: np.ndarray, Q: np.ndarray, drafts: tuple[int, ...], rng: np.random.Generator
) -> tuple[int, int]:
    # P [k+1, V], Q [k, V], drafts [k] -> (accepted, token), checked against the contract.
    # Fresh float64 copies go in, each row normalised to sum 1 (the loop's rows are float32),
    # so a submission that edits its arguments cannot spoil the grader's rows.
    P, Q = normalised(P), normalised(Q).reshape(len(drafts), P.shape[1])
    tokens = np.asarray(drafts, dtype=np.int64)
    shown = {"p_target": P, "q_draft": Q, "draft_tokens": tokens}
    result = call_safely(sub, (P.copy(), Q.copy(), tokens.copy(), rng), {}, shown, "verify")
    k, V = len(drafts), P.shape[1]
    if hasattr(result, "accepted") and hasattr(result, "token"):
        accepted, token = result.accepted, result.token
    elif isinstance(result, (tuple, list)) and len(result) == 2:
        accepted, token = result
    else:
        raise contract_breach(
            f"verify must return (accepted, token) or an object with .accepted and .token; "
            f"it returned {result!r}",
            shown,
        )
    try:
        accepted, token = int(accepted), int(token)
    except (TypeError, ValueError) as error:
        message = f"verify returned non-integers ({accepted!r}, {token!r})"
        raise contract_breach(message, shown) from error
    if not 0 <= accepted <= k or not 0 <= token < V:
        raise contract_breach(
            f"verify returned ({accepted}, {token}); accepted must be in 0..k = 0..{k} and "
            f"token in 0..V-1 = 0..{V - 1}",
            shown,
        )
    return accepted, token


def contract_breach(message: str, shown: dict) -> SubmissionCrash:
    return SubmissionCrash(
        ValueError(message),
        "the value your verify returned",
        show_inputs(**shown),
        describe_call("verify", shown),
        hint=crash_hint(ValueError(message), shown),
    )
