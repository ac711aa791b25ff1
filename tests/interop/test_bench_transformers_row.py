"""The bench's transformers row runs for real (torch on the CPU), on the very weights of
the run: with --random, the random pair itself, saved to a temporary folder."""

from __future__ import annotations

import re

from specdec.cli import main


def test_the_transformers_row_runs_on_the_random_pair(tmp_path, capsys):
    argv = ["bench", "--random", "--ks", "1", "--temperatures", "0", "--repeats", "1"]
    argv += ["--prompts", "text", "--max-new-tokens", "4", "--out", str(tmp_path)]
    assert main(argv) == 0
    report = (tmp_path / "bench.md").read_text()
    assert report.startswith("Status: complete")
    row = re.search(r"\| 0 \| 1 \| ([\d.]+) \| ([\d.]+) \| \*\*([\d.]+)x\*\*", report)
    assert row, "no transformers row in bench.md"
    transformers_tps, ours_tps, ratio = (float(x) for x in row.groups())
    assert transformers_tps > 0 and ours_tps > 0
    assert abs(ratio - ours_tps / transformers_tps) < 0.05 * ratio + 0.01
