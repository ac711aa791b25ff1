"""How the worker is held before it loads a submission (worker.py, beside it): limits, death
with its parent, the libraries imported first, and the confinement it enters (`enter`):

* run as root with CAP_SYS_ADMIN (a container that has it, a machine of your own): a mount
  namespace whose root holds only what it needs (`confine`), the only writable place a small
  tmpfs (SCRATCH_MB), then an unprivileged user of its own;
* without a mount namespace (a container without CAP_SYS_ADMIN, Gradescope's likely case, or
  run as your own user): Landlock (`landlock`), an unprivileged file-access policy: read and
  execute beneath the folders it imports from and the system's libraries, no file created or
  written anywhere (it writes only what it already holds open), nothing of /proc;
* everywhere on x86_64 and aarch64 Linux: a seccomp filter (`seccomp`) that refuses the
  system calls a submission could use to leave all this (namespaces, ptrace, mounts, bpf...).

`enter` returns what it could do, and the worker says it in its "ready" message
(sandbox.describe_confinement puts it in words). docs/oracle.md, "Where a submission runs".

Standard library only: the worker imports a copy of this file, without the project.
"""

from __future__ import annotations

import importlib
import os
import sys

SCRATCH_MB = 64  # the tmpfs the worker may write in, where a mount namespace exists


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


