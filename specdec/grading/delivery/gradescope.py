"""Gradescope: the autograder zip an instructor uploads, and the run it makes per submission.

    python -m specdec.grading.delivery.gradescope build autograder.zip [--config my_grading.toml]
    python -m specdec.grading.delivery.gradescope run [--root /autograder] [--results PATH]

`build` writes Gradescope's layout: `setup.sh` (run once, when Gradescope builds the image:
a virtual environment with the grader's requirements pinned to the versions here),
`run_autograder` (run for every submission), `requirements.txt`, the instructor's settings
as `config.json`, and the grader with the code it imports. The files and requirements.txt
are computed, not written by hand: the project files and third-party packages that grading
the configured exercise imports (specdec/grading/engine/closure.py). Nothing is fetched at grading
time.

`run` grades the submission in a child process, so that a verify that loops forever is
stopped after the config's `timeout_s`, and writes results.json in every case: the grade, or
0 with the reason in plain words (a syntax error, no such function, no such file, a crash of
the grader itself, a timeout).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from specdec.grading.delivery.cli import GRADER_FAILED, GRADER_FAILED_EXIT
from specdec.grading.engine.closure import Closure, distributions, import_closure
from specdec.grading.engine.config import GradingConfig, load_config
from specdec.grading.engine.quoting import one_line, without_paths
from specdec.grading.engine.report import write_json, zero_results
from specdec.grading.engine.submission import file_problem
from specdec.grading.engine.worker_setup import (
    SLOT_VARIABLE,
    Supervision,
    not_dumpable,
    stop_gradings,
    stop_on_sigterm,
)
from specdec.grading.exercises import KINDS, kind_of_name
from specdec.grading.exercises import exercise as exercise_of

SOURCE = Path(__file__).resolve().parents[3]  # the repository, or the zip's /autograder/source
# what run_autograder runs (`python -m specdec.grading.delivery.gradescope run`), and the
# child that grades (`python -m specdec.grading`)
ENTRY_POINTS = ("specdec/grading/delivery/gradescope.py", "specdec/grading/__main__.py")
# offered to a submission where installed, not shipped in a zip's requirements (~1 GB): a
# teacher who wants it lists it in grading.toml's `libraries`
NOT_SHIPPED = ("torch",)

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image: the network is
# open then, and not needed afterwards. A virtual environment with the grader's dependencies,
# pinned to the versions it was tested with (requirements.txt); Python >= 3.11.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
PY=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3.11 python3.11-venv
  PY=python3.11
elif ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3-venv
fi
"$PY" -m venv /autograder/venv
/autograder/venv/bin/pip install --no-cache-dir -r /autograder/source/requirements.txt
# the unprivileged user the students' code runs as (specdec/grading/engine/sandbox.py): it can read
# Python and the venv, and write only its own scratch folder
id -u specdec-worker >/dev/null 2>&1 || useradd --system --no-create-home \
  --shell /usr/sbin/nologin specdec-worker
chmod -R go-rwx /autograder/source  # the grader, its answers and settings: root's alone
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission. It always leaves results.json: the grade, or 0
# with the reason. AUTOGRADER_ROOT and AUTOGRADER_PYTHON exist for testing it elsewhere.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
[ -x "$PY" ] || PY=python3
chmod -R go-rwx "$ROOT/source" "$ROOT/submission" 2>/dev/null  # root's; the worker gets a copy
cd "$ROOT/source" && "$PY" -m specdec.grading.delivery.gradescope run --root "$ROOT"
if [ ! -s "$ROOT/results/results.json" ]; then  # not even Python started: still a result
  mkdir -p "$ROOT/results"
  MESSAGE="The autograder could not start Python, so nothing was graded: tell your instructor."
  printf '{"score": 0, "output": "%s"}\\n' "$MESSAGE" > "$ROOT/results/results.json"
fi
"""


def graded_kinds(config: GradingConfig) -> tuple[str, ...]:
    """The exercises a zip with this config may be asked to grade: the config's kind, else the
    one its function's name says, else every one (the kind is then read from the submitted
    function's signature, at grading time)."""
    if config.kind != "auto":
        return (exercise_of(config.kind).kind,)
    named = kind_of_name(config.function)
    return (named,) if named else KINDS


