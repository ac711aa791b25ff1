"""Running a test's child process the way a container without CAP_SYS_ADMIN runs it
(Docker's default, and likely Gradescope's), without any tool outside Python.

    subprocess.run([...], preexec_fn=without_sys_admin)

drops CAP_SYS_ADMIN from the child's bounding set before it executes its program: run as root,
the program then starts without it (a root's capabilities are capped by the bounding set at
exec), so that mount namespaces are refused to it and to everything it starts, as in such a
container."""

from __future__ import annotations

import ctypes
import os
import sys

PR_CAPBSET_DROP = 24
CAP_SYS_ADMIN = 21


def can_drop() -> bool:
    """Whether this process may drop a capability from a child's bounding set (Linux, root)."""
    return sys.platform.startswith("linux") and os.geteuid() == 0


def without_sys_admin() -> None:
    """preexec_fn: CAP_SYS_ADMIN out of the bounding set, for the program about to start."""
    libc = ctypes.CDLL(None, use_errno=True)
    args = [ctypes.c_ulong(CAP_SYS_ADMIN), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)]
    if libc.prctl(ctypes.c_int(PR_CAPBSET_DROP), *args) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN) refused")
