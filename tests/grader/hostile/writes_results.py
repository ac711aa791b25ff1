"""Hostile: writes a full-marks results.json wherever the grader might read one, then ends
its process with exit code 0 (at import, and again in verify).

The paths: Gradescope's /autograder/results/results.json, the `--gradescope PATH` and the
`--root ROOT` (ROOT/results/results.json) on its ancestors' command lines.

The grader must answer: 0, saying the process running the code ended ("exit code 0"); the
results file the grader writes says 0."""

import json
import os

FAKE = {"score": 10.0, "output": "every family passed", "tests": []}


def ancestors() -> list[int]:
    # the parent chain, read from /proc/PID/stat (its 4th field is the parent's pid)
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


def targets() -> list[str]:
    paths = ["/autograder/results/results.json"]
    for pid in ancestors():
        words = command_line(pid)
        for word, following in zip(words, [*words[1:], ""], strict=False):  # [] when unreadable
            if word == "--gradescope" and following.endswith(".json"):
                paths.append(following)
            if word.startswith("--gradescope="):
                paths.append(word.split("=", 1)[1])
            if word == "--root" and following:
                paths.append(os.path.join(following, "results", "results.json"))
    return paths


def write_everywhere() -> None:
    for path in targets():
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as file:
                json.dump(FAKE, file)
            print(f"wrote {path}")
        except OSError as error:
            print(f"could not write {path}: {error}")


write_everywhere()
os._exit(0)  # the grader never sees an error: the process just ends, "successfully"


def verify(p_target, q_draft, draft_tokens, rng):
    write_everywhere()
    os._exit(0)
