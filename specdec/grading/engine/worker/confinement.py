"""How the worker is held before it loads a submission (worker.py, beside it): limits, death
with its parent, the libraries imported first, and, run as root, a file tree of its own
and a user of its own (docs/oracle.md, "Where a submission runs").

Standard library only: the worker imports a copy of this file, without the project.
"""

from __future__ import annotations

import importlib
import os
import sys


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

    for name in ["ctypes", "importlib.util", "resource", "signal", *modules]:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def hold_folders(lib: str) -> None:
    """Before giving up root: keep the folders this process imports from open, and read them
    through those handles (/proc/self/fd/N), so that an interpreter or a venv in a folder the
    worker's user may not enter (a pyenv under /root) still serves its imports. The handles
    reach those folders only: not the grader's (engine/sandbox.py copies what the worker may
    read)."""
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
