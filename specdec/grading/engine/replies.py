"""What a worker answers, rebuilt and checked on the grading side (engine/sandbox.py reads
every reply through these).

The worker runs in the submission's interpreter, so every byte of a reply is the submission's
to forge: a reply's shape is checked against its request (`reply_of`, `answered`: one result
per call asked for), an exception is rebuilt from a checked and cut description
(`remote_error`), a returned object from its type's name, its repr and the attributes a
contract reads, each cut (`Returned`), a signature from plain names (`signature_of`), and a
number a contract wants whole from whatever came back (`whole_number`, `whole_numbers`).
Nothing here trusts a length, a name or a number it did not bound itself.
"""

from __future__ import annotations

import inspect
import math

import numpy as np

from specdec.grading.engine import quoting
from specdec.grading.engine.quoting import MESSAGE, SHOWN, cut, one_line, shown_value, type_name
from specdec.grading.engine.worker import wire


class BadReply(Exception):
    """The worker answered a request with something it cannot be the answer to (n calls asked,
    another number of results given): its handlers were changed from inside, by the
    submission (they run in its interpreter). The student's error, like a crash."""


class RemoteError(Exception):
    """An exception raised in the worker, rebuilt from its type's name and its message."""

    frames: list = []  # [file name, line, function, code] of the submitted file's frames
    last: list = []  # the deepest frame, whoever's it is
    call: int | None = None  # in a request of several calls, which one raised

    def __str__(self) -> str:
        return self.message

    message = ""


class Returned:
    """An object a submission returned: its type's name, its repr, and the attributes the
    contracts read (accepted, token, tokens, stats, ...), each rebuilt as plain data.

    The name and the repr are cut here (the worker's own cut is the submission's to undo):
    a name to a plain identifier of at most 100 characters, the repr to SHOWN."""

    def __init__(self, name, text, attributes) -> None:
        self.__dict__.update(readable(attributes))
        self._type_name = type_name(name, "object")
        self._text = cut(text, SHOWN) if isinstance(text, str) else f"<a {self._type_name}>"

    def __repr__(self) -> str:
        return self._text


class ReturnedTuple(tuple):
    """A tuple subclass a submission returned (a namedtuple): the items, and its fields."""


class ReturnedList(list):
    """A list subclass a submission returned: the items."""


def readable(attributes) -> dict:
    """The attributes of a returned object a contract may read: names that are plain public
    identifiers (not `__class__`, not `_text`), at most a few dozen of them."""
    if not isinstance(attributes, dict):
        raise wire.WireError("the attributes of a returned object that are not a dict")
    names = [k for k in attributes if k.isidentifier() and not k.startswith("_")]
    return {k: attributes[k] for k in names[:ATTRIBUTES_KEPT]}


ATTRIBUTES_KEPT = 32  # a namedtuple's fields, or the attributes a contract reads (worker.py)


def answered(reply, n: int) -> list:
    """A batched request's reply -> its list of n results, or BadReply: the grader checks on
    its own side that it got one result per call it asked for (an empty list would otherwise
    pass every check of the results it holds)."""
    if isinstance(reply, list) and len(reply) == n:
        return reply
    got = f"{len(reply)} results" if isinstance(reply, list) else f"a {type(reply).__name__}"
    raise BadReply(
        f"the worker answered {got} for {n} calls: the process that runs your code answers "
        f"each call with one result, unless code in your file changes it"
    )


def plain(value):
    if type(value) in (bool, int, float, str):
        return value
    raise wire.WireError(f"a subclass of {type(value).__name__} whose value is not plain")


def refuse(value):
    raise TypeError(f"not plain data: {type(value).__name__}")


def reply_of(reply) -> tuple[str, object]:
    """The worker's answer to a request -> (status, value); anything but ("ok", value, states)
    or ("error", a description, states) breaks the exchange (ValueError)."""
    if not (isinstance(reply, tuple) and len(reply) == 3 and reply[0] in ("ok", "error")):
        said = shown_value(reply, 100)
        raise ValueError(f"an answer that is not (status, value, states): {said}")
    if reply[0] == "error" and not isinstance(reply[1], dict):
        raise ValueError(f"an error described by {shown_value(reply[1], 100)}")
    return reply[0], reply[1]


