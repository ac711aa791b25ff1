"""The device script (scripts/gpu_check.sh) runs, part by part, in NumPy mode: its dry run.

A device is lent for minutes, once in a while; a script that breaks on it wastes the loan.
So CI runs the whole script with `--dry-run`: the same parts in the same order, steps,
options, paths, plug-in and table, every step cut to a few seconds of work (the first parts
on the stand-in for a device, the oracle at a sliver of its sample sizes, the bench on one
short prompt, one test file instead of tests/twin). What is held is what runs and in what
order, and each first part's budget: the launches it makes, counted on the stand-in at the
device's sizes and priced by scripts/gpu_kernel_check.py, must fit the part's limit -- never
the wall seconds the dry run took (a busy CI machine's, which say nothing about a device;
the limits only stop a hung step). It also checks that each device call the docs recommend
fits the 600 s a device command may run, that a failed preflight stops everything after it
with one line, and that a call without a part runs nothing.

What it does not prove: anything about a GPU -- that CuPy runs these kernels, how long the
real steps take there, whether the budgets' prices hold (docs/gpu.md predicts the times
from code) -- nor that the device's python3 has the packages (the preflight checks that, on
the device, first).
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
DEVICE_CALLS = [["kernels", "sanitizer", "replay", "timings"], ["preflight", "tests"], ["bench"],
                ["oracle"]]  # fmt: skip
STEPS = ["kernels", "racecheck", "synccheck", "replay", "timings",  # the risky parts first
         "preflight", "gpu-tests", "twin-tests", "oracle", "bench"]  # fmt: skip
CASES = ["fused_linear_1v, 1 x 768 x 768 (K > 1)",
         "fused_linear_1, 1 x 768 x 766 (rows not a multiple of 4; K > 1)",
         "pick_rows G=50 greedy", "pick_rows G=50 T=0.8",
         "decide_packed G=256", "cached_attention P=8"]  # fmt: skip


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600
    )


def table(path: Path) -> dict[str, list[str]]:
    # the script's summary table -> {step: [part, step, outcome, seconds, limit, last line]}
    rows = [line.strip("|").split("|") for line in path.read_text().splitlines()]
    return {cells[1].strip(): [c.strip() for c in cells] for cells in rows}


def plan_limits() -> dict[str, int]:
    # the device's limit of each step, seconds (`--plan all`, unscaled)
    plan = run("--plan", "all", GPU_CHECK_TIME_SCALE="1")
    rows = [line.strip("|").split("|") for line in plan.stdout.splitlines() if line.startswith("|")]
    return {cells[1].strip(): int(cells[2]) for cells in rows[2:]}


def test_the_dry_run_runs_every_part_in_order_and_each_budget_fits_its_limit(tmp_path):
    done = run("--dry-run", "all", OUT=str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    steps = table(tmp_path / "summary.md")
    assert list(steps) == STEPS
    for name, (_, _, outcome, _, _, last) in steps.items():
        assert outcome == "ok", (name, outcome, last)
    limits = plan_limits()
    for part in ("kernels", "replay", "timings"):
        log = (tmp_path / f"{part}.log").read_text()
        (line,) = [x for x in log.splitlines() if x.startswith(f"BUDGET {part}:")]
        launches, predicted = int(line.split()[2]), float(line.split()[5])
        assert launches > 0 and predicted <= limits[part], (line, limits[part])
        assert log.rstrip().endswith(f"{part.upper()} OK")
    kernels = (tmp_path / "kernels.log").read_text()
    ran = [line[6:].split(":")[0] for line in kernels.splitlines() if line.startswith("ok    ")]
    assert ran == CASES  # every multi-block kernel, in this order, eager and replayed
    for tool in ("racecheck", "synccheck"):  # the calls the sanitizer watches on a device
        calls = (tmp_path / f"{tool}.log").read_text().count("ok    one call of ")
        assert calls == len(CASES)
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
