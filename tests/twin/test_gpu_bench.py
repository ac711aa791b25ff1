"""The device benchmark's code path runs here too (NumPy mode): table and JSON come out."""

from __future__ import annotations

import json

from lab import gpu_bench


def test_the_gpu_bench_runs_and_records_its_backend(tmp_path, capsys):
    args = "--repeats 1 --n-prompts 1 --max-new-tokens 12 --ks 2,3 --batches 1,2 --out"
    gpu_bench.main(args.split() + [str(tmp_path)])
    printed = capsys.readouterr().out
    assert "| loop | tokens/s | transfers / token | speedup vs AR |" in printed
    result = json.loads((tmp_path / "gpu_bench.json").read_text())
    assert result["backend"].split()[0] in ("numpy", "cupy")
    assert set(result["table"]) == {"ar", "k=2", "k=3"}
    rate, per_token, speedup = result["table"]["ar"]
    assert per_token == 1.0 and speedup == 1.0  # one transfer per autoregressive token
    assert result["table"]["k=3"][1] < 1.0  # fewer than one per token: one per round
    assert set(result["batches"]) == {"1", "2"}
    assert "| batch | AR tok/s | spec tok/s |" in printed