def remote_error(data: dict) -> RemoteError:
    """The worker's description of an exception -> an exception here, of the same name (a
    built-in's subclass when it is a built-in's, so that `isinstance(e, ValueError)` holds).

    Every field is the submission's to forge (the worker runs in its interpreter), so each is
    checked and cut here: the name to a plain identifier of at most 100 characters, the
    message to 2,000, each frame to [file, line, function, code] of bounded one-line text."""
    name = type_name(data.get("type"))
    base = wire.builtin_error(name) if data.get("builtin") is True else None
    bases = (base, RemoteError) if base not in (None, RuntimeError) else (RemoteError,)
    try:
        cls = type(name, bases, {})
    except TypeError:  # a built-in whose layout does not mix
        cls = type(name, (RemoteError,), {})
    error = cls.__new__(cls)
    text = data.get("message")
    text = cut(text, MESSAGE) if isinstance(text, str) else ""
    Exception.__init__(error, text)
    error.message = text
    error.frames = frames_of(data.get("frames"), 12)
    error.last = frames_of(data.get("last"), 1)
    lineno, code = data.get("lineno"), data.get("text")
    error.lineno = lineno if type(lineno) is int else None
    error.text = one_line(code) if isinstance(code, str) else None
    error.call = data.get("call") if type(data.get("call")) is int else None
    return error


def frames_of(frames, n: int) -> list[list]:
    """The worker's frames -> at most the last n, each [file name, line, function, code] of
    one-line text (a malformed one is left out)."""
    if not isinstance(frames, list):
        return []
    made = []
    for frame in frames[-n:]:
        if not (isinstance(frame, list) and len(frame) == 4 and type(frame[1]) is int):
            continue
        name, line, function, code = frame
        made.append([one_line(name, 100), line, one_line(function, 100), one_line(code)])
    return made


def signature_of(parameters) -> inspect.Signature | None:
    """The worker's description of a signature -> an inspect.Signature (None: unknown)."""
    if parameters is None:
        return None
    made = []
    for name, kind, has_default in parameters:
        default = None if has_default else inspect.Parameter.empty
        made.append(
            inspect.Parameter(str(name), inspect._ParameterKind(int(kind)), default=default)
        )
    try:
        return inspect.Signature(made)
    except ValueError:
        return None


def whole_number(
    value, what: str, low: int | None = None, high: int | None = None, high_is: str = ""
) -> int:
    """A value a submission returned where its contract wants an int (in low..high, when
    given) -> the int; else ValueError saying what it is instead (the caller makes it a
    breach of the contract, with its own words).

    A NumPy integer, a 0-d array of one and an int-valued float (2.0) are taken as the int; a
    bool, a string, inf, NaN, a fraction and an int out of range are not (int() would take
    '3' and 2.7, and raise OverflowError on inf)."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value.item()
    span = f"in {low}..{high_is} = {low}..{high}" if high_is else f"in {low}..{high}"
    if low is None or high is None:
        span = f">= {low}" if high is None else f"<= {high}"
    bounds = "an int" if low is None and high is None else f"an int {span}"
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{what} is a bool ({value}), not {bounds}")
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value) or not float(value).is_integer():
            raise ValueError(f"{what} is {quoting.shown_value(value)}, not {bounds}")
        value = int(value)
    if not isinstance(value, (int, np.integer)):
        name = quoting.type_name(type(value).__name__, "object")
        raise ValueError(f"{what} is a {name}, not {bounds}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{what} = {quoting.shown_value(value, 60)} is not {span}")
    return int(value)


def whole_numbers(
    values, what: str, most: int, low: int | None = None, high: int | None = None
) -> list[int]:
    """A sequence a submission returned where its contract wants ints -> the list of them;
    else ValueError: not a list, tuple or 1-d array, more than `most` items (checked before
    any is read: it may hold millions), or an item whole_number refuses."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        name = quoting.type_name(type(values).__name__, "object")
        raise ValueError(f"{what} is a {name}, not a list of ints")
    if len(values) > most:
        raise ValueError(f"{what} has {len(values):,} items, more than the {most} possible")
    return [whole_number(v, f"{what}[{i}]", low, high) for i, v in enumerate(values)]
