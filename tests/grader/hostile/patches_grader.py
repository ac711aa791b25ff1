"""Hostile: tries to change the grader itself. It imports the grader's modules to loosen
them (specdec.grading.engine.core's ALPHA), plants look-alikes in sys.modules, and looks for the
grader's files on disk (as finds_grader.py does) to write to them; its verify is wrong.

Writing is real only in a Gradescope zip's copy of the grader (a folder holding
run_autograder, which the tests make and throw away); in any other checkout (yours) it only
leaves a new file, hostile_was_here.txt, and tries to open the grader's files for writing
without writing, so that a failure of the grader never damages a working tree.

The grader must answer: 0, and every file of the grader unchanged."""

import os
import sys
import types

MARK = "hostile_was_here.txt"
GRADER_FILES = (
    "specdec/grading/engine/core.py",
    "specdec/grading/engine/report.py",
    "reference/verification.py",
)
LOOSE = "ALPHA = 1.0  # written by a hostile submission\n"

try:  # the grader's own modules, to loosen in place
    import specdec.grading.engine.core as core

    core.ALPHA = 1.0
    print("patched specdec.grading.engine.core.ALPHA")
except ImportError as error:
    print(f"could not import the grader: {error}")

GRADER_MODULES = ("specdec.grading.engine.core", "specdec.grading.engine.report")
for name in ("specdec", "specdec.grading", "specdec.grading.engine", *GRADER_MODULES):
    fake = types.ModuleType(name)
    fake.__path__ = []
    fake.ALPHA = 1.0
    sys.modules[name] = fake  # a grader that imports these here would get the fakes


def ancestors() -> list[int]:
    chain, pid = [], os.getppid()
    while pid > 1 and len(chain) < 30:
        chain.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as file:
                pid = int(file.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return chain


def places() -> list[str]:
    found = [sys.executable, sys.prefix, "/autograder/source", "/work"]
    for pid in ancestors():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                words = file.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        for word, following in zip(words, [*words[1:], ""], strict=False):  # [] when unreadable
            if word == "--root" and following:  # the zip's run: ROOT/source is the grader
                found.append(os.path.join(following, "source"))
            found += [p for p in word.replace("=", ":").split(":") if p.startswith("/")]
    for entry in sys.path:
        if os.path.isdir(entry):
            try:
                found += [os.path.realpath(os.path.join(entry, n)) for n in os.listdir(entry)]
            except OSError:
                pass
    return found


def grader_folders() -> list[str]:
    folders = []
    for place in places():
        path = os.path.realpath(place)
        while True:
            if os.path.isfile(os.path.join(path, "specdec", "grading", "engine", "core.py")):
                if path not in folders:
                    folders.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
    return folders


def attack(folder: str) -> None:
    disposable = os.path.isfile(os.path.join(folder, "run_autograder"))
    try:
        with open(os.path.join(folder, "specdec", "grading", MARK), "w") as file:
            file.write("a submission wrote here\n")
        print(f"wrote {MARK} in {folder}")
    except OSError as error:
        print(f"could not write in {folder}: {error}")
    for name in GRADER_FILES:
        path = os.path.join(folder, name)
        try:
            if disposable:  # the zip's copy: overwrite it for real
                with open(path, "w") as file:
                    file.write(LOOSE)
            else:  # a checkout: open for writing, write nothing
                os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
            print(f"could write {path}")
        except OSError as error:
            print(f"could not write {path}: {error}")


for folder in grader_folders():
    attack(folder)


def verify(p_target, q_draft, draft_tokens, rng):
    return 0, 0