def libc():
    """The C library, its variadic calls given 64-bit arguments (a bare Python int goes down
    as a 32-bit int, whose upper half the kernel may then read as garbage)."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def syscall(number: int, *args) -> int:
    """syscall(2) by number (Landlock's calls have no wrapper in older C libraries)."""
    import ctypes

    return libc().syscall(ctypes.c_long(number), *args)


def prctl(option: int, *args: int) -> int:
    import ctypes

    values = [ctypes.c_ulong(a) for a in (*args, 0, 0, 0, 0)[:4]]
    return libc().prctl(ctypes.c_int(option), *values)


PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 38, 22


def die_with_parent() -> None:
    """Linux: be killed when the grading process ends, however it ends. A submission can
    clear this (prctl is its to call): the grading's supervisor then kills every process of
    the worker's user (worker_setup.Claim), and without one the grading process kills its
    worker by its process id (sandbox.cleanup)."""
    if not sys.platform.startswith("linux"):
        return
    import signal

    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
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


# --------------------------------------------------------------------------------------------
# What the worker ran under, said to the grader
# --------------------------------------------------------------------------------------------


def enter(settings: dict) -> dict:
    """Everything between the libraries' import and the submission's: a file tree of its own
    (or Landlock where none can be made), its user, death with its parent, seccomp. Returns
    what held, for the "ready" message:

        user             the user id it runs as
        mount_namespace  a file tree of its own (`confine`)
        landlock         the Landlock ABI version applied, or None
        seccomp          the filter of `seccomp` applied
        scratch_cap_mb   what it may write in all (the tmpfs), 0: no file at all (Landlock),
                         None: only RLIMIT_FSIZE per file
        notes            what was refused, and why, in a few words each"""
    lib, ids = settings["path"][1], settings["user"]
    cap = int(settings.get("scratch_mb") or SCRATCH_MB)
    said = {"mount_namespace": False, "landlock": None, "seccomp": False, "notes": []}
    said["scratch_cap_mb"] = None
    if ids is not None:  # root: a mount namespace when the system lets us make one
        refused = confine(lib, ids, cap)
        said["mount_namespace"] = refused is None
        if refused is not None:
            said["notes"].append(f"no mount namespace: {refused}")
            hold_folders(lib)
        importlib.invalidate_caches()
    if said["mount_namespace"]:
        said["scratch_cap_mb"] = cap
    else:  # Landlock needs no privilege: the same for root without CAP_SYS_ADMIN and for you
        abi, refused = landlock(readable_places(lib))
        said["landlock"] = abi
        if abi is None:
            said["notes"].append(f"no Landlock: {refused}")
        else:
            said["scratch_cap_mb"] = 0  # it creates no file at all
    drop_to(ids)
    die_with_parent()  # a change of user clears it: asked again
    refused = seccomp()
    said["seccomp"] = refused is None
    if refused is not None:
        said["notes"].append(f"no seccomp filter: {refused}")
    said["user"] = os.getuid() if hasattr(os, "getuid") else -1
    return said


# --------------------------------------------------------------------------------------------
# A file tree of its own (root with CAP_SYS_ADMIN)
# --------------------------------------------------------------------------------------------

# mount(2) flags and unshare(2)'s new mount namespace (Linux)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MS_PRIVATE, CLONE_NEWNS = 1 << 18, 0x00020000
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32")  # the shared libraries a library may load late


def confine(lib: str, ids: tuple[int, int], scratch_mb: int = SCRATCH_MB) -> str | None:
    """Linux, as root, before giving up root: a mount namespace of the worker's own whose root
    holds only what it needs, each at its usual path: its scratch folder (read only: the copy
    of the submission, lib/, worker/), a tmpfs of `scratch_mb` MiB on its tmp/ (the one place
    it can write, owned by `ids`, so that what it writes is capped in all, not only per file),
    the folders it imports from (the standard library, the allowed libraries' packages: read
    only), the system's shared libraries and a few devices. Nothing else of the machine's
    files exists for the submission: not the grader's checkout, not the class folder, not
    /proc (its ancestors' command lines), not /tmp, whoever may read them.

    None when done; else why not (a container without CAP_SYS_ADMIN, or one whose security
    profile refuses mounts): the worker then sees the machine's files as before."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    import ctypes

    c = libc()
    if c.unshare(CLONE_NEWNS) != 0:
        error = ctypes.get_errno()
        return "no CAP_SYS_ADMIN" if error == 1 else os.strerror(error)  # 1: EPERM
    try:
        make_root(c, lib, ids, scratch_mb)
    except OSError as error:  # CAP_SYS_ADMIN, but mounts refused (Docker's AppArmor profile):
        # nothing was changed outside scratch/.root, which is not entered: Landlock instead
        return f"a mount was refused ({error})"
    return None


def make_root(c, lib: str, ids: tuple[int, int], scratch_mb: int) -> None:
    """`confine`'s file tree, in the new mount namespace, entered (chroot) once whole."""
    import ctypes

    def mount(source, target, kind, flags, data=None) -> None:
        encoded = [x.encode() if isinstance(x, str) else x for x in (source, target, kind, data)]
        if c.mount(encoded[0], encoded[1], encoded[2], ctypes.c_ulong(flags), encoded[3]) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")

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

    system = [p for p in SYSTEM if os.path.isdir(p)]
    system = [p for p in system if not os.path.islink(p)]  # /lib -> usr/lib: linked below
    imports = [p for p in sys.path if os.path.isdir(p) and not p.startswith(scratch)]
    links = [os.path.realpath(os.path.join(lib, n)) for n in sorted(os.listdir(lib))]
    for path in [*system, *imports]:
        show(os.path.realpath(path))
    for link in SYSTEM[1:]:  # merged /usr: the same links as the machine's
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
    show(scratch)
    # its writable place: a tmpfs, so that the sum of what it writes is capped (RLIMIT_FSIZE
    # caps one file), and no file it makes can be run
    room = f"size={scratch_mb}m,nr_inodes=1024,mode=0700,uid={ids[0]},gid={ids[1]}"
    mount(
        "tmpfs",
        root + os.path.join(scratch, "tmp"),
        "tmpfs",
        MS_NOSUID | MS_NODEV | MS_NOEXEC,
        room,
    )
    os.chroot(root)
    os.chdir(scratch)


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


# --------------------------------------------------------------------------------------------
# Landlock: read-only files without any privilege (no CAP_SYS_ADMIN, or not root)
# --------------------------------------------------------------------------------------------

# the same numbers on x86_64 and aarch64 (added after the tables were unified); elsewhere
# (alpha, mips: other numbers) Landlock is not tried
LANDLOCK_ARCHES = ("x86_64", "aarch64")
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
# access rights to files (include/uapi/linux/landlock.h): bits 0-12 since ABI 1, REFER (13)
# since 2, TRUNCATE (14) since 3, IOCTL_DEV (15) since 5
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1, 2, 4, 8
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# since ABI 6: no signal to, and no abstract unix socket of, a process outside the domain
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2


def handled_rights(abi: int) -> int:
    """Every file access right this ABI knows: each is then refused unless a rule grants it
    (a right the kernel does not know would make it refuse the whole ruleset)."""
    bits = 13 + (abi >= 2) + (abi >= 3) + (abi >= 5)
    return (1 << bits) - 1


def readable_places(lib: str) -> list[str]:
    """What the worker reads once confined: its scratch folder (the copy, lib/, worker/), the
    folders it imports from (the standard library; /proc/self/fd/N when held: their real
    paths), the allowed libraries (lib/'s links' targets), the system's shared libraries."""
    scratch = os.path.dirname(lib)
    places = [scratch, *(p for p in sys.path if os.path.isdir(p))]
    places += [os.path.join(lib, n) for n in sorted(os.listdir(lib))]
    places += [p for p in SYSTEM if os.path.isdir(p)]
    return list(dict.fromkeys(os.path.realpath(p) for p in places))


def landlock(readable: list[str]) -> tuple[int | None, str]:
    """Linux >= 5.13: from now on this process (and anything it could start) may only read
    and execute beneath `readable` and the read-only DEVICES, and write /dev/null; it creates,
    removes, renames or writes no file (the pipes and the output file it already holds stay
    usable: Landlock checks opening, not files already open). /proc is not among them: other
    processes' command lines and files stay unreadable. Since ABI 6 it can neither signal a
    process outside nor reach an abstract unix socket outside.

    (the ABI version applied, "") or (None, why not: nothing changed)."""
    if not sys.platform.startswith("linux") or os.uname().machine not in LANDLOCK_ARCHES:
        return None, f"not tried on {sys.platform} {os.uname().machine}"
    import ctypes

    version = ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
    abi = syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), version)
    if abi < 1:  # before Linux 5.13, or not among the kernel's security modules
        return None, f"the kernel has none enabled ({os.strerror(ctypes.get_errno())})"

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1  # the kernel's struct is packed: 12 bytes
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    handled = handled_rights(abi)
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the fields this ABI knows
    attr = RulesetAttr(handled, 0, scoped)
    ruleset = syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        return None, f"no ruleset ({os.strerror(ctypes.get_errno())})"
    try:
        rules = [(p, READ) for p in readable] + [(d, FS_READ_FILE) for d in DEVICES]
        rules.append(("/dev/null", FS_READ_FILE | FS_WRITE_FILE))
        for path, rights in rules:
            allow(ruleset, PathBeneath, path, rights & handled)
        if prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:  # the condition of restrict_self without privilege
            return None, f"no_new_privs refused ({os.strerror(ctypes.get_errno())})"
        if syscall(LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return None, f"restrict_self refused ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return abi, ""


def allow(ruleset: int, PathBeneath, path: str, rights: int) -> None:
    """One rule: `rights` beneath `path` (a file takes only a file's rights). A path that is
    not there is skipped: nothing beneath it to read."""
    import ctypes

    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            rights &= FILE_ONLY
        rule = ctypes.byref(PathBeneath(rights, fd))
        kind = ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH)
        if syscall(LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), kind, rule, ctypes.c_uint32(0)) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"Landlock refused a rule for {path}: {os.strerror(error)}")
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# seccomp: the system calls that could undo the rest, refused
# --------------------------------------------------------------------------------------------

