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
import os
import stat
import sys
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.grading.engine import quoting
from specdec.grading.engine.replies import (
    BadReply,
    RemoteError,
    signature_of,
    whole_number,
)
from specdec.grading.engine.sandbox import RemoteFunction, Sandbox, WorkerEnded
from specdec.grading.engine.secret import grader_rng, submission_rng
from specdec.grading.engine.worker_setup import not_dumpable
from specdec.grading.exercises import EXERCISES, KINDS, exercise, kind_of_name

# what a bare file is searched for: verify and the loop first (the exercises graded most)
EXERCISE_NAMES = tuple(
    dict.fromkeys(["verify", "speculative_generate", *(e.function for e in EXERCISES)])
)


@dataclass(frozen=True)
class Submission:
    spec: str  # what the user typed, e.g. my_verify.py:verify
    function: Callable  # a submitted file's: a RemoteFunction, run in the worker
    kind: str  # "verify" or "loop"
    kind_reason: str  # how the kind was decided, for the report
    source: str | None  # the file the function lives in, to find the student's line
    sandbox: Sandbox | None = None  # the worker it runs in (None: in this process, trusted)

    def close(self) -> None:
        """Stop the worker, if the function runs in one."""
        if self.sandbox is not None:
            self.sandbox.close()


class LoadError(ValueError):
    """The submitted file cannot be loaded (no such file, a link, a syntax error, no such
    function, a raise while imported): raised only there, so that no other ValueError met
    while grading is ever reported as "could not be loaded"."""


ENDED_WHERE = "the process running your code"  # where a crash is when no frame says more


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

    def headline(self) -> str:
        """The crash in one line, for whatever summarises a grade (a family's verdict, the
        JSON and Gradescope reports, a class's table): what was raised and at which line of
        the student's file; or which returned value broke the contract. The message's first
        line only, cut (the student's text never starts a line of a report)."""
        name = type(self.error).__name__
        if ", line " in self.where:  # 'file.py, line N, in f: <code>': the file and line
            return f"crashed: your code raised {name} at {self.where.split(': ', 1)[0]}"
        message = quoting.one_line((str(self.error).strip().splitlines() or [""])[0], 500)
        if self.where.startswith("the value your"):
            return f"{self.where} broke the contract: {message}"
        if self.where == ENDED_WHERE and message:  # the message says it all ("the process
            # running your code was killed by SIGINT"), in a table's 120 characters too
            return f"crashed: {message}"
        return f"crashed: {name} in {self.where}" + (f": {message}" if message else "")

    def describe(self) -> str:
        # the message on the first line when it is one line, else quoted line by line below
        # it ("  > "): a message cannot forge a line of the report ("RESULT: PASS")
        lines = [
            f"your code raised {type(self.error).__name__}{quoting.message(str(self.error))}",
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


def load_submission(
    spec: str, kind: str = "auto", threads: int = 1, isolated: bool = True
) -> Submission:
    """'path/to/file.py:function', 'path/to/file.py' or 'package.module:function' -> Submission.

    A file (what students hand in) is loaded and run in a worker process (sandbox.py), never
    in this one. A module name is imported here: that is for code you trust (the reference,
    your own tests), never for a submission. Raises LoadError (a ValueError) saying what to
    change when the spec cannot be loaded. `isolated=False` imports a file here too: for
    trusted code only (the project's tests grade their own modules of broken variants so).
    """
    where, sep, name = str(spec).rpartition(":")
    if not sep:  # a bare file: the one exercise function it defines (`verify` first)
        where, name = str(spec), ""
    if not where:
        raise LoadError(f"{spec!r}: expected PATH.py:FUNCTION, e.g. my_verify.py:verify")
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    if is_file and isolated:
        return load_file(spec, Path(where), name, kind, threads)
    if is_file:
        module, source = module_from_file(Path(where), spec), str(Path(where).resolve())
    else:
        module = module_from_name(where, spec)
        source = getattr(module, "__file__", None)
    if not name:
        name = next((n for n in EXERCISE_NAMES if hasattr(module, n)), "")
        if not name:
            raise LoadError(
                f"{spec!r}: the file defines no exercise's function ({', '.join(EXERCISE_NAMES)}"
                f"); name the function: {where}:FUNCTION"
            )
    function = getattr(module, name, None)
    if function is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and n[0] != "_")
        raise LoadError(
            f"{spec!r}: {where} has no function {name!r} (it defines: "
            f"{', '.join(public[:12]) or 'no functions'})"
        )
    if not callable(function):
        raise LoadError(f"{spec!r}: {name} is a {type(function).__name__}, not a function")
    kind, reason = decide_kind(function, kind)
    return Submission(str(spec), function, kind, reason, source)


