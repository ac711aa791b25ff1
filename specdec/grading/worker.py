"""The worker: the only process where a submitted file runs, apart from everything that grades.

The grading process (specdec/grading/sandbox.py) copies this file and the submission into a
scratch folder and starts `python -I -S worker.py`: no site-packages, no PYTHONPATH, no
project on the path. sys.path holds the submission's folder, a folder of the libraries the
exercise allows (NumPy; the loop's pieces of `reference`; torch for the callables loop) and
the standard library. Before the submission is imported the worker limits itself (memory, CPU
time, no new processes or threads, file size, open files), asks to die with its parent, and
drops every inherited file but its two pipes. Then it answers requests, one at a time:

    load     import the file, find the function, say its name and signature
    call     call a function or a class (its inputs and outputs cross as plain data)
    getattr  read an attribute of an object it made (the cache exercise's instance)

A reply is plain data: None, bools, ints, floats, strings, lists, tuples, dicts, NumPy arrays
of numbers, and records that name an object the worker keeps (a handle) or describe one the
grader cannot use (its type, repr and the attributes the grader asked for). Nothing is
pickled: the grading process rebuilds what it reads from these bytes and checks it itself, so
whatever the submission returns or rewrites here, the grader reads only numbers and text.

Only the standard library and NumPy are imported here, so the file works wherever it is
copied. The grading side imports the codec below from this module too: one format, one file.
"""

from __future__ import annotations

import importlib
import inspect
import os
import select
import struct
import sys
import time
import traceback

if __name__ == "__main__":  # started as the worker: its folders come first, then NumPy
    sys.path[:0] = sys.argv[4].split(os.pathsep)

import numpy as np  # noqa: E402

# --------------------------------------------------------------------------------------------
# The wire format: a message is a 4-byte length and one value, each value a tag and its body
# --------------------------------------------------------------------------------------------

MAX_MESSAGE = 256 << 20  # bytes: a bigger message is refused (a submission flooding the pipe)
MAX_DEPTH = 32  # nesting of lists, tuples and dicts
DTYPES = ("|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8")
LENGTH = struct.Struct("<I")
INT64 = struct.Struct("<q")
FLOAT = struct.Struct("<d")


class WireError(ValueError):
    """Bytes that are not a value of this format (or one beyond its limits)."""


def encode(value, other) -> bytes:
    """value -> bytes; `other(value) -> (kind, payload)` encodes what is not plain data."""
    out: list[bytes] = []
    put(out, value, other, 0)
    return b"".join(out)


def put(out: list, value, other, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} levels deep")
    kind = type(value)
    writer = WRITERS.get(kind)
    if writer is not None:
        writer(out, value, other, depth)
    elif value is None:
        out.append(b"N")
    elif kind is np.ndarray and value.dtype.str in DTYPES:
        put_array(out, value)
    elif kind is np.random.Generator:  # its state, for the other side's twin of it
        put_generator(out, value, other, depth)
    else:
        name, payload = other(value)
        out.append(b"x")
        put(out, name, other, depth + 1)
        put(out, payload, other, depth + 1)


def put_int(out: list, value: int, other, depth: int) -> None:
    if -(1 << 63) <= value < (1 << 63):
        out.append(b"i" + INT64.pack(value))
    else:  # a generator's 128-bit state
        size = (value.bit_length() + 8) // 8
        out.append(b"I" + LENGTH.pack(size) + value.to_bytes(size, "little", signed=True))


def put_str(out: list, value: str, other, depth: int) -> None:
    data = value.encode("utf-8", "replace")
    out.append(b"s" + LENGTH.pack(len(data)) + data)


def put_sequence(out: list, value, other, depth: int) -> None:
    out.append((b"l" if type(value) is list else b"t") + LENGTH.pack(len(value)))
    for item in value:
        put(out, item, other, depth + 1)


def put_dict(out: list, value: dict, other, depth: int) -> None:
    out.append(b"d" + LENGTH.pack(len(value)))
    for key, item in value.items():
        put_str(out, str(key), other, depth)
        put(out, item, other, depth + 1)