def grader_closure(config: GradingConfig) -> Closure:
    """What grading `config`'s exercises imports: project files and third-party modules."""
    roots, handed_in = [SOURCE / path for path in ENTRY_POINTS], []
    for kind in graded_kinds(config):
        chosen = exercise_of(kind)
        # the registry (exercises/__init__.py) loads these by their names, in strings: no
        # import statement shows them
        roots += [SOURCE / module_path(t) for t in (chosen.checks, chosen.revise) if t]
        # what a submission imports too (the loop's skeleton imports reference.sampling):
        # not shipped themselves, and found in a checkout only
        handed_in += [SOURCE / chosen.skeleton_path, SOURCE / chosen.solution_path]
    return import_closure(roots, SOURCE, tuple(p for p in handed_in if p.is_file()))


def module_path(target: str) -> str:
    """'specdec.grading.exercises.x.checks:function' -> 'specdec/grading/exercises/x/checks.py'."""
    return target.partition(":")[0].replace(".", "/") + ".py"


def source_files(config: GradingConfig | None = None) -> list[Path]:
    """The grader and what it imports, relative to the repository root."""
    files = list(grader_closure(config or GradingConfig()).files)
    if (SOURCE / "specdec/grading/grading.toml").is_file():  # the documented defaults, to copy
        files.append(Path("specdec/grading/grading.toml"))
    return files


def requirements(config: GradingConfig | None = None) -> str:
    """requirements.txt: each third-party package the grader imports, and each library a
    submission is offered (its exercise's, but torch: NOT_SHIPPED; the config's `libraries`),
    pinned to the version installed here (the one the tests ran with)."""
    config = config or GradingConfig()
    pins = set(distributions(grader_closure(config).third_party).values())
    offered = [n for k in graded_kinds(config) for n in exercise_of(k).libraries]
    offered = [n for n in offered if n not in NOT_SHIPPED] + list(config.libraries)
    pins |= {f"{name}=={metadata.version(name)}" for name in offered}
    return "".join(f"{pin}\n" for pin in sorted(pins, key=str.lower))


