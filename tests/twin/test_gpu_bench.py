"""The device benchmark's code path runs here too (NumPy mode): table and JSON come out,
with the launch counts of the stand-in for a device next to the measured tokens/s."""

from __future__ import annotations

import json

from specdec.measure import gpu_bench


def test_the_gpu_bench_runs_and_records_its_backend(tmp_path, capsys):
    args = "--repeats 1 --n-prompts 1 --max-new-tokens 12 --ks 2,3 --batches 1,2 --out"
    gpu_bench.main(args.split() + [str(tmp_path)])
    printed = capsys.readouterr().out
    header = "| loop | tokens/s | transfers / token | launches / token | launches / round |"
    assert header in printed
    result = json.loads((tmp_path / "gpu_bench.json").read_text())
    assert result["backend"].split()[0] in ("numpy", "cupy")
    assert set(result["table"]) == {"ar", "k=2", "k=3"}
    rate, per_token, speedup = result["table"]["ar"]
    assert per_token == 1.0 and speedup == 1.0  # one transfer per autoregressive token
    assert result["table"]["k=3"][1] < 1.0  # fewer than one per token: one per round
    assert set(result["batches"]) == {"1", "2"}
    assert "| batch | AR tok/s | spec tok/s |" in printed
    # launches: counted for every row, one autoregressive round per token, no hidden sync
    launches = result["launches"]
    assert set(launches) == {"ar", "k=2", "k=3"}
    assert launches["ar"]["tokens"] == launches["ar"]["rounds"] == 12
    assert launches["k=3"]["rounds"] < launches["k=3"]["tokens"] == 12
    # each round is at least a forward of the target (6 blocks of 5 fused launches)
    assert all(row["launches"] > 30 * row["rounds"] and not row["hidden_syncs"]
               for row in launches.values())  # fmt: skip
    assert set(result["batch_launches"]) == {"1", "2"}
    assert "launch-bound model for a GPU (a MODEL, not a measurement" in printed


def test_the_count_only_mode_times_nothing_and_prints_the_model(tmp_path, capsys):
    args = "--count-only --n-prompts 1 --max-new-tokens 8 --ks 3 --batches 1 --out"
    gpu_bench.main(args.split() + [str(tmp_path)])
    printed = capsys.readouterr().out
    assert "| loop | tokens | rounds | launches / token | launches / round |" in printed
    assert "tokens/s |" not in printed.split("launch-bound model")[0]  # nothing timed
    record = json.loads((tmp_path / "launch_counts.json").read_text())
    assert set(record["launches"]) == {"ar", "k=3"} and set(record["batch_launches"]) == {"1"}