def put_array(out: list, array: np.ndarray) -> None:
    if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
        array = array.copy(order="C")
    shape = struct.pack(f"<{array.ndim}q", *array.shape)
    out.append(b"a" + array.dtype.str.encode() + bytes([array.ndim]) + shape + array.tobytes())


PCG64_STATE = struct.Struct("<qQQQQBI")  # key, state (hi, lo), inc (hi, lo), has_uint32, uinteger


def put_generator(out: list, generator, other, depth: int) -> None:
    # other(generator) -> ("rng", key): the number both sides know it by
    _, key = other(generator)
    state = generator.bit_generator.state
    if state["bit_generator"] == "PCG64":
        inner, low = state["state"], (1 << 64) - 1
        out.append(
            b"g"
            + PCG64_STATE.pack(
                key,
                inner["state"] >> 64,
                inner["state"] & low,
                inner["inc"] >> 64,
                inner["inc"] & low,
                state["has_uint32"],
                state["uinteger"],
            )
        )
    else:
        out.append(b"G" + INT64.pack(key))
        put(out, state, other, depth + 1)


WRITERS = {
    bool: lambda out, value, other, depth: out.append(b"T" if value else b"F"),
    int: put_int,
    float: lambda out, value, other, depth: out.append(b"f" + FLOAT.pack(value)),
    str: put_str,
    list: put_sequence,
    tuple: put_sequence,
    dict: put_dict,
}


def decode(data: bytes, extension):
    """bytes -> value; `extension(kind, payload)` rebuilds an 'x' record. WireError on bytes
    that are not one whole value."""
    try:
        value, at = read(bytes(data), 0, extension, 0)
    except (struct.error, IndexError, UnicodeDecodeError, OverflowError, ValueError) as error:
        if isinstance(error, WireError):
            raise
        raise WireError(f"malformed message ({type(error).__name__}: {error})") from None
    if at != len(data):
        raise WireError(f"{len(data) - at} bytes after the value")
    return value


def read(data: bytes, at: int, extension, depth: int):
    """The value that starts at data[at] -> (value, where the next one starts)."""
    if depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} levels deep")
    tag = data[at]
    at += 1
    if tag == 105:  # i
        return INT64.unpack_from(data, at)[0], at + 8
    if tag == 108 or tag == 116:  # l, t
        (n,) = LENGTH.unpack_from(data, at)
        at += 4
        items = []
        for _ in range(n):
            item, at = read(data, at, extension, depth + 1)
            items.append(item)
        return (items if tag == 108 else tuple(items)), at
    if tag == 97:  # a
        return read_array(data, at)
    if tag == 102:  # f
        return FLOAT.unpack_from(data, at)[0], at + 8
    if tag == 115:  # s
        (n,) = LENGTH.unpack_from(data, at)
        return str(data[at + 4 : at + 4 + n], "utf-8"), at + 4 + inside(data, at + 4, n)
    if tag == 78:  # N
        return None, at
    if tag == 84 or tag == 70:  # T, F
        return tag == 84, at
    if tag == 73:  # I
        (n,) = LENGTH.unpack_from(data, at)
        at += 4
        return int.from_bytes(data[at : at + inside(data, at, n)], "little", signed=True), at + n
    if tag == 100:  # d
        (n,) = LENGTH.unpack_from(data, at)
        at += 4
        made = {}
        for _ in range(n):
            key, at = read(data, at, extension, depth + 1)
            if type(key) is not str:
                raise WireError("a dict key that is not a string")
            made[key], at = read(data, at, extension, depth + 1)
        return made, at
    if tag == 103:  # g: a PCG64 generator's state
        key, s_hi, s_lo, i_hi, i_lo, has, extra = PCG64_STATE.unpack_from(data, at)
        state = {
            "bit_generator": "PCG64",
            "state": {"state": (s_hi << 64) | s_lo, "inc": (i_hi << 64) | i_lo},
            "has_uint32": has,
            "uinteger": extra,
        }
        return extension("rng", (key, state)), at + PCG64_STATE.size
    if tag == 71:  # G: another generator's state
        (key,) = INT64.unpack_from(data, at)
        state, at = read(data, at + 8, extension, depth + 1)
        if type(state) is not dict:
            raise WireError("a generator's state that is not a dict")
        return extension("rng", (key, state)), at
    if tag == 120:  # x
        kind, at = read(data, at, extension, depth + 1)
        payload, at = read(data, at, extension, depth + 1)
        if type(kind) is not str:
            raise WireError("a record without a name")
        return extension(kind, payload), at
    raise WireError(f"unknown tag {tag!r}")