def build(out: Path, config_path: str | Path | None = None, exercise: str | None = None) -> Path:
    """Write the autograder zip to `out`; the config is checked here, not at grading time.

    `exercise` (a kind of the registry, exercises/__init__.py) sets the file the students hand
    in, the function and the kind to that exercise's skeleton's."""
    config = load_config(config_path)
    if exercise:
        chosen = exercise_of(exercise)
        config = replace(
            config, submission_file=chosen.skeleton, function=chosen.function, kind=chosen.kind
        )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def add(archive: zipfile.ZipFile, name: str, text: str, executable: bool = False) -> None:
        info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
        info.external_attr = (0o755 if executable else 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        archive.writestr(info, text)

    with zipfile.ZipFile(out, "w") as archive:
        add(archive, "setup.sh", SETUP_SH, executable=True)
        add(archive, "run_autograder", RUN_AUTOGRADER, executable=True)
        add(archive, "requirements.txt", requirements(config))
        add(archive, "config.json", json.dumps(config.to_dict(), indent=2))
        for path in source_files(config):
            add(archive, path.as_posix(), (SOURCE / path).read_text())
    return out


# --------------------------------------------------------------------------------------------
# Grading one submission
# --------------------------------------------------------------------------------------------


def find_submission(folder: Path, config: GradingConfig) -> tuple[Path | None, str]:
    """(the file to grade, a note for the student) or (None, why there is none).

    Only regular files are graded, and no link is followed while searching (lstat, os.walk
    without followlinks): a link named like the wanted file, or the only .py file being one,
    is refused with the reason (a link into the grader's source would be read by this side,
    and quoted in the results)."""
    wanted = config.submission_file
    top = folder / wanted
    if os.path.lexists(top):
        refused = file_problem(top)
        return (None, refused) if refused else (top, "")
    found, links = files_in(folder)
    named = [p for p in found if p.name == wanted]
    linked = [p for p in links if p.name == wanted]
    if linked:
        return None, file_problem(linked[0])
    if len(named) == 1:  # inside a folder of the upload
        return named[0], ""
    python = [p for p in found if p.suffix == ".py"]
    if len(python) == 1:
        name = one_line(python[0].name, 100)
        note = f"(no {wanted} in your submission; graded {name}, its only .py file)"
        return python[0], note
    if not python and [p for p in links if p.suffix == ".py"]:
        return None, file_problem(next(p for p in links if p.suffix == ".py"))
    listing = ", ".join(one_line(str(p.relative_to(folder)), 100) for p in found[:12])
    listing = listing or "nothing"
    return None, f"no file {wanted} in your submission (it holds: {listing}); upload {wanted}"


def files_in(folder: Path) -> tuple[list[Path], list[Path]]:
    """The regular files under `folder` and its links (to files or folders), sorted; links
    are not followed, and a Mac archive's __MACOSX folder is left out."""
    regular, links = [], []
    for root, folders, files in os.walk(folder, followlinks=False):
        folders[:] = [f for f in folders if f != "__MACOSX"]
        for name in files + folders:
            path = Path(root) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                links.append(path)
            elif stat.S_ISREG(mode):
                regular.append(path)
    return sorted(regular), sorted(links)


def grade_submission(folder: Path, config: GradingConfig, config_file: Path | None) -> dict:
    """results.json's content for the submission in `folder`, whatever happens."""
    file, note = find_submission(folder, config)
    if file is None:
        return zero_results(note, config, config.kind)
    return grade_file(file, config, config_file, note)


def grade_file(file: Path, config: GradingConfig, config_file: Path | None, note: str = "") -> dict:
    """results.json's content for one file (the config's function in it), whatever happens."""
    spec = f"{Path(file).resolve()}:{config.function}"
    child = run_grader(spec, config.kind, config.policy, config_file, config.timeout_s)
    return results_of(child, config, note)


@dataclass
class ChildRun:
    """One grading in a child process, as it ended."""

    spec: str
    timeout_s: float
    returncode: int | None  # None: stopped at the time limit
    stdout: str  # the report (the child's stdout holds nothing else)
    stderr: str  # what the submission printed, and the child's errors
    seconds: float
    results: dict | None  # the child's results.json, when it wrote one

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def function(self) -> str:
        return self.spec.rpartition(":")[2] or "function"


def run_grader(
    spec: str,
    kind: str,
    policy: str,
    config_file: Path | str | None,
    timeout_s: float,
    extra: tuple[str, ...] = (),
    cwd: Path = SOURCE,
    threads: int = 1,
    slot: int = 0,
) -> ChildRun:
    """Grade `spec` with `python -m specdec.grading` in a child process, stopped after `timeout_s`.

    Nothing of the grading outlives this call, however it ends (worker_setup.Supervision):
    the child runs in its own session with a temporary folder of its own (removed whole at
    the end); run as root, its workers' user is claimed for it alone, and every process of
    that user is killed when it ends (a worker that left the session and cleared its
    parent-death signal included); not root, a timeout or Ctrl-C sends SIGTERM first, so
    that the grading stops its worker itself, then SIGKILL. `extra` adds options of the
    grade command (e.g. --json); `slot` numbers concurrent gradings: the user their workers
    try first (a user held by another grading is passed over)."""
    path = os.pathsep.join(filter(None, [str(SOURCE), os.environ.get("PYTHONPATH")]))
    with Supervision(slot) as supervision:
        env = {
            **os.environ,
            "PYTHONPATH": path,
            **{
                v: str(threads)
                for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
            },
            SLOT_VARIABLE: str(slot),
            **supervision.environment(),
        }
        results = supervision.private / "results.json"
        command = [sys.executable, "-m", "specdec.grading", spec, "--kind", kind]
        command += ["--policy", policy]
        command += ["--config", str(config_file)] if config_file else []
        command += ["--threads", str(threads), "--gradescope", str(results), *extra]
        start = time.perf_counter()
        child = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            pass_fds=supervision.pass_fds(),
        )
        RUNNING[child.pid] = child
        try:
            stdout, stderr = child.communicate(timeout=timeout_s)
            returncode = child.returncode
        except subprocess.TimeoutExpired:
            stdout, stderr = supervision.stop(child)
            returncode = None
        except KeyboardInterrupt:  # its own session does not see the Ctrl-C: stop it too
            supervision.stop(child)
            raise
        finally:
            RUNNING.pop(child.pid, None)
        seconds = time.perf_counter() - start
        wrote = returncode in (0, 1) and results.is_file()
        data = json.loads(results.read_text()) if wrote else None
    # the child's note about the scratch results.json means nothing to whoever reads stderr
    stderr = "".join(
        line for line in stderr.splitlines(keepends=True) if line.strip() != f"written: {results}"
    )
    return ChildRun(spec, timeout_s, returncode, stdout, stderr, seconds, data)


