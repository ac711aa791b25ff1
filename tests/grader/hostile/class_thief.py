"""Hostile: in a class run (grade-class), finds the class folder, reads the other students'
submissions and hands in the first good one as its own, then tries to delete their folders.

Where it looks: its ancestors' command lines (/proc/PID/cmdline): grade-class's FOLDER, and
the spec of the grading child (FOLDER/student/my_verify.py:verify). Made safe for whoever
runs it by hand: it deletes only inside the tests' throwaway folders (their path holds
"specdec-hostile-"), never in a checkout. Its own verify is the skeleton's.

The grader must answer: 0 for it; the others' folders unchanged and their grades theirs."""

import os
import shutil


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


def class_folders() -> tuple[list[str], set[str]]:
    """(the folders that may hold the class, the paths that are this student's own)."""
    folders, own = [], set()
    for pid in ancestors():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                words = file.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if "specdec.grading.delivery.classroom" in words:  # grade-class FOLDER ...
            after = words[words.index("specdec.grading.delivery.classroom") + 1 :]
            folders += [w for w in after[:1] if not w.startswith("-")]
        for word in words:
            if word.endswith(".py:verify"):  # the grading child's spec: our own file
                file_path = word.rsplit(":", 1)[0]
                own |= {file_path, os.path.dirname(file_path)}
                folders += [os.path.dirname(file_path), os.path.dirname(os.path.dirname(file_path))]
    return list(dict.fromkeys(folders)), own


def others(folder: str, own: set[str]) -> list[str]:
    try:
        names = sorted(os.listdir(folder))
    except OSError as error:
        print(f"could not list {folder}: {error}")
        return []
    return [os.path.join(folder, n) for n in names if os.path.join(folder, n) not in own]


def read_submission(path: str) -> str | None:
    files = [path] if path.endswith(".py") else [os.path.join(path, "my_verify.py")]
    for file in files:
        try:
            with open(file) as opened:
                return opened.read()
        except OSError as error:
            print(f"could not read {file}: {error}")
    return None


STOLEN = None
folders, own = class_folders()
for folder in folders:
    for path in others(folder, own):
        text = read_submission(path)
        if STOLEN is None and text and "def verify" in text and "Hostile:" not in text:
            namespace = {"__name__": "stolen"}
            exec(compile(text, path, "exec"), namespace)  # the point of it
            STOLEN = namespace["verify"]
            print(f"stole the verify of {path}")
        if "specdec-hostile-" in path:  # only the tests' throwaway folders
            try:
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
                print(f"deleted {path}")
            except OSError as error:
                print(f"could not delete {path}: {error}")


def verify(p_target, q_draft, draft_tokens, rng):
    if STOLEN is not None:
        return STOLEN(p_target, q_draft, draft_tokens, rng)
    raise NotImplementedError("write verify() in my_verify.py (nothing to steal was found)")
