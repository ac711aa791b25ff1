"""The grading side of the worker: a submitted file runs in another process, never in this one.

`Sandbox(file)` starts worker/worker.py (with wire.py and confinement.py, the files it imports, all
three in engine/worker/) in a scratch folder that holds a copy of the file, those three files and a
folder of the libraries the exercise allows (worker_setup.py): nothing else of the grader, and no
path back to it. The submitted function comes back as a `RemoteFunction`: a call sends its inputs
down a pipe and reads the outputs back as plain data (wire.py's format, no pickle), which the checks
then hold to the contract as before. A class (the cache exercise) comes back as a `RemoteObject`; a
callable the grader hands over (a next-token callable) stays here, and the worker asks for each of
its answers.

The libraries are the exercise's (exercises/__init__.py: numpy, scipy, torch where installed) and
grading.toml's `libraries` (`offering`); a module none of them holds is refused in words that name
them and how a teacher adds one (`refusal`), not with a bare ModuleNotFoundError.

Least privilege, where the system allows it:

* run as root (Gradescope, a container), the worker runs as an unprivileged user of its own
  (`specdec-worker` when the zip's setup.sh made it, else a user id no account holds),
  claimed for the grading alone (worker_setup.Claim), so that killing every process of that
  user at the end kills its workers, whatever they did, and nothing else;
* on Linux, in a file tree of its own where it may make one (root with CAP_SYS_ADMIN: a mount
  namespace, its only writable place a 64 MiB tmpfs), else under Landlock (no CAP_SYS_ADMIN,
  or run as you: it reads its libraries only and writes no file), and a seccomp filter
  (no namespaces, ptrace, mounts, bpf...): confinement.enter; what held comes back in its
  "ready" message, kept as `Sandbox.confinement` and put in words by describe_confinement;
* limits on memory, CPU time, processes and threads (none: a fork fails), the size of a file
  it writes and the number it opens; on Linux it is killed when the grading process ends;
* this process refuses to be read or traced by the worker (Linux: not dumpable), so a worker
  of the same user cannot read its memory or its open files.

What this does not isolate (docs/oracle.md, "Where a submission runs"): any worker can reach
the network; where the kernel has no Landlock (before Linux 5.13, or not enabled), a worker
run as your own user can read whatever you can read, and one run as root without
CAP_SYS_ADMIN whatever any user can; for a class you do not trust, run `grade-class` as root
in a container.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.grading.engine.quoting import MESSAGE, one_line, shown_value, type_name
from specdec.grading.engine.replies import (
    Returned,
    ReturnedList,
    ReturnedTuple,
    answered,
    plain,
    readable,
    refuse,
    remote_error,
    reply_of,
)
from specdec.grading.engine.worker import confinement, wire, worker
from specdec.grading.engine.worker_setup import (
    Claim,
    import_names,
    library_folder,
    offered,
    record_worker,
    stop_on_sigterm,
    supervised,
    worker_claim,
    worker_environment,
)

STARTUP_S = 60.0  # the worker's own start (Python, NumPy): longer means something is wrong
OUTPUT_KEPT = 20_000  # characters of what the submission printed, passed on
# grading.toml's `libraries`: offered to every worker started while it is set (`offering`),
# beside the libraries of the worker's exercise
EXTRA_LIBRARIES: ContextVar[tuple[str, ...]] = ContextVar("extra_libraries", default=())


@contextlib.contextmanager
def offering(libraries: tuple[str, ...]):
    """Offer `libraries` (installed distributions) to the workers started inside the block,
    beside those an enclosing block offers (grade() offers its config's inside a caller's)."""
    token = EXTRA_LIBRARIES.set(tuple(dict.fromkeys(EXTRA_LIBRARIES.get() + tuple(libraries))))
    try:
        yield
    finally:
        EXTRA_LIBRARIES.reset(token)


def refusal(libraries: tuple[str, ...]) -> str:
    """What a submission reads when it imports a module no library offered here holds (the
    worker puts the module's name for {name}): the libraries it may import, and how a
    teacher offers one more."""
    names = ", ".join(offered(libraries)) or "no library"
    return (
        "No module named '{name}' in the grader: a submission of this exercise may import "
        f"{names} and Python's standard library, nothing else. A teacher offers another "
        'library with `libraries = ["{name}"]` in grading.toml (passed with --config to '
        "specdec grade, grade-class or the Gradescope zip's build)"
    )


@dataclass(frozen=True)
class Limits:
    """What one worker may use. Generous for any exercise (a correct one stays far below)."""

    memory_mb: int = 4096  # address space: NumPy, the submission's arrays (torch needs ~1 GiB)
    cpu_seconds: int = 900  # CPU time of the whole grading (the wall-clock limit comes first)
    file_mb: int = 16  # the largest file it may write, what it prints included
    open_files: int = 256  # the folders it imports from may be held open (confinement.py)
    # all it may write, every file together: the size of the tmpfs it writes in, where a
    # mount namespace exists (run as root with CAP_SYS_ADMIN); elsewhere it writes no file
    # at all (Landlock), or, where neither exists, file_mb per file only
    scratch_mb: int = confinement.SCRATCH_MB

    def settings(self) -> dict:
        return {
            "memory_bytes": self.memory_mb << 20,
            "cpu_seconds": self.cpu_seconds,
            "processes": 0,  # no fork, no thread: nothing can outlive the worker
            "file_bytes": self.file_mb << 20,
            "open_files": self.open_files,
            "core_bytes": 0,
        }


class SandboxError(RuntimeError):
    """The worker could not be started: the grader's problem, not the submission's."""


class WorkerEnded(Exception):
    """The worker ended while the submission ran (it exited, was killed by a limit, or broke
    the format): every later call ends the same way."""


class RemoteFunction:
    """The submission's function (or class, or a method of an object it made), in the worker."""

    def __init__(self, sandbox: Sandbox, handle: int, name: str, signature=None) -> None:
        self.sandbox, self.handle, self.__name__ = sandbox, handle, name
        self.__qualname__ = name
        if signature is not None:
            self.__signature__ = signature

    def __call__(self, *args, **kwargs):
        return self.sandbox.call(self.handle, args, kwargs)

    def each(self, calls: list[tuple], tail: tuple) -> list:
        """One call per tuple of arguments, each followed by `tail` (a generator the calls
        share, sent once) -> the results; a raise carries the index of its call (`.call`).

        An argument that is an array of one shape in every call goes down as one stacked
        array (one array to encode, not one per call); the worker hands each call a copy of
        its slice."""
        columns, stacked = [], []
        for values in zip(*calls, strict=True):
            first = values[0]
            same = isinstance(first, np.ndarray) and all(
                isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype
                for v in values
            )
            columns.append(np.stack(values) if same else list(values))
            stacked.append(same)
        reply = self.sandbox.request(("each", self.handle, columns, stacked, tuple(tail)))
        return answered(reply, len(calls))

    def repeat(self, args: tuple, kwargs: dict, n: int) -> list:
        """n calls, one after the other, each on fresh copies of the arrays -> n results."""
        reply = self.sandbox.request(("repeat", self.handle, tuple(args), dict(kwargs), n))
        return answered(reply, n)

    def __repr__(self) -> str:
        return f"<{self.__name__} in the worker>"


class RemoteObject:
    """An object the submission made (a SlotCache): its attributes are read in the worker."""

    def __init__(self, sandbox: Sandbox, handle: int, type_name: str) -> None:
        self._sandbox, self._handle, self._type_name = sandbox, handle, type_name

    def __getattr__(self, name: str):
        if name.startswith("__") or name.startswith("_sandbox"):  # a probe of Python's own
            raise AttributeError(name)
        return self._sandbox.getattr(self._handle, name)

    def __repr__(self) -> str:
        return f"<{self._type_name} in the worker>"


# --------------------------------------------------------------------------------------------
# The worker process
# --------------------------------------------------------------------------------------------


class Sandbox:
    """One worker process for one submitted file, and the folders it owns."""

    def __init__(
        self,
        file: Path,
        libraries: tuple[str, ...] = ("numpy",),
        reference_pieces: tuple[str, ...] = (),
        limits: Limits | None = None,
        threads: int = 1,
        slot: int | None = None,
    ) -> None:
        self.file = Path(file).resolve()
        libraries = tuple(dict.fromkeys([*libraries, *EXTRA_LIBRARIES.get()]))
        self.limits = limits or Limits()
        self.callbacks: dict[int, object] = {}
        self.sent: dict[int, object] = {}  # id -> the grader's object built in the worker
        self.generators: dict[int, np.random.Generator] = {}  # handed over in this request
        self.ended: WorkerEnded | None = None
        self.confinement: dict = {}  # what the worker ran under (its "ready" message)
        # run as root, the worker's user: handed down by the grading's supervisor, else
        # claimed here (and released, its processes killed, with the folders)
        self.claim: Claim | None = worker_claim(slot)
        self.ids = self.claim.ids if self.claim is not None else None
        if supervised():  # its SIGTERM ends the grading as Ctrl-C does: the worker is killed
            stop_on_sigterm()  # and its folders removed (cleanup) before the SIGKILL comes
        # made in TMPDIR: under a supervisor, its folder, which it removes whole at the end
        self.private = Path(tempfile.mkdtemp(prefix="specdec-grader-"))  # this side's only
        self.scratch = Path(tempfile.mkdtemp(prefix="specdec-worker-"))
        self.process: subprocess.Popen | None = None
        self.finalizer = weakref.finalize(
            self, cleanup, None, self.claim, self.private, self.scratch
        )
        self.start(libraries, reference_pieces, threads)

    # -- start and stop ------------------------------------------------------------------------

    def start(self, libraries, pieces, threads: int) -> None:
        home = self.scratch / "submission"
        home.mkdir()
        copy = home / self.file.name
        shutil.copyfile(self.file, copy)
        lib = self.scratch / "lib"
        library_folder(lib, libraries, pieces)
        code = self.scratch / "worker"  # the worker and the two files it imports
        code.mkdir()
        for module in (worker, wire, confinement):
            shutil.copyfile(Path(module.__file__), code / Path(module.__file__).name)
        worker_file = code / "worker.py"
        room = self.scratch / "tmp"  # its TMPDIR: the capped tmpfs, under a mount namespace
        room.mkdir()
        self.copy = str(copy)
        settings = {
            "limits": self.limits.settings(),
            "path": [str(home), str(lib)],
            "file": str(copy),
            "user": list(self.ids) if self.ids else None,
            "preload": [*import_names(libraries), *(f"reference.{p}" for p in pieces)],
            "scratch_mb": self.limits.scratch_mb,
            "refusal": refusal(libraries),
        }
        if self.ids is not None:
            for path in (self.scratch, home, copy, room):
                os.chown(path, *self.ids)
            for path in [lib, *lib.rglob("*"), code, *code.iterdir()]:
                if not path.is_symlink():
                    path.chmod(0o755 if path.is_dir() else 0o644)
        down_read, down_write = os.pipe()  # grader -> worker
        up_read, up_write = os.pipe()  # worker -> grader
        output = open(self.private / "output.txt", "wb")  # noqa: SIM115 (kept by the child)
        # -u: what it prints reaches the file at once, even if it is killed mid-line
        command = [
            sys.executable,
            "-I",
            "-S",
            "-u",
            str(worker_file),
            str(down_read),
            str(up_write),
        ]
        command += [wire.encode(settings, refuse).hex(), os.pathsep.join(settings["path"])]
        try:
            self.process = subprocess.Popen(
                command,
                cwd=self.scratch,
                env=worker_environment(self.scratch, threads),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                pass_fds=(down_read, up_write),
            )
        finally:
            os.close(down_read)
            os.close(up_write)
            output.close()
        record_worker(self.process.pid)  # for a supervisor, if this process dies first
        self.inbox, self.outbox = up_read, down_write
        os.set_blocking(self.inbox, False)  # polled (worker.read_exactly), then waited on
        self.finalizer.detach()
        self.finalizer = weakref.finalize(
            self,
            cleanup,
            self.process,
            self.claim,
            self.private,
            self.scratch,
            up_read,
            down_write,
        )
        try:
            ready = self.receive(STARTUP_S)
        except WorkerEnded as ended:
            raise SandboxError(
                f"the grader could not start its worker ({ended}){self.access_advice()}:\n"
                f"{self.output()[-3000:]}"
            ) from None
        if not (isinstance(ready, tuple) and ready[:1] == ("ready",)):
            raise SandboxError(f"the worker started with {ready!r} instead of 'ready'")
        held = ready[2] if len(ready) > 2 and isinstance(ready[2], dict) else {}
        self.confinement = {**held, "own_user": self.ids is None}

    def describe_confinement(self) -> str:
        """What the worker ran under, in one line for the reports."""
        return describe_confinement(self.confinement)

    def access_advice(self) -> str:
        if self.ids is None:
            return ""
        return (
            f"; it runs as user id {self.ids[0]}, which must be able to read Python and the "
            f"libraries of {sys.prefix}"
        )

    def close(self) -> None:
        """Stop the worker (whatever it is doing), keep what it printed, remove its folders."""
        self.stop()
        self.printed = self.output()
        self.finalizer()

    printed = ""  # what it printed, once closed

    def output(self) -> str:
        """What the submission printed (the worker's stdout and stderr), cut to OUTPUT_KEPT."""
        path = self.private / "output.txt"
        if not path.is_file():
            return self.printed
        with open(path, "rb") as file:
            data = file.read(OUTPUT_KEPT + 1)
        text = data[:OUTPUT_KEPT].decode("utf-8", "replace")
        return text + ("\n... (cut)" if len(data) > OUTPUT_KEPT else "")

    # -- requests ------------------------------------------------------------------------------

    def load(self, names: list[str]) -> dict:
        """Import the file in the worker; describe the first of `names` it defines."""
        return self.request(("load", self.copy, list(names)))

    def call(self, handle: int, args: tuple, kwargs: dict, keep: bool = False):
        return self.request(("call", handle, tuple(args), dict(kwargs), keep))

    def getattr(self, handle: int, name: str):
        return self.request(("getattr", handle, name))

    def request(self, message: tuple):
        if self.ended is not None:
            raise self.ended
        self.generators = {}
        data = wire.encode(message, self.record)  # the grader's own values: its errors are its
        try:
            self.write(data)
            reply = self.receive()
            while isinstance(reply, tuple) and reply[:1] == ("callback",):
                self.answer(reply)
                reply = self.receive()
            status, value = reply_of(reply)  # the generators' states were set as read
        except (WorkerEnded, wire.WireError, OSError, ValueError, TypeError, KeyError) as error:
            self.ended = (
                error
                if isinstance(error, WorkerEnded)
                else WorkerEnded(
                    f"the worker broke the exchange ({type(error).__name__}: "
                    f"{one_line(str(error), MESSAGE)})"
                )
            )
            self.stop()
            raise self.ended from None
        if status == "error":
            raise remote_error(value)
        return value

    def answer(self, reply: tuple) -> None:
        """The worker asks a callable of the grader's (a next-token function) for a value."""
        _, number, args, kwargs = reply
        try:
            value = self.callbacks[number](*args, **kwargs)
        except Exception as error:  # e.g. a context the callable refuses: raised in there
            self.send(("raise", type(error).__name__, str(error)))
        else:
            self.send(("return", value))

    # -- the pipe ------------------------------------------------------------------------------

    def send(self, value) -> None:
        self.write(wire.encode(value, self.record))

    def write(self, data: bytes) -> None:
        try:
            wire.write_all(self.outbox, wire.LENGTH.pack(len(data)) + data)
        except BrokenPipeError:
            raise WorkerEnded(self.ending()) from None

    def receive(self, timeout: float | None = None):
        if timeout is not None:
            ready, _, _ = select.select([self.inbox], [], [], timeout)
            if not ready:
                raise WorkerEnded(f"no answer within {timeout:g} s")
        try:
            data = wire.receive_bytes(self.inbox)
        except EOFError:
            raise WorkerEnded(self.ending()) from None
        return wire.decode(data, self.rebuild)

    def ending(self) -> str:
        """How the worker ended, in words."""
        process = self.process
        try:
            code = process.wait(timeout=5) if process else None
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        if code is None:
            return "it ended"
        if code < 0:
            import signal

            name = signal.Signals(-code).name
            why = {
                "SIGXCPU": f" (over its CPU-time limit, {self.limits.cpu_seconds} s)",
                "SIGKILL": " (killed: out of memory, or stopped from outside)",
                "SIGSEGV": " (a crash of the interpreter: out of memory?)",
            }.get(name, "")
            return f"the process running your code was killed by {name}{why}"
        return f"your code ended the process running it, with exit code {code}"

    def stop(self) -> None:
        """Kill the worker: by its pid, and, with a user claimed here, every process of that
        user (a claim handed down is its supervisor's to sweep)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            self.process.wait()
        if self.claim is not None:
            self.claim.kill_processes()

    # -- values that are not plain data ----------------------------------------------------------

    def record(self, value):
        """A grader's value that is not plain data -> the record the worker rebuilds."""
        if isinstance(value, np.random.Generator):  # the worker's twin takes its state
            self.generators[id(value)] = value
            return "rng", id(value)
        if isinstance(value, RemoteFunction) and value.sandbox is self:
            return "handle", value.handle
        if isinstance(value, RemoteObject) and value._sandbox is self:
            return "handle", value._handle
        if isinstance(value, np.generic):
            return "scalar", [value.dtype.str, value.item()]
        builder = BUILDERS.get(f"{type(value).__module__}.{type(value).__qualname__}")
        if builder is not None:
            return "build", builder(self, value)
        if callable(value):
            number = len(self.callbacks)
            self.callbacks[number] = value
            name = getattr(value, "__name__", None) or getattr(value, "name", "callable")
            return "callback", [number, str(name)]
        raise TypeError(f"the grader cannot hand a {type(value).__name__} to the worker")

    def shared(self, value, payload) -> dict:
        """A model or drafter the worker builds once and keeps (the grader reuses it)."""
        key = id(value)
        if key in self.sent:
            return {"key": key, "cls": payload["cls"]}
        self.sent[key] = value  # held, so that its id is not reused while the worker has it
        return {"key": key, **payload}

    def rebuild(self, kind: str, payload):
        """A record from the worker -> plain data, or a proxy of an object it keeps."""
        if kind == "rng":  # a generator handed over in this request: it continues from there
            key, state = payload
            generator = self.generators.get(key)
            if generator is None:
                raise wire.WireError("the state of a generator the grader did not hand over")
            generator.bit_generator.state = state
            return None
        if kind == "handle":
            number, name, is_callable = payload
            if type(number) is not int:
                raise wire.WireError(f"a handle numbered {shown_value(number)}")
            if is_callable:
                return RemoteFunction(self, number, type_name(name, "function"))
            return RemoteObject(self, number, type_name(name, "object"))
        if kind == "scalar":
            return payload if isinstance(payload, (bool, int, float, str)) else shown_value(payload)
        if kind == "subclass":  # an int that compares equal to anything becomes its value
            return plain(payload[1])
        if kind == "mapping":  # a dict subclass: a plain dict of its items
            if not isinstance(payload, dict):
                raise wire.WireError("a mapping that is not a dict")
            return payload
        if kind == "sequence":
            _, items, attributes = payload
            made = ReturnedTuple(items) if isinstance(items, tuple) else ReturnedList(items)
            made.__dict__.update(readable(attributes))
            return made
        if kind == "object":
            name, text, attributes = payload
            return Returned(name, text, attributes)
        raise wire.WireError(f"unknown record {shown_value(kind, 60)}")


def cleanup(process, claim: Claim | None, private: Path, scratch: Path, *fds: int) -> None:
    """Kill the worker, close the pipes, remove both folders; a user claimed here: every
    process of it killed, then released."""
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
    if claim is not None:
        claim.release()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    shutil.rmtree(private, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)


def describe_confinement(held: dict) -> str:
    """The worker's "ready" report of its confinement (confinement.enter; Sandbox.confinement)
    -> one line, e.g. "own file tree (mount namespace, 64 MiB to write), seccomp, user 64999"
    or "Landlock ABI 7 + seccomp, user 64999 (no mount namespace: no CAP_SYS_ADMIN)"."""
    if not held:
        return "unknown (the worker did not say)"
    parts = []
    if held.get("mount_namespace"):
        cap = held.get("scratch_cap_mb")
        parts.append(f"own file tree (mount namespace, {cap} MiB to write)")
    elif held.get("landlock"):
        parts.append(f"Landlock ABI {held['landlock']} (reads its libraries only, writes no file)")
    text = " + ".join(parts) or "no file-system confinement"
    if held.get("seccomp"):
        text += " + seccomp"
    user = held.get("user")
    text += f", as your own user (uid {user})" if held.get("own_user") else f", user {user}"
    notes = [str(n) for n in held.get("notes", []) if isinstance(n, str)]
    return text + (f" ({'; '.join(notes)})" if notes else "")


# --------------------------------------------------------------------------------------------
# The grader's objects a submission is handed, as recipes the worker builds from
# --------------------------------------------------------------------------------------------


def gpt_recipe(sandbox: Sandbox, model) -> dict:
    from dataclasses import asdict

    config = asdict(model.config)
    return sandbox.shared(model, {"cls": "GPT", "config": config, "params": dict(model.params)})


def drafter_recipe(sandbox: Sandbox, drafter) -> dict:
    return sandbox.shared(drafter, {"cls": "ModelDrafter", "model": drafter.model})


def sampling_recipe(sandbox: Sandbox, sampling) -> dict:
    from dataclasses import asdict

    return {"key": -1, "cls": "SamplingParams", "fields": asdict(sampling), "share": False}


def tree_recipe(sandbox: Sandbox, tree) -> list:
    # a list, not a dict: thousands go down per request, and each key costs its bytes
    fields = (tree.tokens, tree.parents, tree.q)
    return ["Tree", *(np.asarray(f) for f in fields), list(tree.draws)]


BUILDERS = {
    "reference.model.GPT": gpt_recipe,
    "reference.drafters.ModelDrafter": drafter_recipe,
    "reference.sampling.SamplingParams": sampling_recipe,
    "reference.tree.shape.Tree": tree_recipe,
}