def load_file(spec: str, path: Path, name: str, kind: str, threads: int) -> Submission:
    """A submitted file, loaded in a worker that holds the libraries its exercise allows.

    The kind decides the libraries, and a function without an exercise's name shows its kind
    only once loaded: then a worker with NumPy alone loads it first, and if the kind needs
    more (the loop's pieces of `reference`), a second worker is started for it."""
    path = path.expanduser()
    refused = file_problem(path)  # before anything reads it: a link is not followed
    if refused:
        raise LoadError(f"{spec!r}: {refused}")
    path = path.resolve()  # its folder's links only: the file itself is none
    if kind not in KINDS and kind != "auto":
        raise LoadError(f"--kind must be auto or one of {', '.join(KINDS)}, got {kind!r}")
    not_dumpable()  # a worker run as this user cannot read this process
    guess = kind if kind in KINDS else kind_of_name(name) or "verify"
    function = load_in_worker(spec, path, name, guess, threads)
    try:
        kind, reason = decide_kind(function, kind)
    except ValueError:
        function.sandbox.close()
        raise
    if needs(kind) != needs(guess):
        function.sandbox.close()
        function = load_in_worker(spec, path, function.__name__, kind, threads)
    return Submission(str(spec), function, kind, reason, str(path), function.sandbox)


def file_problem(path: Path) -> str:
    """Why `path` is not a submission to read ("" when it is one): it must be a regular
    file itself, not a symbolic link (one pointing into the grader's own source would be
    read, and quoted, by the grading side) nor a folder, a device or a pipe. lstat, so that
    nothing is followed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return f"no such file {quoting.one_line(str(path))}"
    except OSError as error:
        return f"{quoting.one_line(path.name)} cannot be read ({error.strerror})"
    name = quoting.one_line(path.name)
    if stat.S_ISLNK(mode):
        return f"{name} is a symbolic link; upload the file itself"
    if stat.S_ISDIR(mode):
        return f"{name} is a folder, not a file"
    if not stat.S_ISREG(mode):
        return f"{name} is not a regular file; upload the file itself"
    return ""


def needs(kind: str) -> tuple:
    chosen = exercise(kind)
    return chosen.libraries, chosen.pieces


def load_in_worker(spec: str, path: Path, name: str, kind: str, threads: int) -> RemoteFunction:
    libraries, pieces = needs(kind)
    sandbox = Sandbox(path, libraries, pieces, threads=threads)
    try:
        info = sandbox.load([name] if name else list(EXERCISE_NAMES))
    except (RemoteError, WorkerEnded) as error:
        sandbox.close()
        raise LoadError(load_error(spec, path, error)) from None
    except BaseException:
        sandbox.close()
        raise
    if not isinstance(info, dict) or not info.get("found"):
        sandbox.close()
        raise LoadError(not_found(spec, path, name, info))
    described = info.get("name"), info.get("parameters")
    try:
        signature = signature_of(described[1])
    except (TypeError, ValueError, OverflowError):  # not [name, kind, has_default] triples
        signature = None
    if not (isinstance(described[0], str) and described[0].isidentifier()):
        sandbox.close()
        named = quoting.shown_value(described[0])
        raise LoadError(f"{spec!r}: the worker named the function {named}")
    return RemoteFunction(sandbox, 0, quoting.type_name(described[0], "function"), signature)


def load_error(spec: str, path: Path, error: BaseException) -> str:
    """Why the file could not be imported, in the words the student needs (the message on
    one line, or quoted line by line below it)."""
    if isinstance(error, WorkerEnded):
        return f"{spec!r}: importing {path.name} ended the process running it ({error})"
    if type(error).__name__ in ("SyntaxError", "IndentationError", "TabError"):
        line = f"{path.name}, line {error.lineno}: {error.text or ''}"
    else:
        line = student_line(error, str(path))
    said = quoting.message(str(error))
    if "\n" in said:  # several lines: where first, then the quoted message
        return f"{spec!r}: importing {path.name} raised {type(error).__name__} ({line}){said}"
    return f"{spec!r}: importing {path.name} raised {type(error).__name__}{said} ({line})"


def not_found(spec: str, path: Path, name: str, info) -> str:
    """Why the worker found no function to grade. What it says of the file (its names, a
    type, a module) is the submission's to forge: each piece is shown cut, on one line."""
    if not isinstance(info, dict):
        said = quoting.shown_value(info)
        return f"{spec!r}: the worker answered {said} when asked for the function"

    def said(key: str) -> str:
        return quoting.one_line(info.get(key), 100)

    if "defines" in info:
        if not name:
            return (
                f"{spec!r}: the file defines no exercise's function ({', '.join(EXERCISE_NAMES)}"
                f"); name the function: {path.name}:FUNCTION"
            )
        names = info["defines"] if isinstance(info["defines"], list) else []
        listed = ", ".join(quoting.one_line(n, 100) for n in names[:12])
        return f"{spec!r}: {path} has no function {name!r} (it defines: {listed or 'no functions'})"
    if "not_callable" in info:
        return f"{spec!r}: {said('name')} is a {said('not_callable')}, not a function"
    return (
        f"{spec!r}: {said('name')} is not defined in {path.name} (it comes from "
        f"{said('elsewhere')}): write {said('name')} yourself, in the file you hand in"
    )


