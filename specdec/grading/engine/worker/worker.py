"""The worker: the only process where a submitted file runs, apart from everything that grades.

The grading process (engine/sandbox.py) copies this file and the submission into a scratch
folder and starts `python -I -S worker/worker.py`: no site-packages, no PYTHONPATH, no project
on the path. sys.path holds the submission's folder, a folder of the libraries the exercise
allows (NumPy, SciPy, torch when installed, what grading.toml adds; the loop's pieces of
`reference`) and the standard library; a module found in none of them is refused in the grader's
words (`Worker.refused`). Before the submission is imported the worker drops every inherited
file but its two pipes, asks to die with its parent, run as root moves into a file tree of its
own and gives up root (without CAP_SYS_ADMIN, or run as you: Landlock instead of the file tree),
takes a seccomp filter, and limits itself (memory, CPU time, no new processes or threads, file
size, open files); its "ready" message says which of these held (confinement.enter). Then it
answers requests, one at a time:

    load     import the file, find the function, say its name and signature
    call     call a function or a class (its inputs and outputs cross as plain data)
    repeat   n calls with the same arguments (fresh copies each) and one generator
    each     one call per row of arguments, the generator shared
    getattr  read an attribute of an object it made (the cache exercise's instance)

A reply is plain data: None, bools, ints, floats, strings, lists, tuples, dicts, NumPy arrays
of numbers, and records that name an object the worker keeps (a handle) or describe one the
grader cannot use (its type, repr and the attributes the grader asked for). Nothing is
pickled: the grading process rebuilds what it reads from these bytes and checks it itself, so
whatever the submission returns or rewrites here, the grader reads only numbers and text.

Only the standard library, NumPy and the two files beside it (wire.py: the format;
confinement.py: the limits, the file tree, Landlock and seccomp) are imported here: the
grading process copies the three into the scratch folder's `worker/`, without the project.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import traceback

if __name__ == "__main__":  # started as the worker: its folders come first, then NumPy
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), *sys.argv[4].split(os.pathsep)]

import numpy as np  # noqa: E402

try:  # imported by the grader, as a module of the package
    from specdec.grading.engine.worker import confinement, wire
except ImportError:  # run as the worker: the copies beside this file (no project here)
    confinement, wire = (importlib.import_module(name) for name in ("confinement", "wire"))

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
        self.refusal = ""  # the words for a module no offered library holds ({name}: its name)

    # -- the messages ------------------------------------------------------------------------

    def send(self, value) -> None:
        wire.send(self.outbox, value, self.record)

    def receive(self):
        return wire.decode(wire.receive_bytes(self.inbox), self.rebuild)

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
            except wire.WireError as error:  # nested too deep, too large: said, not sent
                refused = wire.WireError(f"what your code returned cannot be sent back ({error})")
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
        if isinstance(value, dict):  # a dict subclass: its items
            return "mapping", dict(value)
        if isinstance(value, (list, tuple)):  # a subclass (a namedtuple): items and fields
            items = tuple(value) if isinstance(value, tuple) else list(value)
            fields = getattr(value, "_fields", ())
            attrs = {f: getattr(value, f) for f in fields if isinstance(f, str)}
            return "sequence", [type(value).__name__, items, attrs]
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
                    raise wire.WireError(f"a generator of kind {name!r}")
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
        raise wire.WireError(f"unknown record {kind!r}")

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
            raise wire.WireError(f"cannot build a {cls!r}")
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
                raise wire.builtin_error(reply[1])(reply[2])
            return reply[1]

        ask.__name__ = ask.__qualname__ = name
        return ask

    # -- errors ------------------------------------------------------------------------------

    def refused(self, error: BaseException) -> str:
        """A module the submission imported that is nowhere here -> the grader's words for it
        (the libraries this exercise offers, how a teacher adds one); "" for any other error,
        or a module that exists and failed for another reason."""
        name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
        top = name.partition(".")[0] if isinstance(name, str) else ""
        if not (self.refusal and top.isidentifier()):
            return ""
        try:
            found = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            found = None
        return "" if found is not None else self.refusal.replace("{name}", top)

    def describe_error(self, error: BaseException) -> dict:
        frames = traceback.extract_tb(error.__traceback__)
        mine = [f for f in frames if self.source and f.filename == self.source]
        # cut here to spare the pipe; the grading side cuts and checks every field again
        # (replies.remote_error): this file runs in the submission's interpreter
        data = {
            "type": type(error).__name__[:200],  # still an identifier: cut to 100 there
            "builtin": type(error).__module__ == "builtins",
            "message": short(self.refused(error) or str_of(error), 2000),
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


def main(argv: list[str]) -> int:
    inbox, outbox = int(argv[1]), int(argv[2])
    settings = wire.decode(bytes.fromhex(argv[3]), lambda kind, payload: payload)
    confinement.die_with_parent()
    os.closerange(3, min(inbox, outbox))  # every inherited file but the two pipes
    os.closerange(max(inbox, outbox) + 1, 1 << 16)
    sys.dont_write_bytecode = True
    confinement.preload(settings["preload"])
    # its file tree (or Landlock), its user, seccomp: what held is said to the grader, which
    # shows it in the report (sandbox.describe_confinement)
    held = confinement.enter(settings)
    os.umask(0o077)
    confinement.limit(settings["limits"])
    sys.argv = [settings["file"]]
    worker = Worker(inbox, outbox)
    worker.refusal = settings.get("refusal") or ""
    worker.send(("ready", held["user"], held))
    worker.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