CLONE_NAMESPACES = 0x7E020000  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
EPERM, ENOSYS = 1, 38
# the calls refused: namespaces, tracing another process's memory, mounts (the old and the new
# calls), bpf, perf events, the kernel's keyrings, userfaultfd, and io_uring (whose requests
# seccomp never sees); clone is refused with a namespace flag only, and clone3 always with
# ENOSYS (its flags sit in memory a filter cannot read; the C library then falls back to clone)
REFUSED = (
    "unshare setns ptrace process_vm_readv process_vm_writev mount umount2 pivot_root chroot "
    "open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr bpf perf_event_open "
    "add_key request_key keyctl userfaultfd io_uring_setup io_uring_enter io_uring_register"
).split()
# per architecture: the audit number the kernel reports, the x32 bit (x86_64: calls of the
# x32 ABI carry it; refused, all), and the numbers, from the kernel's tables
# (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h for aarch64)
SECCOMP_ARCHES = {
    "x86_64": {
        "audit": 0xC000003E,
        "x32": 0x40000000,
        "numbers": """unshare 272 setns 308 ptrace 101 process_vm_readv 310 process_vm_writev 311
            mount 165 umount2 166 pivot_root 155 chroot 161 open_tree 428 move_mount 429
            fsopen 430 fsconfig 431 fsmount 432 fspick 433 mount_setattr 442 bpf 321
            perf_event_open 298 add_key 248 request_key 249 keyctl 250 userfaultfd 323
            io_uring_setup 425 io_uring_enter 426 io_uring_register 427 clone 56 clone3 435""",
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "x32": None,
        "numbers": """unshare 97 setns 268 ptrace 117 process_vm_readv 270 process_vm_writev 271
            mount 40 umount2 39 pivot_root 41 chroot 51 open_tree 428 move_mount 429
            fsopen 430 fsconfig 431 fsmount 432 fspick 433 mount_setattr 442 bpf 280
            perf_event_open 241 add_key 217 request_key 218 keyctl 219 userfaultfd 282
            io_uring_setup 425 io_uring_enter 426 io_uring_register 427 clone 220 clone3 435""",
    },
}


