"""The device script (scripts/gpu_check.sh) runs, part by part, in NumPy mode: its dry run.

A device is lent for minutes, once in a while; a script that breaks on it wastes the loan.
So CI runs the whole script with `--dry-run`: the same parts, steps, options, paths, plug-in
and table, every step cut to a few seconds of work (the oracle at a sliver of its sample
sizes, the bench on one short prompt, one test file instead of tests/twin) and held to its
time limit scaled down (x 0.25). It also checks that each device call the docs recommend
fits the 600 s a device command may run, that a failed preflight stops everything after it
with one line, and that a call without a part runs nothing.

What it does not prove: anything about a GPU -- that CuPy runs these kernels, how long the
real steps take there, whether their limits are generous enough (docs/gpu.md predicts the
times from the launch counts) -- nor that the device's python3 has the packages (the
preflight checks that, on the device, first).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"
DEVICE_CALL_LIMIT = 600  # what one device command may run, seconds
# the calls docs/gpu.md recommends, each one device command
DEVICE_CALLS = [["preflight", "tests"], ["bench"], ["oracle"]]


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120
    )


def table(path: Path) -> dict[str, list[str]]:
    # the script's summary table -> {step: [part, step, outcome, seconds, limit, last line]}
    rows = [line.strip("|").split("|") for line in path.read_text().splitlines()]
    return {cells[1].strip(): [c.strip() for c in cells] for cells in rows}


def test_the_dry_run_of_every_part_passes_within_its_scaled_limits(tmp_path):
    done = run("--dry-run", "all", OUT=str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    steps = table(tmp_path / "summary.md")
    assert list(steps) == ["preflight", "gpu-tests", "twin-tests", "oracle", "bench"]
    for name, (_, _, outcome, seconds, limit, last) in steps.items():
        assert outcome == "ok" and int(seconds) <= int(limit), (name, outcome, seconds, last)
    assert "PREFLIGHT OK" in (tmp_path / "preflight.log").read_text()
    oracle = (tmp_path / "oracle.log").read_text().splitlines()[-1]  # pytest's last line
    assert " passed" in oracle and "failed" not in oracle and "error" not in oracle
    assert (tmp_path / "gpu_bench.json").is_file()
    assert "| loop | tokens/s | transfers / token | launches / token |" in done.stdout


def test_each_recommended_device_call_fits_one_device_command():
    for parts in DEVICE_CALLS:
        plan = run("--plan", *parts)
        assert plan.returncode == 0, plan.stderr
        totals = [int(line.split()[-2]) for line in plan.stdout.splitlines() if "add up" in line]
        assert len(totals) == len(parts)
        assert sum(totals) <= DEVICE_CALL_LIMIT - 60, (parts, totals)  # a minute to spare


def test_a_failed_preflight_stops_every_later_step_with_one_line(tmp_path):
    done = run("preflight", "tests", OUT=str(tmp_path), SPECDEC_GPU_BACKEND="no-such-backend")
    assert done.returncode == 1
    failures = [line for line in done.stdout.splitlines() if line.startswith("PREFLIGHT FAILED")]
    assert len(failures) == 1, done.stdout
    steps = table(tmp_path / "summary.md")
    assert steps["preflight"][2] == "exit 1"
    assert steps["gpu-tests"][2] == steps["twin-tests"][2] == "skipped"


def test_without_a_part_the_script_runs_nothing_and_says_how():
    for args in ([], ["everything"]):
        done = run(*args)
        assert done.returncode == 2
        assert "bash scripts/gpu_check.sh preflight tests" in done.stdout


def test_the_preflight_tells_a_device_package_from_one_the_device_lacks(tmp_path):
    """The import scan, on a file of its own: a module-level import of a package the device
    lacks is a failure, one inside a function a warning, one in a `try` is optional."""
    spec = importlib.util.spec_from_file_location("preflight", SCRIPT.parent / "gpu_preflight.py")
    preflight = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(preflight)
    source = tmp_path / "example.py"
    source.write_text(
        "import json\nimport numpy as np\nfrom threadpoolctl import threadpool_limits\n"
        "try:\n    import cupy\nexcept ImportError:\n    cupy = None\n"
        "def plot():\n    import matplotlib\n"
    )
    found = {name: lazy for name, _, lazy in preflight.imports_of(source)}
    assert found == {
        "json": False,
        "numpy": False,
        "threadpoolctl": False,
        "threadpoolctl.threadpool_limits": False,
        "matplotlib": True,
    }
    assert preflight.import_problem("json") is preflight.import_problem("numpy") is None
    assert "not among the device's packages" in preflight.import_problem("threadpoolctl")