def module_from_file(path: Path, spec: str):
    path = path.expanduser()
    refused = file_problem(path)
    if refused:
        raise LoadError(f"{spec!r}: {refused}")
    path = path.resolve()
    module_name = f"_specdec_graded_{path.stem}_{abs(hash(str(path)))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise LoadError(f"{spec!r}: cannot load {path} as a Python module")
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
        raise LoadError(
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
        raise LoadError(
            f"{spec!r}: cannot import module {name!r} ({type(error).__name__}: {error}); give "
            f"a module on sys.path or a path/to/file.py"
        ) from error
    finally:
        if added:
            sys.path.remove(cwd)


def decide_kind(function: Callable, kind: str) -> tuple[str, str]:
    """An exercise's kind (the registry: exercises/__init__.py), from --kind, from the function's
    name (the name its skeleton defines), or, for a verify or a loop, from its parameters."""
    if kind in KINDS:
        return kind, "--kind"
    if kind != "auto":
        raise LoadError(f"--kind must be auto or one of {', '.join(KINDS)}, got {kind!r}")
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
    listed = quoting.one_line(", ".join(names)) or "unknown"
    raise LoadError(
        f"cannot tell from its signature ({listed}) whether "
        f"{getattr(function, '__name__', 'the function')} is a verify, a whole loop or "
        f"another exercise; say which with --kind ({', '.join(KINDS)})"
    )


def student_line(error: BaseException, source: str | None) -> str:
    """'file.py, line N, in f: <code>' for the deepest frame in the student's file."""
    if isinstance(error, RemoteError):  # the worker sent the frames of the submitted file
        frame = (error.frames or error.last or [None])[-1]
        if frame is None:
            return "no traceback"
        name, line, function, code = frame
        return f"{name}, line {line}, in {function}: {code}"
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
    if isinstance(error, RemoteError):
        return [f"File {n!r}, line {line}, in {f}: {code}" for n, line, f, code in error.frames]
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


def call_safely(
    submission: Submission, args: tuple, kwargs: dict, shown: dict, name: str = "", repeat: int = 0
):
    """Call the submission; a raise becomes a SubmissionCrash naming the student's line.

    `repeat` (a function in a worker): that many calls in one request, each on fresh copies
    of the arrays, sharing the generators -> the list of results."""
    try:
        if repeat:
            return submission.function.repeat(args, kwargs, repeat)
        return submission.function(*args, **kwargs)
    except SubmissionCrash:
        raise  # a crash of the student's verify inside the grader's loop: reported as it was
    except Exception as error:
        raise crash_of(submission, error, shown, name).with_traceback(None) from None


def call_each_safely(
    submission: Submission,
    calls: list[tuple],
    tail: tuple,
    shown_of: Callable,
    name: str,
    describe: Callable | None = None,
    fresh: Callable = lambda args: tuple(a.copy() for a in args),
) -> list:
    """One call per tuple of arguments, each followed by `tail` (the generator they share), in
    order -> the results. A function in a worker makes them in one request (what it is handed
    is rebuilt there, a copy by nature); one here gets `fresh(args)`, so that a call that
    edits its arguments cannot spoil the grader's. A raise becomes a SubmissionCrash on the
    inputs of the call that raised (`shown_of(i)`, and `describe(i)` for its call's line)."""
    index = 0
    try:
        if isinstance(submission.function, RemoteFunction):
            return submission.function.each(calls, tail)
        results = []
        for index in range(len(calls)):  # noqa: B007 (the except below reads it)
            results.append(submission.function(*fresh(calls[index]), *tail))
        return results
    except SubmissionCrash:
        raise
    except Exception as error:
        told = getattr(error, "call", None)  # the worker says which call raised
        if isinstance(told, int) and 0 <= told < len(calls):
            index = told
        crash = crash_of(submission, error, shown_of(index), name)
        if describe is not None:
            crash.call = describe(index)
        raise crash.with_traceback(None) from None


def crash_of(submission: Submission, error: Exception, shown: dict, name: str) -> SubmissionCrash:
    """The submission raised `error` (or its worker ended) on the inputs `shown`."""
    call = describe_call(name or getattr(submission.function, "__name__", "f"), shown)
    where = student_line(error, submission.source)
    if isinstance(error, (WorkerEnded, BadReply)) or where == "no traceback":  # no frame:
        # it exited, was killed, broke or rewrote the exchange (what it returned was refused)
        return SubmissionCrash(error, ENDED_WHERE, show_inputs(**shown), call)
    return SubmissionCrash(
        error,
        where,
        show_inputs(**shown),
        call,
        shown_frames(error, submission.source),
        crash_hint(error, shown),
    )


def normalised(rows: np.ndarray) -> np.ndarray:
    # [n, V] -> float64 rows that sum to 1 (the contract: `rng.choice(V, p=row)` works on them)
    rows = np.array(rows, dtype=np.float64)
    if rows.size:
        rows /= rows.sum(axis=1, keepdims=True)
    return rows


# calls per request where a check calls a verify on the same rows with one generator: it
# divides every look of those checks (800 and 4 000 calls), so that no look makes more calls
# than it reads
CHUNK = 200


def streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Two independent generators, number `seed` of this grading: the grader's draws, from its
    secret, and the submission's, from entropy drawn apart from it (secret.py)."""
    return grader_rng(seed), submission_rng(seed)


def call_verify(
    sub: Submission, P: np.ndarray, Q: np.ndarray, drafts: tuple[int, ...], rng: np.random.Generator
) -> tuple[int, int]:
    # P [k+1, V], Q [k, V], drafts [k] -> (accepted, token), checked against the contract.
    # Fresh float64 copies go in, each row normalised to sum 1 (the loop's rows are float32),
    # so a submission that edits its arguments cannot spoil the grader's rows.
    return call_verify_many(sub, P, Q, drafts, rng, 1)[0]


def call_verify_many(
    sub: Submission,
    P: np.ndarray,
    Q: np.ndarray,
    drafts: tuple[int, ...],
    rng: np.random.Generator,
    n: int,
) -> list[tuple[int, int]]:
    # n calls on the same rows, one after the other with the one rng -> n (accepted, token):
    # the same calls, in the same order, as n call_verify; a worker makes them in one request
    shown = verify_inputs(P, Q, drafts)
    P, Q, tokens = shown.values()
    if isinstance(sub.function, RemoteFunction) and n > 1:  # it copies the rows per call
        results = call_safely(sub, (P, Q, tokens, rng), {}, shown, "verify", repeat=n)
    else:
        results = [
            call_safely(sub, (P.copy(), Q.copy(), tokens.copy(), rng), {}, shown, "verify")
            for _ in range(n)
        ]
    return [verify_contract(result, shown) for result in results]


def verify_inputs(P: np.ndarray, Q: np.ndarray, drafts) -> dict:
    # P [k+1, V], Q [k, V], drafts [k] -> what a verify is handed (and a crash report shows):
    # float64 rows that sum to 1 (the loop's are float32), the drafts as int64
    P = normalised(P)
    Q = normalised(Q).reshape(len(drafts), P.shape[1])
    return {"p_target": P, "q_draft": Q, "draft_tokens": np.asarray(drafts, dtype=np.int64)}


def call_verify_each(
    sub: Submission, calls: list[tuple], rng: np.random.Generator
) -> list[tuple[int, int]]:
    # calls [(P, Q, drafts)], one after the other with the one rng -> their (accepted, token):
    # the calls of len(calls) call_verify, made in one request when the verify is in a worker
    shown = [verify_inputs(P, Q, drafts) for P, Q, drafts in calls]
    arguments = [tuple(s.values()) for s in shown]
    results = call_each_safely(sub, arguments, (rng,), shown.__getitem__, "verify")
    return [verify_contract(r, s) for r, s in zip(results, shown, strict=True)]


def verify_contract(result, shown: dict) -> tuple[int, int]:
    """What a verify returned -> (accepted, token) as ints, or the contract it broke."""
    k, V = len(shown["draft_tokens"]), shown["p_target"].shape[1]
    if hasattr(result, "accepted") and hasattr(result, "token"):
        accepted, token = result.accepted, result.token
    elif isinstance(result, (tuple, list)) and len(result) == 2:
        accepted, token = result
    else:
        raise contract_breach(
            f"verify must return (accepted, token) or an object with .accepted and .token; "
            f"it returned {quoting.shown_value(result)}",
            shown,
        )
    try:
        accepted = whole_number(accepted, "accepted", 0, k, "k")
        token = whole_number(token, "token", 0, V - 1, "V-1")
    except ValueError as error:
        returned = f"({quoting.shown_value(accepted, 100)}, {quoting.shown_value(token, 100)})"
        # what is wrong first: a class's table keeps a failure's first 120 characters
        raise contract_breach(f"{error} (verify returned {returned})", shown) from None
    return accepted, token


def contract_breach(message: str, shown: dict) -> SubmissionCrash:
    return SubmissionCrash(
        ValueError(message),
        "the value your verify returned",
        show_inputs(**shown),
        describe_call("verify", shown),
        hint=crash_hint(ValueError(message), shown),
    )
