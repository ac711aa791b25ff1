"""What a worker is given before it starts (specdec/grading/engine/sandbox.py): its library folder,
its environment, its user when the grader is root (claimed for one grading alone: `Claim`);
how a grading run in a child process is watched so that nothing of it outlives it
(`Supervision`, for delivery/gradescope.py's run_grader); and how the processes that start
workers protect themselves from them (not dumpable, stopped with their gradings on SIGTERM)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER_USER = "specdec-worker"  # the account the Gradescope zip's setup.sh creates
FREE_IDS = range(64_999, 60_000, -1)  # where a user id no account holds is looked for


class SetupError(RuntimeError):
    """A worker cannot be given what it needs (no `reference` to copy, no free user id)."""


def library_folder(lib: Path, libraries: tuple[str, ...], pieces: tuple[str, ...]) -> None:
    """`lib`: links to the allowed distributions' packages (with what they require), and a
    `reference` holding only the modules named in `pieces` (the loop's: model, cache...)."""
    lib.mkdir()
    for name in distributions_needed(libraries):
        for top in top_level_paths(name):
            target = lib / top.name
            if not target.exists():
                target.symlink_to(top)
    if pieces:
        # found, not imported: only the loop's grader ships `reference` (closure.py follows
        # import statements, and no other zip needs it)
        found = importlib.util.find_spec("reference")
        if found is None or not found.submodule_search_locations:
            raise SetupError("the grader has no `reference` package to copy the pieces from")
        source = Path(list(found.submodule_search_locations)[0])
        package = lib / "reference"
        package.mkdir()
        (package / "__init__.py").write_text(
            '"""The pieces of the reference this exercise may use (and no more)."""\n'
        )
        for piece in pieces:
            shutil.copyfile(source / f"{piece}.py", package / f"{piece}.py")


def distributions_needed(libraries: tuple[str, ...]) -> list[str]:
    """The installed distributions among `libraries`, with those they require (not extras)."""
    seen: list[str] = []
    todo = list(libraries)
    while todo:
        name = todo.pop()
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # optional (torch), or a requirement of a platform not this one
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.append(key)
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            match = re.match(r"[A-Za-z0-9._-]+", requirement)
            if match:
                todo.append(match.group(0))
    return seen


def top_level_paths(name: str) -> list[Path]:
    """The top-level packages and modules a distribution installed, as paths."""
    dist = importlib.metadata.distribution(name)
    listed = dist.read_text("top_level.txt")  # fast; RECORD is torch's 10 000 lines
    if listed:
        tops = {n.strip() for n in listed.split() if n.strip()}
        tops |= {f"{n}.libs" for n in tops}  # the shared libraries auditwheel puts beside it
        paths = [Path(dist.locate_file(top)) for top in sorted(tops)]
        paths += [Path(dist.locate_file(f"{top}.py")) for top in sorted(tops)]
        return [p for p in paths if p.exists()]
    tops = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first in ("..", "__pycache__") or first.endswith((".dist-info", ".egg-info", ".pth")):
            continue
        tops.add(first)
    paths = [Path(dist.locate_file(top)) for top in sorted(tops)]
    return [p for p in paths if p.exists()]


def installed_distribution(name: str) -> str | None:
    """A library as a teacher names it (a distribution, `scikit-learn`, or the module it
    installs, `sklearn`) -> the installed distribution's own name, or None if none is here."""
    with contextlib.suppress(importlib.metadata.PackageNotFoundError, ValueError):
        return importlib.metadata.distribution(name).metadata["Name"]
    providers = importlib.metadata.packages_distributions().get(name.replace("-", "_"), [])
    return providers[0] if providers else None


def offered(libraries: tuple[str, ...]) -> list[str]:
    """The libraries among `libraries` a worker can offer here (installed: torch may not be),
    by their distributions' names, for the words of a refused import."""
    found = (installed_distribution(name) for name in libraries)
    return list(dict.fromkeys(name for name in found if name))


def import_names(libraries: tuple[str, ...]) -> list[str]:
    """The modules to import for each allowed distribution (its own name, as Python spells
    it): the worker imports them before it gives up root."""
    names = [name.replace("-", "_") for name in libraries if name != "torch"]  # slow: lazily
    if "numpy" in names:  # and the parts NumPy imports only when first used
        names += [f"numpy.{part}" for part in ("random", "linalg", "fft", "polynomial")]
    return names


def worker_environment(scratch: Path, threads: int) -> dict[str, str]:
    """A small environment: nothing of the grader's (its paths, tokens, settings). Its
    temporary folder is the scratch's tmp/: the capped tmpfs where a mount namespace exists
    (worker/confinement.py)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "LANG": "C.UTF-8"}
    env["TMPDIR"] = str(scratch / "tmp")
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(max(threads, 1))
    return env


# --------------------------------------------------------------------------------------------
# The worker's user, claimed for the whole grading (run as root)
# --------------------------------------------------------------------------------------------

IDS_VARIABLE = "SPECDEC_WORKER_IDS"  # "uid:gid" a supervisor claimed for its child grading
PIDS_VARIABLE = "SPECDEC_WORKER_PIDS"  # the folder where a grading records its workers' pids
SLOT_VARIABLE = "SPECDEC_WORKER_SLOT"  # the slot of a class run's grading


def candidate_ids(slot: int) -> list[tuple[int, int]]:
    """The (uid, gid) a worker may run as, the slot's own first: the zip's `specdec-worker`
    for slot 0, else the `slot`-th id no account or group holds; then the others, in turn."""
    import grp
    import pwd

    taken = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
    ids = [(number, number) for number in FREE_IDS if number not in taken]
    with contextlib.suppress(KeyError):
        entry = pwd.getpwnam(WORKER_USER)
        ids.insert(0, (entry.pw_uid, entry.pw_gid))
    if not ids:
        raise SetupError("no free user id for the worker")
    first = slot % len(ids)
    return ids[first:] + ids[:first]


class Claim:
    """A worker's user (uid, gid), held by one grading alone for as long as it runs, so that
    killing every process of that user at its end kills its workers and nothing else.

    The lock is a Linux abstract unix socket bound to a name per uid: the kernel lets one
    socket hold a name, frees it when its last holder ends, however it ends, and it leaves
    no file. Names are per network namespace, as kill(-1) is per PID namespace: two
    containers may each use a uid, and neither reaches the other's processes. A claim handed
    down by a supervisor (IDS_VARIABLE) has no lock here: the supervisor kills and releases."""

    def __init__(self, ids: tuple[int, int], lock=None) -> None:
        self.ids, self.lock = ids, lock

    @property
    def inherited(self) -> bool:
        return self.lock is None

    def environment(self) -> dict[str, str]:
        """What a supervisor's child grading reads to use this claim (`worker_claim`)."""
        return {IDS_VARIABLE: f"{self.ids[0]}:{self.ids[1]}"}

    def kill_processes(self) -> None:
        """Kill every process of the claimed user (its workers, whatever they did: a new
        session, no signal at their parent's death); a claim handed down leaves that to the
        supervisor, whose grading may still run another worker of the user."""
        if not self.inherited:
            kill_user_processes(self.ids)

    def release(self) -> None:
        """Kill the user's processes, then let another grading claim the user."""
        if self.lock is not None:
            kill_user_processes(self.ids)
            self.lock.close()
            self.lock = None


def claim_ids(slot: int) -> Claim:
    """Claim the slot's user, or the next one no other grading on this machine holds; any
    process left of it (a worker that outlived a grading killed without its cleanup) is
    killed first."""
    if not sys.platform.startswith("linux"):  # no abstract sockets: the slot's, unclaimed
        return Claim(candidate_ids(slot)[0], lock=Unlocked())
    import socket

    for ids in candidate_ids(slot):
        # not inheritable (Python's default): no worker started later holds it
        lock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            lock.bind(f"\0specdec-worker-uid-{ids[0]}")
        except OSError:  # held by a grading running now
            lock.close()
            continue
        kill_user_processes(ids)
        return Claim(ids, lock)
    raise SetupError("every user id for workers is held by a grading running now")


class Unlocked:
    """Outside Linux: a claim's lock that locks nothing (said in docs/oracle.md)."""

    def close(self) -> None:
        pass

    def fileno(self) -> int:
        return -1


def worker_claim(slot: int | None = None) -> Claim | None:
    """The user a grading's workers run as when it runs as root (None otherwise): the one its
    supervisor claimed and handed down (IDS_VARIABLE), else one claimed here for `slot`
    (default: slot_from_environment)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    handed = os.environ.get(IDS_VARIABLE, "")
    if re.fullmatch(r"\d+:\d+", handed):
        uid, gid = (int(n) for n in handed.split(":"))
        if uid == 0:
            raise SetupError(f"{IDS_VARIABLE}={handed}: the workers' user cannot be root")
        return Claim((uid, gid))
    return claim_ids(slot if slot is not None else slot_from_environment())


def kill_user_processes(ids: tuple[int, int]) -> None:
    """SIGKILL every process of user ids[0], from a process of that user: kill(-1) reaches
    exactly the processes its sender may signal, that user's (no root's, none in another PID
    namespace). A worker cannot fork (RLIMIT_NPROC 0), so one pass reaches every one. The
    shell's kill, not this Python: an interpreter under /root is not that user's to run."""
    if ids[0] == 0:  # kill(-1) as root is every process of the machine
        raise SetupError("refused: the workers' user cannot be root")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0"],
            user=ids[0],
            group=ids[1],
            extra_groups=[],
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )


def slot_from_environment() -> int:
    """A class run's concurrent gradings each get a slot (grade-class and the Gradescope run
    set it), whose user they try first; a grading started on its own gets one of 1 000 slots
    past the class's, by its process id. Either way a user held by a grading running now is
    passed over (`claim_ids`)."""
    value = os.environ.get(SLOT_VARIABLE, "")
    return int(value) if value.isdigit() else 1_000 + os.getpid() % 1_000


# --------------------------------------------------------------------------------------------
# One grading in a child process, watched from outside (delivery/gradescope.py's run_grader)
# --------------------------------------------------------------------------------------------

GRACE_S = 3.0  # not root: how long a grading has to stop its worker after SIGTERM


def supervised() -> bool:
    """Whether this grading runs under a supervisor (run_grader), which stops it with SIGTERM
    when it is not root."""
    return bool(os.environ.get(PIDS_VARIABLE))


def record_worker(pid: int) -> None:
    """Where a supervisor asked for it (PIDS_VARIABLE): note a worker's pid and start time,
    so that the supervisor can kill it if the grading process could not."""
    folder = os.environ.get(PIDS_VARIABLE)
    if folder and os.path.isdir(folder):
        with contextlib.suppress(OSError):
            Path(folder, str(pid)).write_text(start_time(pid))


def start_time(pid: int) -> str:
    """A process's start time (Linux: field 22 of /proc/PID/stat), which tells it from a later
    process given the same pid; "" where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]