def numbers(arch: dict) -> dict[str, int]:
    """An architecture's table: system call name -> number."""
    words = arch["numbers"].split()
    return {name: int(number) for name, number in zip(words[::2], words[1::2], strict=True)}


# classic BPF, as seccomp reads it: a load of a word of struct seccomp_data (nr at 0, arch at
# 4, args[0]'s low half at 16 on these little-endian machines), compare-and-jump, return
BPF_LD_W_ABS, BPF_JEQ, BPF_JGE, BPF_JSET, BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, SECCOMP_MODE_FILTER = 0x7FFF0000, 0x00050000, 2


def seccomp() -> str | None:
    """Linux on x86_64 or aarch64: from now on (and for good) the calls in SECCOMP_ARCHES fail
    with EPERM, and so does any call of another ABI (32-bit calls on a 64-bit kernel, where
    the numbers differ). None when applied; else why not (another architecture: no filter)."""
    arch = SECCOMP_ARCHES.get(os.uname().machine) if sys.platform.startswith("linux") else None
    if arch is None:
        return f"not written for {sys.platform} {os.uname().machine}"
    import ctypes

    program = assemble(seccomp_program(arch))

    class Filter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_uint16),
            ("jt", ctypes.c_uint8),
            ("jf", ctypes.c_uint8),
            ("k", ctypes.c_uint32),
        ]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*(Filter(*line) for line in program))
    fprog = Program(len(program), filters)
    if prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
        return f"no_new_privs refused ({os.strerror(ctypes.get_errno())})"
    if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog)) != 0:
        return f"the kernel refused it ({os.strerror(ctypes.get_errno())})"
    return None


def seccomp_program(arch: dict) -> list[tuple]:
    """The filter, with named jump targets (`assemble` turns them into offsets)."""
    deny, nosys = ("ret", SECCOMP_RET_ERRNO | EPERM), ("ret", SECCOMP_RET_ERRNO | ENOSYS)
    number = numbers(arch)
    lines = [("ld", 4), ("jne", arch["audit"], "deny"), ("ld", 0)]
    if arch["x32"]:
        lines.append(("jge", arch["x32"], "deny"))
    lines += [("jeq", number[name], "deny") for name in REFUSED]
    lines += [("jeq", number["clone"], "clone"), ("jeq", number["clone3"], "nosys")]
    lines += [("ret", SECCOMP_RET_ALLOW)]
    lines += [("label", "clone"), ("ld", 16), ("jset", CLONE_NAMESPACES, "deny")]
    lines += [("ret", SECCOMP_RET_ALLOW)]
    lines += [("label", "deny"), deny, ("label", "nosys"), nosys]
    return lines


def assemble(lines: list[tuple]) -> list[tuple[int, int, int, int]]:
    """("ld", offset), ("ret", value), ("jeq"|"jne"|"jge"|"jset", k, label) and ("label", name)
    -> (code, jt, jf, k) instructions; a jump goes to its label when its test holds, else on."""
    where, count = {}, 0
    for line in lines:
        if line[0] == "label":
            where[line[1]] = count
        else:
            count += 1
    program = []
    for line in lines:
        op = line[0]
        if op == "label":
            continue
        if op == "ld":
            program.append((BPF_LD_W_ABS, 0, 0, line[1]))
        elif op == "ret":
            program.append((BPF_RET, 0, 0, line[1]))
        else:
            skip = where[line[2]] - len(program) - 1
            code = {"jeq": BPF_JEQ, "jne": BPF_JEQ, "jge": BPF_JGE, "jset": BPF_JSET}[op]
            jt, jf = (0, skip) if op == "jne" else (skip, 0)
            program.append((code, jt, jf, line[1]))
    return program
