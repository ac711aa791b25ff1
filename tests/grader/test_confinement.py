"""Where a submission runs, tested from inside it (engine/worker/confinement.py, sandbox.py,
worker_setup.py; docs/oracle.md, "Where a submission runs, and what it cannot do"):

(a) without CAP_SYS_ADMIN (a container without it): Landlock and seccomp hold it, it reads
    neither /proc nor the grader's files, writes no file anywhere, makes no user namespace;
(b) with CAP_SYS_ADMIN: what it writes, every file together, is capped by its tmpfs;
(c) a grading stopped at its time limit leaves no process of its worker's user and no folder,
    even when the worker left the grader's session and cleared its parent-death signal;
(d) two gradings never share a worker's user.

Run as root (CI); (a) also runs as you, the others say why they are skipped then. A few
seconds each.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from specdec.grading.delivery.gradescope import run_grader
from specdec.grading.engine.sandbox import Sandbox, describe_confinement
from specdec.grading.engine.worker import confinement
from specdec.grading.engine.worker_setup import IDS_VARIABLE, claim_ids, worker_claim

from .capabilities import can_drop, without_sys_admin

REPO = Path(__file__).resolve().parents[2]
LINUX_ROOT = sys.platform.startswith("linux") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not LINUX_ROOT, reason="workers get users of their own as root")


@pytest.fixture
def base(monkeypatch):
    """A folder in /tmp that a worker's user may pass through (pytest's own tree is 0700),
    made this process's and its children's TMPDIR: whatever a grading leaves shows here."""
    folder = Path(tempfile.mkdtemp(prefix="sdc-test-", dir="/tmp"))
    folder.chmod(0o711)
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def submission(folder: Path, source: str) -> Path:
    file = folder / "submitted.py"
    file.write_text(textwrap.dedent(source))
    file.chmod(0o644)
    return file


# --------------------------------------------------------------------------------------------
# (a) no CAP_SYS_ADMIN: Landlock + seccomp
# --------------------------------------------------------------------------------------------

PROBE = """
import ctypes, os

GRADER = {grader!r}


def attempt(action):
    try:
        action()
        return "done"
    except OSError as error:
        return type(error).__name__


def read(path):
    with open(path, "rb") as file:
        file.read(1)


def create(folder):
    with open(os.path.join(folder, "left-by-a-submission"), "w") as file:
        file.write("x")


def verify(p, q, d, rng):
    tried = {{}}
    for path in ("/proc/1/cmdline", GRADER):
        tried[f"read {{path}}"] = attempt(lambda: read(path))
    here = os.getcwd()
    for folder in ("/tmp", "/dev/shm", "/var/tmp", here, os.environ["TMPDIR"]):
        tried[f"create in {{folder}}"] = attempt(lambda: create(folder))
    libc = ctypes.CDLL(None, use_errno=True)
    made = libc.unshare(0x10000000)  # CLONE_NEWUSER
    tried["unshare(CLONE_NEWUSER)"] = "done" if made == 0 else os.strerror(ctypes.get_errno())
    return tried
"""

DRIVER = """
import json, sys
from specdec.grading.engine.sandbox import Sandbox

sandbox = Sandbox(sys.argv[1])
try:
    sandbox.load(["verify"])
    tried = sandbox.call(0, (None, None, None, None), {})
finally:
    sandbox.close()
print(json.dumps({"tried": tried, "confinement": sandbox.confinement}))
"""


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(abi, 0)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.uname().machine not in confinement.SECCOMP_ARCHES,
    reason="Landlock and seccomp: Linux on x86_64 or aarch64",
)
def test_without_sys_admin_landlock_and_seccomp_hold_the_worker(base):
    # as root, the driver runs without CAP_SYS_ADMIN; as you, it never had it
    if landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock")
    grader = REPO / "specdec" / "grading" / "engine" / "grade.py"  # readable by any user
    file = submission(base, PROBE.format(grader=str(grader)))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(file)],
        preexec_fn=without_sys_admin if can_drop() else None,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout)
    worked = {attempt: how for attempt, how in said["tried"].items() if how == "done"}
    assert worked == {}, f"the worker could {sorted(worked)}"
    held = said["confinement"]
    assert held["mount_namespace"] is False and held["seccomp"] is True
    assert held["landlock"] == landlock_abi() and held["scratch_cap_mb"] == 0
    line = describe_confinement(held)
    assert line.startswith(f"Landlock ABI {held['landlock']}") and "seccomp" in line
    if os.geteuid() == 0:  # a user of its own, and the reason it has no file tree
        assert held["user"] != 0 and "no CAP_SYS_ADMIN" in line
    assert os.listdir(base) == ["submitted.py"]  # and its folders are gone


# --------------------------------------------------------------------------------------------
# (b) CAP_SYS_ADMIN: a tmpfs caps what it writes
# --------------------------------------------------------------------------------------------


@needs_root
def test_with_a_mount_namespace_the_scratch_folder_is_capped(base):
    file = submission(
        base,
        """
        import os

        def verify(p, q, d, rng):
            written, block = 0, b"x" * (8 << 20)  # 8 MiB a file: under the per-file limit
            for i in range(16):  # 128 MiB, twice the cap
                try:
                    with open(os.path.join(os.environ["TMPDIR"], f"fill-{i}"), "wb") as f:
                        f.write(block)
                except OSError:
                    break
                written += len(block)
            try:
                open("left-in-the-copy", "w").close()
                copy = "writable"
            except OSError:
                copy = "read only"
            return written, copy
        """,
    )
    sandbox = Sandbox(file)
    try:
        if not sandbox.confinement.get("mount_namespace"):
            pytest.skip("no mount namespace here (no CAP_SYS_ADMIN)")
        sandbox.load(["verify"])
        written, copy = sandbox.call(0, (None, None, None, None), {})
    finally:
        sandbox.close()
    cap = sandbox.confinement["scratch_cap_mb"]
    assert cap == confinement.SCRATCH_MB and written <= cap << 20
    assert copy == "read only"  # the copy of the submission, lib/, worker/: not its to change
    assert describe_confinement(sandbox.confinement).startswith("own file tree")


# --------------------------------------------------------------------------------------------
# (c) nothing outlives a grading stopped at its time limit
# --------------------------------------------------------------------------------------------

ESCAPES = """
import ctypes, os, time

libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(15, {marker!r}.encode(), 0, 0, 0)  # PR_SET_NAME: how the test finds it
libc.prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0: no signal when the grading dies
os.setsid()  # out of the grader's session and process group
time.sleep(10**6)  # while imported: the grading waits for it, checks or no checks


def verify(p_target, q_draft, draft_tokens, rng):
    return 0, 0
"""

ENDLESS = """
import ctypes

ctypes.CDLL(None).prctl(15, {marker!r}.encode(), 0, 0, 0)  # PR_SET_NAME


def verify(p_target, q_draft, draft_tokens, rng):
    while True:
        pass
"""


def processes() -> dict[int, dict]:
    """pid -> its name, state, parent and real uid, from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        found[int(entry)] = {
            "name": fields.get("Name", "").strip(),
            "state": fields.get("State", "?")[:1],
            "parent": int(fields.get("PPid", "0")),
            "uid": int(fields.get("Uid", "-1").split()[0]),
        }
    return found


class Watch(threading.Thread):
    """Notes the uid of the process named `marker` (the worker, once the file is imported)."""

    def __init__(self, marker: str) -> None:
        super().__init__(daemon=True)
        self.marker, self.uid, self.done = marker, None, threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and self.uid is None:
            for process in processes().values():
                if process["name"] == self.marker:
                    self.uid = process["uid"]
            time.sleep(0.05)


def left_of(marker: str, uid: int | None) -> list[str]:
    """The live processes of the graded worker: its name, or its user and no live parent (a
    worker of a grading running now, another test's, has its grading as parent)."""
    table = processes()
    left = []
    for pid, process in table.items():
        if process["state"] == "Z":  # ended; its reaper has not yet collected it
            continue
        orphan = process["parent"] not in table or process["parent"] == 1
        if process["name"] == marker or (process["uid"] == uid and orphan):
            left.append(f"{pid}: {process}")
    return left


@needs_root
@pytest.mark.parametrize("source", [ESCAPES, ENDLESS], ids=["escapes-its-session", "endless"])
def test_a_timeout_leaves_no_process_and_no_folder(base, source):
    marker = f"sdc-{secrets.token_hex(4)}"
    file = submission(base, source.format(marker=marker))
    watch = Watch(marker)
    watch.start()
    try:
        child = run_grader(f"{file}:verify", "verify", "shrink", None, 4.0, cwd=REPO)
    finally:
        watch.done.set()
        watch.join()
    assert child.timed_out, f"expected a timeout:\n{child.stderr[-2000:]}"
    assert watch.uid not in (None, 0), "the worker never ran as a user of its own"
    deadline = time.monotonic() + 2  # a SIGKILLed process takes a moment to end
    while left_of(marker, watch.uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left_of(marker, watch.uid) == []
    assert sorted(os.listdir(base)) == ["submitted.py"], "a folder of the grading was left"


# --------------------------------------------------------------------------------------------
# (d) a worker's user is one grading's alone
# --------------------------------------------------------------------------------------------


@needs_root
def test_two_claims_of_one_slot_get_different_users(monkeypatch):
    monkeypatch.delenv(IDS_VARIABLE, raising=False)
    first = claim_ids(777)
    try:
        second = claim_ids(777)
        try:
            assert first.ids != second.ids
        finally:
            second.release()
        monkeypatch.setenv(IDS_VARIABLE, f"{first.ids[0]}:{first.ids[1]}")
        handed = worker_claim(777)  # a supervisor's child uses its claim, claims none
        assert handed.ids == first.ids and handed.inherited
    finally:
        first.release()
    monkeypatch.delenv(IDS_VARIABLE)
    again = claim_ids(777)  # released: free again
    try:
        assert again.ids == first.ids
    finally:
        again.release()
