"""Gradescope: the autograder zip an instructor uploads, and the run it makes per submission.

    python -m lab.grading.gradescope build autograder.zip [--config my_grading.toml]
    python -m lab.grading.gradescope run [--root /autograder] [--results PATH]

`build` writes Gradescope's layout: `setup.sh` (run once, when Gradescope builds the image:
a virtual environment with numpy, scipy and threadpoolctl pinned to the versions here),
`run_autograder` (run for every submission), `requirements.txt`, the instructor's settings
as `config.json`, and the grader with the code it imports (lab/grading, lab/standins.py,
reference/). Nothing is fetched at grading time.

`run` grades the submission in a child process, so that a verify that loops forever is
stopped after the config's `timeout_s`, and writes results.json in every case: the grade, or
0 with the reason in plain words (a syntax error, no such function, no such file, a crash of
the grader itself, a timeout).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

from lab.grading.config import GradingConfig, load_config
from lab.grading.report import write_json, zero_results

SOURCE = Path(__file__).resolve().parents[2]  # the repository, or the zip's /autograder/source
PACKAGES = ("numpy", "scipy", "threadpoolctl")  # what the grader imports at run time

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
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission. It always leaves results.json: the grade, or 0
# with the reason. AUTOGRADER_ROOT and AUTOGRADER_PYTHON exist for testing it elsewhere.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
[ -x "$PY" ] || PY=python3
cd "$ROOT/source" && "$PY" -m lab.grading.gradescope run --root "$ROOT"
if [ ! -s "$ROOT/results/results.json" ]; then  # not even Python started: still a result
  mkdir -p "$ROOT/results"
  MESSAGE="The autograder could not start Python, so nothing was graded: tell your instructor."
  printf '{"score": 0, "output": "%s"}\\n' "$MESSAGE" > "$ROOT/results/results.json"
fi
"""


def source_files() -> list[Path]:
    """The grader and what it imports, relative to the repository root."""
    files = [Path("lab/__init__.py"), Path("lab/standins.py")]
    files += sorted(p.relative_to(SOURCE) for p in (SOURCE / "lab/grading").glob("*.py"))
    if (SOURCE / "lab/grading/grading.toml").is_file():  # the documented defaults, to copy
        files.append(Path("lab/grading/grading.toml"))
    files += sorted(
        p.relative_to(SOURCE)
        for p in (SOURCE / "reference").rglob("*.py")
        if "__pycache__" not in p.parts
    )
    return files


def requirements() -> str:
    return "".join(f"{name}=={metadata.version(name)}\n" for name in PACKAGES)


def build(out: Path, config_path: str | Path | None = None) -> Path:
    """Write the autograder zip to `out`; the config is checked here, not at grading time."""
    config = load_config(config_path)
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
        add(archive, "requirements.txt", requirements())
        add(archive, "config.json", json.dumps(config.to_dict(), indent=2))
        for path in source_files():
            add(archive, path.as_posix(), (SOURCE / path).read_text())
    return out


# --------------------------------------------------------------------------------------------
# Grading one submission
# --------------------------------------------------------------------------------------------


def find_submission(folder: Path, config: GradingConfig) -> tuple[Path | None, str]:
    """(the file to grade, a note for the student) or (None, why there is none)."""
    wanted = config.submission_file
    if (folder / wanted).is_file():
        return folder / wanted, ""
    found = sorted(p for p in folder.rglob("*") if p.is_file() and "__MACOSX" not in p.parts)
    named = [p for p in found if p.name == wanted]
    if len(named) == 1:  # inside a folder of the upload
        return named[0], ""
    python = [p for p in found if p.suffix == ".py"]
    if len(python) == 1:
        note = f"(no {wanted} in your submission; graded {python[0].name}, its only .py file)"
        return python[0], note
    listing = ", ".join(str(p.relative_to(folder)) for p in found[:12]) or "nothing"
    return None, f"no file {wanted} in your submission (it holds: {listing}); upload {wanted}"


def grade_submission(folder: Path, config: GradingConfig, config_file: Path) -> dict:
    """results.json's content for the submission in `folder`, whatever happens."""
    file, note = find_submission(folder, config)
    if file is None:
        return zero_results(note, config, config.kind)
    spec = f"{file.resolve()}:{config.function}"
    env = {
        **os.environ,
        "PYTHONPATH": str(SOURCE),
        **{v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
    }
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results.json"
        command = [
            sys.executable,
            "-m",
            "lab.grading",
            spec,
            "--kind",
            config.kind,
            "--policy",
            config.policy,
            "--config",
            str(config_file),
            "--gradescope",
            str(results),
        ]
        start = time.perf_counter()
        # its own session, so that a timeout stops whatever the submission started too
        child = subprocess.Popen(
            command,
            cwd=SOURCE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, stderr = child.communicate(timeout=config.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return zero_results(
                f"grading was stopped after {config.timeout_s:g} s: your {config.function} did "
                f"not return (an endless loop? a while loop whose condition never changes?). A "
                f"correct one is graded in about 15 s.",
                config,
                config.kind,
            )
        seconds = time.perf_counter() - start
        if child.returncode in (0, 1) and results.is_file():
            data = json.loads(results.read_text())
            data["extra_data"] = {"grader": str(SOURCE / "lab" / "grading"), "seconds": seconds}
            if note:
                data["output"] = f"{note}\n{data['output']}"
            return data
    error = [line for line in stderr.splitlines() if line.strip()]
    if child.returncode == 2 and error and "specdec grade: error:" in error[-1]:
        reason = error[-1].split("specdec grade: error:", 1)[1].strip()
        return zero_results(f"your code could not be loaded: {reason}", config, config.kind)
    tail = "\n".join(error[-15:]) or "no message"
    return zero_results(
        f"the grader stopped with exit code {child.returncode} after {seconds:.0f} s and no "
        f"grade (out of memory? your code ending the process?):\n{tail}",
        config,
        config.kind,
    )


def run(root: Path, results: Path | None = None, config_file: Path | None = None) -> int:
    """Grade root/submission and write results.json (root/results/results.json by default)."""
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
    parser = argparse.ArgumentParser(prog="python -m lab.grading.gradescope", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build_parser = sub.add_parser("build", help="write the autograder zip to upload")
    build_parser.add_argument("out", metavar="OUT.zip")
    build_parser.add_argument(
        "--config", default=None, help="your settings (a copy of lab/grading/grading.toml)"
    )
    run_parser = sub.add_parser("run", help="grade ROOT/submission (what run_autograder does)")
    run_parser.add_argument("--root", default="/autograder", help="Gradescope's tree")
    run_parser.add_argument("--results", default=None, help="default: ROOT/results/results.json")
    run_parser.add_argument("--config", default=None, help="default: the zip's config.json")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            out = build(Path(args.out), args.config)
        except ValueError as error:
            parser.exit(2, f"{parser.prog}: error: {error}\n")
        print(f"written: {out} ({len(source_files()) + 4} files); upload it to Gradescope")
        return 0
    return run(Path(args.root), args.results and Path(args.results), args.config)


if __name__ == "__main__":
    raise SystemExit(main())
