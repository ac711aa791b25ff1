"""One row per `specdec bench` run: the machine it ran on and what it measured there.

    .venv/bin/python -m specdec.measure.summary bench-a/ bench-b/ ...   # folders holding bench.json

The same command gives different numbers on different CPUs, BLAS kernels and thread counts
(docs/benchmarks.md, "Every machine"). This table puts runs of several machine types side by
side, each row read from that run's own bench.json, so a figure quoted in README or
docs/benchmarks.md names the run and machine it came from and the range over machine types
is read, not retyped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HEADER = [
    "| machine (CPU / BLAS kernel / threads) | greedy: best k, speedup | T = 0.8: best k, "
    "speedup | alpha greedy / 0.8 | v(k+1) at the best greedy k, fast / plain | status |",
    "|---|---|---|---|---|---|",
]


def load(folder: Path) -> dict:
    path = folder / "bench.json" if folder.is_dir() else folder
    if not path.is_file():
        raise ValueError(f"{path}: no bench.json (run `specdec bench --out {folder}` first)")
    return json.loads(path.read_text())


def best(points: list[dict], temperature: float) -> dict | None:
    at_t = [p for p in points if p["temperature"] == temperature]
    return max(at_t, key=lambda p: p["speedup"]) if at_t else None


def machine_text(machine: dict) -> str:
    threads = machine["threads"]
    kernel = machine["kernel"] + (" (emulated)" if machine.get("coretype_override") else "")
    return f"{machine['cpu']} / {kernel} / {threads} thread" + ("s" if threads != 1 else "")


def summary_row(data: dict) -> str:
    points = data["points"]
    cells = [machine_text(data["machine"])]
    for t in (0.0, 0.8):
        p = best(points, t)
        cells.append(f"k = {p['k']}: **{p['speedup']:.2f}x**" if p else "-")
    alphas = [best(points, t) for t in (0.0, 0.8)]
    cells.append(" / ".join(f"{p['alpha']:.2f}" if p else "-" for p in alphas))
    greedy = best(points, 0.0)
    if greedy is not None:
        key = str(greedy["k"] + 1)
        fast_v = data["costs"]["v"].get(key)
        plain = data.get("plain_costs")
        plain_v = plain["v"].get(key) if plain else None
        cells.append(
            f"v({key}) = {fast_v:.2f} / " + (f"{plain_v:.2f}" if plain_v is not None else "-")
        )
    else:
        cells.append("-")
    cells.append(data["status"].split(";")[0])
    return "| " + " | ".join(cells) + " |"


def summary_table(runs: list[dict]) -> str:
    return "\n".join(HEADER + [summary_row(r) for r in runs]) + "\n"


def main(argv: list[str] | None = None) -> int:
    folders = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not folders:
        print("usage: python -m specdec.measure.summary FOLDER [FOLDER ...]", file=sys.stderr)
        return 2
    try:
        runs = [load(f) for f in folders]
    except ValueError as err:
        print(f"specdec.measure.summary: {err}", file=sys.stderr)
        return 2
    print(summary_table(runs), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
