"""Hostile: tries to reach outside its worker while imported: reads the command lines of the
processes above it (where the grading chain names its results file), leaves files in the
machine's shared temporary folders, fills its own scratch folder past any sensible size, and
makes a user namespace of its own (root inside it, a way to mount or to shed limits). It
prints "ESCAPED: ..." for every attempt that worked; its verify is wrong.

The grader must answer: 0 for the wrong verify; and afterwards no file of this one's is left
anywhere, and no attempt worked (with or without CAP_SYS_ADMIN)."""

import ctypes
import os

LEFT = "specdec-hostile-left"  # every file it leaves starts with this
CLONE_NEWUSER = 0x10000000


def escaped(what: str) -> None:
    print(f"ESCAPED: {what}")


for pid in ("1", str(os.getppid())):  # whose command lines it can read
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            if file.read():
                escaped(f"read /proc/{pid}/cmdline")
    except OSError:
        pass

for folder in ("/tmp", "/dev/shm", "/var/tmp"):  # a file left where the grader never looks
    try:
        with open(os.path.join(folder, f"{LEFT}-{os.getpid()}.txt"), "w") as file:
            file.write("left by a submission\n")
        escaped(f"wrote a file in {folder}")
    except OSError:
        pass

written = 0  # its own folder, 8 MiB a file (under the per-file limit), up to 1 GiB in all
block = b"x" * (8 << 20)
try:
    for i in range(128):
        with open(f"{LEFT}-{i}.bin", "wb") as file:
            file.write(block)
        written += len(block)
except OSError:
    pass
if written > 128 << 20:
    escaped(f"wrote {written >> 20} MiB into its scratch folder")

libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(CLONE_NEWUSER) == 0:
    escaped("made a user namespace")


def verify(p_target, q_draft, draft_tokens, rng):
    return 0, 0