def kill_recorded_workers(folder: Path) -> None:
    """Kill each worker recorded in `folder` that still runs (the same pid, the same start)."""
    import signal

    for entry in sorted(folder.glob("*")) if folder.is_dir() else []:
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if entry.read_text() == start_time(int(entry.name)):
                os.kill(int(entry.name), signal.SIGKILL)


class Supervision:
    """What run_grader holds around one grading in a child process, so that nothing of it
    outlives it, however it ends (a normal end, a timeout, Ctrl-C):

    * a temporary folder of its own, the child's TMPDIR (the grading's private folder and its
      workers' scratch folders are made in it), removed whole at the end; mode 0711, so that
      a worker's user can pass through it to its own scratch folder, not list it;
    * run as root, the workers' user, claimed for the grading's lifetime (`Claim`; the child
      holds the lock too, so the claim lasts while either runs); at the end every process of
      that user is killed, then the claim is released;
    * not root (the workers are you): the grading process records its workers' pids
      (`record_worker`), and whichever still runs at the end is killed.

    No PID namespace: a worker cannot fork (RLIMIT_NPROC 0), so its processes are itself,
    killed by user or by pid."""

    def __init__(self, slot: int = 0) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="specdec-grading-"))
        self.claim: Claim | None = None
        try:
            self.folder.chmod(0o711)
            self.private = self.folder / "supervisor"  # results.json: no worker's to read
            self.private.mkdir(mode=0o700)
            self.pids = self.folder / "workers"
            self.pids.mkdir(mode=0o700)
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                self.claim = claim_ids(slot)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def environment(self) -> dict[str, str]:
        """The child's variables: its TMPDIR, where it records its workers, their user."""
        env = {"TMPDIR": str(self.folder), PIDS_VARIABLE: str(self.pids)}
        return {**env, **(self.claim.environment() if self.claim else {})}

    def pass_fds(self) -> tuple[int, ...]:
        # the child holds the claim's lock too: a supervisor killed on its own leaves it held
        fd = self.claim.lock.fileno() if self.claim is not None else -1
        return (fd,) if fd >= 0 else ()

    def stop(self, child: subprocess.Popen) -> tuple[str, str]:
        """Stop the grading now (a timeout, Ctrl-C) -> what it wrote on stdout and stderr."""
        stop_gradings([child])
        if self.claim is not None:  # before reading its pipes: nothing of it may hold them
            kill_user_processes(self.claim.ids)
        return child.communicate()

    def close(self) -> None:
        """Kill what is left of the grading's workers, release their user, remove the folder."""
        kill_recorded_workers(self.pids)
        if self.claim is not None:
            self.claim.release()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Supervision:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def stop_gradings(children: list[subprocess.Popen]) -> None:
    """Stop grading processes, each the leader of its own session. As root at once (SIGKILL
    to each session's group; the supervisor then kills their workers by user). Not root,
    with SIGTERM first: each grading turns it into KeyboardInterrupt (`stop_on_sigterm`),
    kills its worker and removes its folders; SIGKILL after GRACE_S to what still runs."""
    import signal
    import time

    if hasattr(os, "geteuid") and os.geteuid() != 0:
        for child in children:
            signal_group(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while any(c.poll() is None for c in children) and time.monotonic() < deadline:
            time.sleep(0.05)
    for child in children:
        signal_group(child.pid, signal.SIGKILL)  # its group: whatever it started that stayed


def signal_group(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, number)


def stop_on_sigterm() -> None:
    """A SIGTERM (a scheduler's, `kill`) ends this process as a Ctrl-C does, so that the
    gradings it started, each in a session of its own, are stopped with it."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread: left as it is
        signal.signal(signal.SIGTERM, interrupt)


def not_dumpable() -> None:
    """Linux: this process cannot be traced, nor its memory and files read, by a process of
    the same user that is not root (a worker run as you)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