def inside(data: bytes, at: int, n: int) -> int:
    # n, once it is known that n bytes follow `at`
    if at + n > len(data):
        raise WireError("the message ends in the middle of a value")
    return n


def read_array(data: bytes, at: int) -> tuple[np.ndarray, int]:
    dtype = str(data[at : at + 3], "ascii")
    if dtype not in DTYPES:
        raise WireError(f"an array of dtype {dtype!r}")
    ndim = data[at + 3]
    shape = struct.unpack_from(f"<{ndim}q", data, at + 4)
    at += 4 + 8 * ndim
    count = 1
    for n in shape:
        if n < 0:
            raise WireError(f"an array of shape {shape}")
        count *= n
    size = inside(data, at, count * np.dtype(dtype).itemsize)
    array = np.frombuffer(data, dtype=dtype, count=count, offset=at).reshape(shape).copy()
    return array, at + size


def send(fd: int, value, other) -> None:
    data = encode(value, other)
    if len(data) > MAX_MESSAGE:
        raise WireError(f"a message of {len(data)} bytes (the limit is {MAX_MESSAGE})")
    write_all(fd, LENGTH.pack(len(data)) + data)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


SPIN_S = 0.0005  # how long a side polls for the other's answer before it sleeps on the pipe


def read_exactly(fd: int, n: int) -> bytes:
    """n bytes from fd; EOFError when the other side closed it first.

    The two sides take turns, so the answer usually comes within microseconds: polling for it
    a little while costs less than sleeping and being woken (48 us per exchange on a 2-core
    virtual machine against 6 us). After SPIN_S it sleeps until the answer comes."""
    chunks, left = [], n
    while left:
        chunk = poll(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def poll(fd: int, n: int) -> bytes:
    """os.read(fd, n), polling the non-blocking fd for SPIN_S before it blocks."""
    try:
        return os.read(fd, n)
    except BlockingIOError:
        pass
    end = time.perf_counter() + SPIN_S
    while time.perf_counter() < end:
        try:
            return os.read(fd, n)
        except BlockingIOError:
            os.sched_yield() if hasattr(os, "sched_yield") else None
    select.select([fd], [], [])
    return os.read(fd, n)


def receive_bytes(fd: int) -> bytes:
    (size,) = LENGTH.unpack(read_exactly(fd, 4))
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes announced (the limit is {MAX_MESSAGE})")
    return read_exactly(fd, size)


# --------------------------------------------------------------------------------------------
# What a submission is handed in place of the grader's objects
# --------------------------------------------------------------------------------------------

BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


class Tree:
    """The tree exercise's tree: what the contract lets verify_tree use, as plain arrays."""

    def __init__(self, tokens, parents, q, draws) -> None:
        self.tokens, self.parents, self.q, self.draws = tokens, parents, q, tuple(draws)

    @property
    def n_nodes(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:  # in the order they are tried
        return [int(c) for c in np.flatnonzero(self.parents == node)]

    def path_tokens(self, path) -> list[int]:
        return [int(self.tokens[i]) for i in path]


class ModelDrafter:
    """The loop exercise's drafter: its draft model, `.model`, and nothing else to call."""

    def __init__(self, model) -> None:
        self.model = model


class Worker:
    """The worker's state: the objects it made, the generators mirrored, the two pipes."""

    def __init__(self, inbox: int, outbox: int) -> None:
        self.inbox, self.outbox = inbox, outbox
        os.set_blocking(inbox, False)  # polled: see read_exactly
        self.objects: dict[int, object] = {}  # handle -> object the grader may name
        self.generators: dict[int, np.random.Generator] = {}  # the grader's rng id -> mirror
        self.built: dict[int, object] = {}  # the grader's key -> model, drafter... made here
        self.source = ""  # the submitted file, to find its frames in a traceback
        self.used: list[int] = []  # the generators the current call was given
        self.keys: dict[int, int] = {}  # id of a twin -> the grader's number for it

    # -- the messages ------------------------------------------------------------------------

    def send(self, value) -> None:
        send(self.outbox, value, self.record)

    def receive(self):
        return decode(receive_bytes(self.inbox), self.rebuild)

    def serve(self) -> None:
        while True:
            try:
                request = self.receive()
            except EOFError:
                return
            op = request[0]
            if op == "close":
                return
            try:
                reply = ("ok", getattr(self, f"op_{op}")(*request[1:]))
            except Exception as error:  # the submission's, or a breach of the contract
                reply = ("error", self.describe_error(error))
            states, self.used = self.states(), []  # the request's generators, as left
            try:
                self.send((*reply, states))
            except WireError as error:  # nested too deep, too large: said, not sent
                refused = WireError(f"what your code returned cannot be sent back ({error})")
                self.send(("error", self.describe_error(refused), states))

    def states(self) -> list:
        # the generators after a call, so that the grader's continue from their states
        return [self.generators[i] for i in dict.fromkeys(self.used)]

    # -- the requests ------------------------------------------------------------------------

    def op_load(self, path: str, names: list) -> dict:
        """Import the file; describe the first of `names` it defines (one name, or the
        exercises' functions for a bare file)."""
        import importlib.util

        self.source = path
        spec = importlib.util.spec_from_file_location("submission", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = module
        spec.loader.exec_module(module)
        name = next((n for n in names if getattr(module, n, None) is not None), None)
        if name is None:
            public = sorted(n for n, v in vars(module).items() if callable(v) and n[0] != "_")
            return {"found": False, "defines": public[:12]}
        function = getattr(module, name)
        if not callable(function):
            return {"found": False, "name": name, "not_callable": type(function).__name__}
        where = defined_in(function)
        if where is None or os.path.realpath(where) != os.path.realpath(path):
            return {"found": False, "name": name, "elsewhere": where or "a library"}
        self.objects[0] = function
        return describe_callable(function, name)

    def op_call(self, handle: int, args: tuple, kwargs: dict, keep: bool):
        target = self.objects[handle]
        result = target(*args, **kwargs)
        if keep or (isinstance(target, type) and isinstance(result, target)):
            return self.handle(result)
        return result

    def op_repeat(self, handle: int, args: tuple, kwargs: dict, n: int) -> list:
        # n calls in one request (the grader's checks that call with the same rows and one
        # generator n times): each gets fresh copies of the arrays, as separate calls would
        target = self.objects[handle]
        return [target(*[fresh(a) for a in args], **kwargs) for _ in range(n)]

    def op_each(self, handle: int, columns: list, stacked: list, tail: tuple) -> list:
        # one call per row of `columns` (argument j of call i: columns[j][i], an array's slice
        # copied when the column came stacked in one array), each followed by `tail` (the
        # generator they share): the checks whose inputs differ from call to call. A raise
        # says which call it was
        target, results = self.objects[handle], []
        n = len(columns[0]) if columns else 0
        for index in range(n):
            args = [
                c[index].copy() if s else fresh(c[index])
                for c, s in zip(columns, stacked, strict=True)
            ]
            try:
                results.append(target(*args, *tail))
            except Exception as error:
                error._specdec_call = index
                raise
        return results

    def op_getattr(self, handle: int, name: str):
        value = getattr(self.objects[handle], name)
        return self.handle(value) if callable(value) else value

    def handle(self, value) -> Handle:
        number = len(self.objects)
        self.objects[number] = value
        return Handle(number, type(value).__name__, callable(value))

    # -- values that are not plain data ------------------------------------------------------

    def record(self, value):
        """A value of the submission's that is not plain data -> an 'x' record."""
        if isinstance(value, np.random.Generator):
            if id(value) in self.keys:
                return "rng", self.keys[id(value)]
            return "object", ["Generator", "a generator of the submission's", {}]
        if isinstance(value, Handle):
            return "handle", [value.number, value.type_name, value.is_callable]
        if isinstance(value, np.generic):  # a NumPy scalar: its Python value
            return "scalar", value.item() if value.dtype.kind in "biuf" else repr(value)
        if isinstance(value, (bool, int, float, str)):  # a subclass: its plain value
            plain = {bool: bool, int: int, float: float, str: str}
            base = next(t for t in (bool, int, float, str) if isinstance(value, t))
            return "subclass", [type(value).__name__, plain[base](value)]
        if isinstance(value, np.ndarray):  # object or complex dtype: shown, not used
            return "object", [type(value).__name__, short_repr(value), {}]
        if isinstance(value, (list, tuple, dict)):  # a subclass (a namedtuple...)
            plain = tuple(value) if isinstance(value, tuple) else value
            plain = dict(value) if isinstance(value, dict) else list(plain)
            if isinstance(value, tuple):
                plain = tuple(plain)
            fields = getattr(value, "_fields", ())
            attrs = {f: getattr(value, f) for f in fields if isinstance(f, str)}
            return "sequence", [type(value).__name__, plain, attrs]
        attrs = {}
        for name in ATTRIBUTES:
            try:
                if hasattr(value, name):
                    attrs[name] = getattr(value, name)
            except Exception:  # a property that raises: as if absent
                continue
        return "object", [type(value).__name__, short_repr(value), attrs]

    def rebuild(self, kind: str, payload):
        """An 'x' record from the grader -> what the submission is handed."""
        if kind == "rng":
            number, state = payload
            if number not in self.generators:
                name = state.get("bit_generator")
                if name not in BIT_GENERATORS:
                    raise WireError(f"a generator of kind {name!r}")
                made = np.random.Generator(getattr(np.random, name)())
                self.generators[number], self.keys[id(made)] = made, number
            self.generators[number].bit_generator.state = state
            self.used.append(number)
            return self.generators[number]
        if kind == "handle":
            return self.objects[payload]
        if kind == "callback":
            return self.callback(*payload)
        if kind == "scalar":  # a NumPy scalar of the grader's: the same type here
            dtype, value = payload
            return np.dtype(dtype).type(value)
        if kind == "build":
            return self.build(payload)
        raise WireError(f"unknown record {kind!r}")

    def build(self, payload):
        if isinstance(payload, list) and payload[:1] == ["Tree"]:  # made anew for each call
            return Tree(*payload[1:])
        key, cls = payload["key"], payload["cls"]
        if key in self.built:
            return self.built[key]
        # the loop's pieces of `reference`, in this worker's lib/ (by name: the grader's zips
        # follow import statements, and only the loop's ships them)
        if cls == "GPT":
            GPTConfig = importlib.import_module("reference.config").GPTConfig
            GPT = importlib.import_module("reference.model").GPT
            made = GPT(GPTConfig(**payload["config"]), payload["params"])
        elif cls == "ModelDrafter":
            made = ModelDrafter(payload["model"])
        elif cls == "SamplingParams":
            made = importlib.import_module("reference.sampling").SamplingParams(**payload["fields"])
        else:
            raise WireError(f"cannot build a {cls!r}")
        if payload.get("share", True):
            self.built[key] = made
        return made

    def callback(self, number: int, name: str):
        """A function the submission calls that the grader answers (a next-token callable):
        the question goes up the pipe, the grader's answer or error comes back."""
        worker = self

        def ask(*args, **kwargs):
            worker.send(("callback", number, args, kwargs))
            reply = worker.receive()
            if reply[0] == "raise":
                raise builtin_error(reply[1])(reply[2])
            return reply[1]

        ask.__name__ = ask.__qualname__ = name
        return ask

    # -- errors ------------------------------------------------------------------------------

    def describe_error(self, error: BaseException) -> dict:
        frames = traceback.extract_tb(error.__traceback__)
        mine = [f for f in frames if self.source and f.filename == self.source]
        data = {
            "type": type(error).__name__,
            "builtin": type(error).__module__ == "builtins",
            "message": short(str_of(error), 2000),
            "frames": [
                [os.path.basename(f.filename), f.lineno or 0, f.name, f.line or ""]
                for f in mine[-12:]
            ],
            "last": [
                [os.path.basename(f.filename), f.lineno or 0, f.name, f.line or ""]
                for f in frames[-1:]
            ],
        }
        index = getattr(error, "_specdec_call", None)
        if isinstance(index, int):
            data["call"] = index
        if isinstance(error, SyntaxError):
            data["lineno"], data["text"] = error.lineno or 0, (error.text or "").strip()
        return data


def fresh(value):
    # a new copy of an array or a list (a call may edit its arguments), the value otherwise
    return value.copy() if isinstance(value, (np.ndarray, list)) else value


class Handle:
    """An object the worker keeps and the grader names by number."""

    def __init__(self, number: int, type_name: str, is_callable: bool) -> None:
        self.number, self.type_name, self.is_callable = number, type_name, is_callable


# the attributes the exercises' contracts read from a returned object
ATTRIBUTES = ("accepted", "token", "tokens", "stats", "accepted_per_round", "path")


def defined_in(function) -> str | None:
    """The file a function (or a class) was written in."""
    try:
        return inspect.getsourcefile(function) or inspect.getfile(function)
    except (TypeError, OSError):
        return None


def describe_callable(function, name: str) -> dict:
    try:
        signature = inspect.signature(function)
        parameters = [
            [p.name, int(p.kind), p.default is not p.empty] for p in signature.parameters.values()
        ]
    except (TypeError, ValueError):
        parameters = None
    return {
        "found": True,
        "name": name,
        "parameters": parameters,
        "is_class": isinstance(function, type),
    }


def builtin_error(name: str) -> type:
    """The built-in exception class of that name (RuntimeError when there is none)."""
    import builtins

    error = getattr(builtins, name, None)
    return error if isinstance(error, type) and issubclass(error, Exception) else RuntimeError


def str_of(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return f"<{type(error).__name__} whose str() raised>"


def short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 20] + f"... ({len(text)} characters)"


def short_repr(value) -> str:
    try:
        return short(repr(value), 300)
    except Exception:
        return f"<{type(value).__name__} whose repr() raised>"


# --------------------------------------------------------------------------------------------
# Start-up: limits first, then the submission's path, then the requests
# --------------------------------------------------------------------------------------------


def limit(settings: dict) -> None:
    """Hold this process to the limits the grader chose, before any submitted code runs."""
    import resource

    names = {
        "memory_bytes": "RLIMIT_AS",
        "cpu_seconds": "RLIMIT_CPU",
        "processes": "RLIMIT_NPROC",
        "file_bytes": "RLIMIT_FSIZE",
        "open_files": "RLIMIT_NOFILE",
        "core_bytes": "RLIMIT_CORE",
    }
    for key, name in names.items():
        value = settings.get(key)
        if value is None or not hasattr(resource, name):
            continue
        which = getattr(resource, name)
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):  # not settable here (macOS and RLIMIT_AS): documented
            pass
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises, not kills


def die_with_parent() -> None:
    """Linux: be killed when the grading process ends, however it ends."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent is already gone
        os._exit(1)


def preload(modules: list[str]) -> None:
    """Import the allowed libraries before any submitted code (a missing optional one, torch,
    is skipped): a library that cannot load is the grader's problem, said before grading."""
    import importlib

    for name in ["ctypes", "importlib.util", "resource", "signal", *modules]:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def hold_folders(lib: str) -> None:
    """Before giving up root: keep the folders this process imports from open, and read them
    through those handles (/proc/self/fd/N), so that an interpreter or a venv in a folder the
    worker's user may not enter (a pyenv under /root) still serves its imports. The handles
    reach those folders only: not the grader's (sandbox.py copies what the worker may read)."""
    if not os.path.isdir("/proc/self/fd"):
        return
    moved = {}
    for i, path in enumerate(sys.path):
        if os.path.isdir(path) and not path.startswith(lib):
            sys.path[i] = moved[path] = held(path)
    for module in list(sys.modules.values()):  # packages already imported read on from there
        paths = getattr(module, "__path__", None)
        if isinstance(paths, list):
            paths[:] = [rehome(p, moved) for p in paths]
    for name in os.listdir(lib):
        link = os.path.join(lib, name)
        if os.path.islink(link):
            target = held(os.path.realpath(link))
            os.unlink(link)
            os.symlink(target, link)


def rehome(path: str, moved: dict) -> str:
    for old, new in moved.items():
        if path == old or path.startswith(old + os.sep):
            return new + path[len(old) :]
    return path


def held(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return path
    return f"/proc/self/fd/{fd}"


# mount(2) flags and unshare(2)'s new mount namespace (Linux)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MS_PRIVATE, CLONE_NEWNS = 1 << 18, 0x00020000
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")


def confine(lib: str) -> bool:
    """Linux, as root, before giving up root: a mount namespace of the worker's own whose root
    holds only what it needs, each at its usual path: its scratch folder (writable), the
    folders it imports from (the standard library, the allowed libraries' packages: read
    only), the system's shared libraries and a few devices. Nothing else of the machine's
    files exists for the submission: not the grader's checkout, not the class folder, not
    /proc (its ancestors' command lines), whoever may read them. False where mount
    namespaces are not allowed (a container without CAP_SYS_ADMIN): nothing changed."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def mount(source, target, kind, flags, data=None) -> None:
        encoded = [x.encode() if isinstance(x, str) else x for x in (source, target, kind, data)]
        if libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")

    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the machine
    scratch = os.path.dirname(lib)
    root = os.path.join(scratch, ".root")
    os.mkdir(root, 0o755)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")

    def show(path: str, writable: bool = False) -> None:
        inside = root + path
        if os.path.isdir(path):
            os.makedirs(inside, 0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(inside), 0o755, exist_ok=True)
            if not os.path.exists(inside):
                open(inside, "a").close()
        mount(path, inside, None, MS_BIND | MS_REC)
        if not writable:
            mount(None, inside, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_REC)

    system = [p for p in ("/usr", "/lib", "/lib64", "/lib32") if os.path.isdir(p)]
    system = [p for p in system if not os.path.islink(p)]  # /lib -> usr/lib: linked below
    imports = [p for p in sys.path if os.path.isdir(p) and not p.startswith(scratch)]
    links = [os.path.realpath(os.path.join(lib, n)) for n in sorted(os.listdir(lib))]
    for path in [*system, *imports]:
        show(os.path.realpath(path))
    for link in ("/lib", "/lib64", "/lib32"):  # merged /usr: the same links as the machine's
        if os.path.islink(link):
            os.symlink(os.readlink(link), root + link)
    # every folder of installed packages that came with them (a site-packages inside the
    # standard library, a system's dist-packages) is emptied: the project may be installed
    # there; the allowed libraries' own folders are shown again inside it, just below
    import glob

    bases = [*imports, *glob.glob("/usr/lib/python3*"), *glob.glob("/usr/local/lib/python3*")]
    for base in bases:
        for name in ("site-packages", "dist-packages"):
            packages = os.path.realpath(os.path.join(base, name))
            if os.path.isdir(packages) and os.path.isdir(root + packages):
                mount("tmpfs", root + packages, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    for path in [*links, *DEVICES]:
        if os.path.exists(path):
            show(os.path.realpath(path))
    show(scratch, writable=True)
    os.chroot(root)
    os.chdir(scratch)
    return True


def drop_to(ids) -> None:
    """Root -> the unprivileged user the grader chose, for good (real, effective and saved)."""
    if ids is None:
        return
    uid, gid = ids
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("the worker could not give up root")


def main(argv: list[str]) -> int:
    inbox, outbox = int(argv[1]), int(argv[2])
    settings = decode(bytes.fromhex(argv[3]), lambda kind, payload: payload)
    die_with_parent()
    os.closerange(3, min(inbox, outbox))  # every inherited file but the two pipes
    os.closerange(max(inbox, outbox) + 1, 1 << 16)
    sys.dont_write_bytecode = True
    preload(settings["preload"])
    if settings["user"] is not None:
        if not confine(settings["path"][1]):  # no mount namespace here: hold what it imports
            hold_folders(settings["path"][1])
        importlib.invalidate_caches()
    drop_to(settings["user"])
    die_with_parent()  # a change of user clears it: asked again
    os.umask(0o077)
    limit(settings["limits"])
    sys.argv = [settings["file"]]
    worker = Worker(inbox, outbox)
    worker.send(("ready", os.getuid() if hasattr(os, "getuid") else -1))
    worker.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