RUNNING: dict[int, subprocess.Popen] = {}  # the graders' children now running, by pid


def stop_running() -> None:
    """Stop every grader child still running (a Ctrl-C in the parent reaches none of them:
    each runs in its own session): their run_grader calls then end, and each kills what is
    left of its grading's workers and removes its folder."""
    stop_gradings(list(RUNNING.values()))


def failure_reason(child: ChildRun) -> str | None:
    """Why the child gave no grade, in plain words (None: it gave one)."""
    if child.timed_out:
        return (
            f"grading was stopped after {child.timeout_s:g} s: your {child.function} did "
            f"not return (an endless loop? a while loop whose condition never changes?). A "
            f"correct one is graded in well under a minute."
        )
    if child.results is not None:
        return None
    error = [line for line in child.stderr.splitlines() if line.strip()]
    if child.returncode == 2 and error and error[-1].startswith("specdec grade: error:"):
        reason = error[-1].split("specdec grade: error:", 1)[1].strip()
        return f"your code could not be loaded: {reason}"
    failed = [line for line in error if line.startswith(GRADER_FAILED)]
    if child.returncode == GRADER_FAILED_EXIT and failed:  # cli.grader_failed's own line
        return failed[-1].removeprefix("specdec grade: ")
    # neither: it was killed (a signal, out of memory) or ended before it could say why. Its
    # last lines, the grader's folders cut from them (what the submission printed is there,
    # each line "  | "-prefixed by grade.show_output)
    tail = "\n".join(without_paths(one_line(line)) for line in error[-15:]) or "no message"
    return (
        f"the grader stopped with exit code {child.returncode} after {child.seconds:.0f} s and "
        f"no grade (out of memory? your code ending the process?):\n{tail}"
    )


def results_of(child: ChildRun, config: GradingConfig, note: str = "") -> dict:
    """results.json's content: the child's grade, or 0 with the reason it gave none."""
    reason = failure_reason(child)
    if reason is not None:
        return zero_results(reason, config, config.kind)
    data = dict(child.results)
    data["extra_data"] = {"grader": str(SOURCE / "specdec" / "grading"), "seconds": child.seconds}
    if note:
        data["output"] = f"{note}\n{data['output']}"
    return data


def run(root: Path, results: Path | None = None, config_file: Path | None = None) -> int:
    """Grade root/submission and write results.json (root/results/results.json by default)."""
    not_dumpable()  # a worker run as this user cannot read this process's memory or files
    stop_on_sigterm()
    root = Path(root)
    results = Path(results) if results else root / "results" / "results.json"
    config_file = Path(config_file) if config_file else SOURCE / "config.json"
    config = GradingConfig()
    try:
        config = load_config(config_file if config_file.is_file() else None)
        data = grade_submission(root / "submission", config, config_file)
    except Exception as error:  # the autograder's own failure: still a result, and a reason
        reason = f"the autograder failed ({type(error).__name__}: {error}); please report it"
        data = zero_results(reason, config, config.kind)
    write_json(data, results)
    print(f"written: {results} (score {data.get('score')})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec.grading.delivery.gradescope", description=__doc__
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build_parser = sub.add_parser("build", help="write the autograder zip to upload")
    build_parser.add_argument("out", metavar="OUT.zip")
    build_parser.add_argument(
        "--config", default=None, help="your settings (a copy of specdec/grading/grading.toml)"
    )
    build_parser.add_argument(
        "--exercise",
        choices=KINDS,
        default=None,
        help="grade this exercise's skeleton (sets submission_file, function and kind)",
    )
    run_parser = sub.add_parser("run", help="grade ROOT/submission (what run_autograder does)")
    run_parser.add_argument("--root", default="/autograder", help="Gradescope's tree")
    run_parser.add_argument("--results", default=None, help="default: ROOT/results/results.json")
    run_parser.add_argument("--config", default=None, help="default: the zip's config.json")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            out = build(Path(args.out), args.config, args.exercise)
        except ValueError as error:
            parser.exit(2, f"{parser.prog}: error: {error}\n")
        with zipfile.ZipFile(out) as archive:
            print(f"written: {out} ({len(archive.namelist())} files); upload it to Gradescope")
        return 0
    return run(Path(args.root), args.results and Path(args.results), args.config)


if __name__ == "__main__":
    raise SystemExit(main())
