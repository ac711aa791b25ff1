"""Text that comes from a submission, made safe to show: cut to a fixed size and quoted.

Whatever a submitted file hands back (an exception's message, its type's name, the repr of a
returned object, a value that breaks the contract) is the student's text, and the worker that
cuts it is the student's to rewrite (it runs in the same interpreter as the submission). So
the grading side bounds it itself, here, before any report sees it:

* `shown_value(value)`: a returned value as at most SHOWN characters, never calling str() or repr()
  on anything unbounded (str() of an int of more than 4,300 digits raises ValueError; the
  repr of a 10-million-item list is 30 MB);
* `cut(text)`: a string to at most n characters, saying how long it was;
* `type_name(name)`: a type's name as a plain identifier of at most TYPE_NAME characters;
* `one_line(text)`: a field shown inside a line of the grader's (a frame's code, a file name);
* `quoted(text)` / `message(text)`: a message of several lines, each line prefixed with QUOTE,
  so that none of them can start a line of a report ("PASS  law: ...", "RESULT: PASS");
* `without_paths(text)`: the grader's own error, its absolute paths cut to their last part.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np

MESSAGE = 2000  # characters of an exception's message kept
TYPE_NAME = 100  # characters of a type's name kept
SHOWN = 300  # characters of a returned value (its repr) shown
FIELD = 300  # characters of a one-line field (a frame's code line, a file name)
QUOTE = "  > "  # what starts each line of the student's text in a report
DIGITS = 60  # an int longer than this is shown by its number of digits


def cut(text: str, n: int) -> str:
    """`text`, or its first n characters and how long it was."""
    if len(text) <= n:
        return text
    return text[:n] + f"... (cut: {len(text):,} characters)"


def one_line(text, n: int = FIELD) -> str:
    """A field of the student's shown inside a line of the grader's: cut, its line breaks
    written as \\n (a break of any kind: str.splitlines also breaks at \\r, \\x0b, \\u2028...)."""
    text = cut(text if isinstance(text, str) else shown_value(text), n)
    return "\\n".join(text.splitlines())


def type_name(name, fallback: str = "Exception") -> str:
    """A type's name from the worker -> a plain identifier of at most TYPE_NAME characters; a
    name that is not an identifier (or not a string) is replaced by `fallback`."""
    if not isinstance(name, str) or not name.isidentifier():
        return fallback
    if len(name) > TYPE_NAME:  # still an identifier, and plainly cut
        return name[: TYPE_NAME - 4] + "_cut"
    return name


def quoted(text: str, n: int = MESSAGE) -> str:
    """The student's text as a block of lines, each prefixed with QUOTE (cut to n first)."""
    lines = cut(text, n).splitlines() or [""]
    return "\n".join(QUOTE + line for line in lines)


def message(text: str, n: int = MESSAGE) -> str:
    """An exception's message as it follows "raised NAME": on the same line when it is one
    line (": message"), else quoted below it, line by line (":\\n  > ...")."""
    text = cut(text, n)
    lines = text.splitlines()
    if len(lines) <= 1:
        return f": {text.strip()}" if text.strip() else ""
    return ":\n" + quoted(text, n)


def shown_value(value, n: int = SHOWN) -> str:
    """A value the submission returned, as a repr of at most about n characters."""
    text = bounded_repr(value, n, 0)
    return text if len(text) <= n + 40 else text[:n] + "..."


def int_text(value: int) -> str:
    # str() of an int of more than 4,300 digits raises ValueError; a long one says its size
    if value.bit_length() <= DIGITS * 3.32:
        return str(value)
    digits = int(value.bit_length() * math.log10(2)) + 1
    return f"<an int of about {digits:,} digits>"


def bounded_repr(value, budget: int, depth: int) -> str:
    """repr(value), built piece by piece so that no piece is ever longer than `budget`."""
    if value is None or isinstance(value, (bool, float, np.bool_, np.floating)):
        return repr(value.item() if isinstance(value, np.generic) else value)
    if isinstance(value, (int, np.integer)):
        return int_text(int(value))
    if isinstance(value, str):
        head = repr(value[:budget])
        return head if len(value) <= budget else head + f"... ({len(value):,} characters)"
    if isinstance(value, np.ndarray):
        return array_text(value, budget)
    if isinstance(value, (list, tuple, dict)):
        return container_text(value, budget, depth)
    try:  # the grader's own objects, and what sandbox.py rebuilt (its repr is cut there)
        text = repr(value)
    except Exception:
        text = f"<a {type(value).__name__} whose repr() failed>"
    return cut(text, budget)


def container_text(value, budget: int, depth: int) -> str:
    if isinstance(value, dict):
        ends, items = "{}", list(itertools.islice(value.items(), budget // 2 + 1))
    else:
        ends = "[]" if isinstance(value, list) else "()"
        items = value[: budget // 2 + 1]  # a slice: at most as many items as could be shown
    if depth > 4:
        return f"{ends[0]}... {len(value):,} items{ends[1]}"
    parts, used = [], 2
    for item in items:
        if used >= budget:
            break
        if isinstance(value, dict):
            key, item = item
            part = bounded_repr(key, budget - used, depth + 1) + ": "
            part += bounded_repr(item, budget - used - len(part), depth + 1)
        else:
            part = bounded_repr(item, budget - used, depth + 1)
        parts.append(part)
        used += len(part) + 2
    if len(parts) < len(value):
        parts.append(f"... ({len(value):,} items)")
    comma = "," if isinstance(value, tuple) and len(value) == 1 else ""
    return ends[0] + ", ".join(parts) + comma + ends[1]


def array_text(array: np.ndarray, budget: int) -> str:
    # NumPy's own summary (edge items only) of an array of any size, cut
    with np.printoptions(threshold=20, edgeitems=2, precision=4, linewidth=10_000):
        try:
            text = repr(array)
        except Exception:
            text = f"<an array of shape {array.shape}>"
    return cut(" ".join(text.split()), budget)


def without_paths(text: str) -> str:
    """`text` with each absolute path cut to its last part ('/autograder/source/x/y.py' ->
    '.../y.py'): what the grader says of its own failure, shown to a student, names none of
    its folders."""
    return re.sub(r"(?<![\w.~])/(?:[^\s/'\":]+/)+", ".../", text)
