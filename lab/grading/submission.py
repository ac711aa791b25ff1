"""The submitted function: loading it, telling a `verify` from a loop, and calling it safely.

A crash in the submission is caught once, where it is called, and turned into a
`SubmissionCrash` that names the student's own line and the inputs that caused it; the grader
then stops (one report, not one traceback per check). `call_verify` also holds a submitted
verify to its contract; both the verify checks and the in-loop checks call it from here.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

KINDS = ("verify", "loop")


@dataclass(frozen=True)
class Submission:
    spec: str  # what the user typed, e.g. my_verify.py:verify
    function: Callable
    kind: str  # "verify" or "loop"
    kind_reason: str  # how the kind was decided, for the report
    source: str | None  # the file the function lives in, to find the student's line


class SubmissionCrash(Exception):
    """The submission raised: where (the student's deepest frame) and on what inputs."""

    def __init__(self, error: BaseException, where: str, inputs: str) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error, self.where, self.inputs = error, where, inputs

    def describe(self) -> str:
        return (
            f"your code raised {type(self.error).__name__}: {self.error}\n"
            f"  at {self.where}\n"
            f"  on the inputs\n{self.inputs}"
        )


def load_submission(spec: str, kind: str = "auto") -> Submission:
    """'path/to/file.py:function', 'path/to/file.py' or 'package.module:function' -> Submission.

    Raises ValueError saying what to change when the spec cannot be loaded.
    """
    where, sep, name = str(spec).rpartition(":")
    if not sep:  # a bare file: its `verify`, else its `speculative_generate`
        where, name = str(spec), ""
    if not where:
        raise ValueError(f"{spec!r}: expected PATH.py:FUNCTION, e.g. my_verify.py:verify")
    if where.endswith(".py") or "/" in where or "\\" in where:
        module, source = module_from_file(Path(where), spec), str(Path(where).resolve())
    else:
        module = module_from_name(where, spec)
        source = getattr(module, "__file__", None)
    if not name:
        name = next((n for n in ("verify", "speculative_generate") if hasattr(module, n)), "")
        if not name:
            raise ValueError(
                f"{spec!r}: the file defines neither `verify` nor `speculative_generate`; "
                f"name the function: {where}:FUNCTION"
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
    """'verify' or 'loop', from --kind or from the signature's parameter names."""
    if kind in KINDS:
        return kind, "--kind"
    if kind != "auto":
        raise ValueError(f"--kind must be auto, verify or loop, got {kind!r}")
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
        f"{getattr(function, '__name__', 'the function')} is a verify or a whole loop; "
        f"say which with --kind verify or --kind loop"
    )


def student_line(error: BaseException, source: str | None) -> str:
    """'file.py, line N, in f: <code>' for the deepest frame in the student's file."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if source and Path(f.filename).resolve() == Path(source).resolve()]
    frame = (mine or frames or [None])[-1]
    if frame is None:
        return "no traceback"
    return f"{Path(frame.filename).name}, line {frame.lineno}, in {frame.name}: {frame.line}"


def show_inputs(**inputs) -> str:
    # the arguments of a crashed call, small enough to read
    lines = []
    with np.printoptions(precision=4, suppress=True, linewidth=90):
        for name, value in inputs.items():
            text = repr(np.asarray(value)) if isinstance(value, (np.ndarray, list)) else repr(value)
            lines.append(f"    {name} = " + text.replace("\n", "\n" + " " * (len(name) + 7)))
    return "\n".join(lines)


def call_safely(submission: Submission, args: tuple, kwargs: dict, shown: dict):
    """Call the submission; a raise becomes a SubmissionCrash naming the student's line."""
    try:
        return submission.function(*args, **kwargs)
    except Exception as error:
        where = student_line(error, submission.source)
        raise SubmissionCrash(error, where, show_inputs(**shown)) from error


def call_verify(
    sub: Submission, P: np.ndarray, Q: np.ndarray, drafts: tuple[int, ...], rng: np.random.Generator
) -> tuple[int, int]:
    # P [k+1, V], Q [k, V], drafts [k] -> (accepted, token), checked against the contract.
    # Copies go in, so a submission that edits its arguments cannot spoil the grader's rows.
    tokens = np.asarray(drafts, dtype=np.int64)
    shown = {"p_target": P, "q_draft": Q, "draft_tokens": tokens}
    result = call_safely(sub, (P.copy(), Q.copy(), tokens.copy(), rng), {}, shown)
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
        ValueError(message), "the value your verify returned", show_inputs(**shown)
    )
