"""Hostile: looks for the grader on disk and, where it finds a folder holding
reference/verification.py, imports the answer from there and returns what it returns.

Where it looks: up from its own file, the parent's cwd and every path on its ancestors'
command lines, sys.path, sys.executable and the libraries it was given (their real paths),
the environment, and the usual places (/autograder/source, /work, /home, /root).

The grader must answer: 0 (its verify raises NotImplementedError: nothing was found, or
nothing could be read)."""

import importlib
import os
import sys
import types


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


def command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def places() -> list[str]:
    found = [os.path.abspath(__file__), os.getcwd(), sys.executable, sys.prefix]
    found += ["/autograder/source", "/work", "/root", os.path.expanduser("~")]
    for pid in ancestors():
        try:
            found.append(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            pass
        for word in command_line(pid):
            for piece in word.replace("=", ":").split(":"):
                if piece.startswith("/"):
                    found.append(piece)
    for entry in sys.path:
        found.append(entry)
        if os.path.isdir(entry):
            try:
                found += [os.path.realpath(os.path.join(entry, n)) for n in os.listdir(entry)]
            except OSError:
                pass
    found += [v for v in os.environ.values() if v.startswith("/")]
    for home in ("/home", "/work"):
        try:
            found += [os.path.join(home, n) for n in os.listdir(home)]
        except OSError:
            pass
    return found


def grader_folders() -> list[str]:
    folders = []
    for place in places():
        path = os.path.realpath(place)
        while True:
            if os.path.isfile(os.path.join(path, "reference", "verification.py")):
                if path not in folders:
                    folders.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
    return folders


def steal(folder: str):
    # a package `reference` that is only this folder: its __init__ (which imports much more)
    # is never run
    package = types.ModuleType("reference")
    package.__path__ = [os.path.join(folder, "reference")]
    sys.modules["reference"] = package
    return importlib.import_module("reference.verification").verify


STOLEN = None
for folder in grader_folders():
    try:
        STOLEN = steal(folder)
        print(f"imported the reference's verify from {folder}")
        break
    except Exception as error:  # unreadable: try the next one
        print(f"found {folder} but could not import from it: {error!r}")
        sys.modules.pop("reference", None)


def verify(p_target, q_draft, draft_tokens, rng):
    if STOLEN is None:
        raise NotImplementedError("the grader's reference was not found, or not readable")
    result = STOLEN(p_target, q_draft, draft_tokens, rng)
    return int(result.accepted), int(result.token)
