"""What a worker is given before it starts (specdec/grading/engine/sandbox.py): its library folder,
its environment, its user when the grader is root; and how the processes that start workers
protect themselves from them (not dumpable, stopped with their gradings on SIGTERM)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import sys
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


def import_names(libraries: tuple[str, ...]) -> list[str]:
    """The modules to import for each allowed distribution (its own name, as Python spells
    it): the worker imports them before it gives up root."""
    names = [name.replace("-", "_") for name in libraries if name != "torch"]  # slow: lazily
    if "numpy" in names:  # and the parts NumPy imports only when first used
        names += [f"numpy.{part}" for part in ("random", "linalg", "fft", "polynomial")]
    return names


def worker_environment(scratch: Path, threads: int) -> dict[str, str]:
    """A small environment: nothing of the grader's (its paths, tokens, settings)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "LANG": "C.UTF-8", "TMPDIR": str(scratch)}
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(max(threads, 1))
    return env


def worker_ids(slot: int) -> tuple[int, int] | None:
    """(uid, gid) for the worker when this process is root (None otherwise): the zip's
    `specdec-worker` for the first slot, else the `slot`-th id no account or group holds."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import grp
    import pwd

    if slot == 0:
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(WORKER_USER)
            return entry.pw_uid, entry.pw_gid
    taken = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
    free = [number for number in FREE_IDS if number not in taken]
    if slot >= len(free):
        raise SetupError("no free user id for the worker")
    return free[slot], free[slot]


def slot_from_environment() -> int:
    """A class run's concurrent gradings each get a slot (grade-class and the Gradescope run
    set it), so that their workers run as different users; a grading started on its own gets
    one of 1 000 slots past the class's, by its process id, so that two run at once as root
    do not share a user either."""
    value = os.environ.get("SPECDEC_WORKER_SLOT", "")
    return int(value) if value.isdigit() else 1_000 + os.getpid() % 1_000


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
