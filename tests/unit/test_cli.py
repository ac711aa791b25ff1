"""The `specdec` command end to end, on the untrained stand-in pair (fast, no files needed)."""

from __future__ import annotations

import json

import pytest

from specdec.cli import main
from specdec.cli.options import parse_list


def test_demo_prints_the_text_the_rounds_and_the_statistics(capsys):
    assert main(["demo", "--random", "-k", "4", "--max-new-tokens", "12", "--no-colour"]) == 0
    out = capsys.readouterr().out
    for expected in (
        "machine: ",
        "sampling: greedy, k=4",
        "round   1  context=",
        "target cache",
        "generated text",
        "alpha (accepted/examined)",
        "autoregressive tokens/s",
        "measured speedup",
        "speculative output identical to autoregressive output: yes",
    ):
        assert expected in out, expected


def test_demo_without_k_chooses_it_by_measurement_and_says_why(capsys):
    """No -k: the k this machine's measured c, v and the pair's alpha predict best."""
    assert main(["demo", "--random", "--max-new-tokens", "12", "--no-colour"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "chosen on this machine" in x)
    k = int(line.split()[0].removeprefix("k="))
    assert 1 <= k <= 8 and f"sampling: greedy, k={k}," in out
    for words in ("measured alpha = ", "c = ", f"v({k + 1}) = ", "predicted speedup"):
        assert words in line, (words, line)
    assert "speculative output identical to autoregressive output: yes" in out


def test_demo_k_is_fixed_for_drafters_it_is_not_measured_for(capsys):
    assert main(["demo", "--drafter", "lookup", "--max-new-tokens", "12", "--no-colour"]) == 0
    out = capsys.readouterr().out
    assert "k=4: the fixed default" in out and "sampling: greedy, k=4," in out


def test_demo_with_early_stopping_says_so_and_stays_exact(capsys):
    args = ["demo", "--random", "-k", "4", "--max-new-tokens", "12", "--min-confidence", "0.5"]
    assert main(args + ["--no-colour"]) == 0
    out = capsys.readouterr().out
    assert "k=4 (stops below 0.5)" in out
    assert "speculative output identical to autoregressive output: yes" in out


def test_demo_refuses_a_bad_k_with_one_clear_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--random", "-k", "0", "--max-new-tokens", "8"])
    assert exit_info.value.code == 2
    assert "specdec: error: k must be" in capsys.readouterr().err


def test_demo_refuses_a_bad_threshold_with_one_clear_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--random", "--min-confidence", "2", "--max-new-tokens", "8"])
    assert exit_info.value.code == 2
    assert "specdec: error: min_confidence must be in [0, 1]" in capsys.readouterr().err


def test_bench_writes_the_report_and_the_figures(tmp_path, capsys):
    args = ["bench", "--random", "--ks", "1,2", "--temperatures", "0", "--repeats", "1"]
    args += ["--prompts", "code", "--max-new-tokens", "6", "--no-transformers"]
    assert main(args + ["--out", str(tmp_path)]) == 0
    report = (tmp_path / "bench.md").read_text()
    assert report.count("| 0 | 1 |") == 2 and report.count("| 0 | 2 |") == 2  # both tables
    for name in ("speedup_vs_k.png", "measured_vs_predicted.png", "accepted_histogram.png"):
        assert (tmp_path / name).stat().st_size > 1000, name
    assert "written:" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [("1-4", int, [1, 2, 3, 4]), ("1,2,8", int, [1, 2, 8]), ("0,0.8", float, [0.0, 0.8])],
)
def test_parse_list(text, kind, expected):
    assert parse_list(text, kind) == expected


def test_demo_on_the_gpu_twin_says_where_it_ran_and_stays_exact(capsys):
    """--backend gpu runs the twin (NumPy mode without a device) and names the backend."""
    assert main(["demo", "--backend", "gpu", "--max-new-tokens", "16", "--no-colour"]) == 0
    out = capsys.readouterr().out
    assert "backend: gpu twin:" in out
    assert "identical to autoregressive output: yes" in out


# every drafter but the draft model (the test above): the self-drafting ones and the trees
# use the bundled pair's trained parts
GPU_DRAFTERS = ["lookup", "hybrid", "early-exit", "heads", "lookup+heads", "tree", "tree-heads"]
GPU_DRAFTERS += ["eagle", "eagle-tree"]  # models/eagle: the EAGLE weights trained on the target


@pytest.mark.parametrize("drafter", GPU_DRAFTERS)
def test_demo_on_the_gpu_twin_runs_every_drafter_and_stays_exact(drafter, capsys):
    argv = ["demo", "--backend", "gpu", "--drafter", drafter, "--max-new-tokens", "16"]
    assert main(argv + ["--no-colour", "--show-rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "backend: gpu twin: numpy" in out or "backend: gpu twin: cupy" in out
    assert f"drafter: {drafter}" in out and "round   1  context=" in out
    assert "identical to autoregressive output: yes" in out


def test_bench_on_the_gpu_twin_prints_its_tables(tmp_path, capsys):
    args = "bench --backend gpu --ks 2 --repeats 1 --n-prompts 1 --max-new-tokens 8 --batches 1,2"
    assert main(args.split() + ["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "backend: numpy" in out or "backend: cupy" in out
    assert "| batch | AR tok/s | spec tok/s |" in out
    assert (tmp_path / "gpu_bench.json").is_file()


def test_bench_on_the_gpu_twin_runs_a_tree_drafter(tmp_path, capsys):
    args = "bench --backend gpu --drafter tree --tree 2,1 --ks 2 --repeats 1 --n-prompts 1"
    args += " --max-new-tokens 8 --batches 1"
    assert main(args.split() + ["--out", str(tmp_path)]) == 0
    assert "drafter: tree;" in capsys.readouterr().out
    settings = json.loads((tmp_path / "gpu_bench.json").read_text())["settings"]
    assert (settings["drafter"], settings["tree"]) == ("tree", "2,1")


@pytest.mark.parametrize("drafter", ["lookup", "hybrid", "eagle", "eagle-tree"])
def test_demo_with_a_drafter_without_a_second_model_stays_exact(drafter, capsys):
    args = ["demo", "--drafter", drafter, "--max-new-tokens", "24", "--no-colour"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"drafter: {drafter}" in out
    assert "identical to autoregressive output: yes" in out


@pytest.mark.parametrize("drafter", ["eagle", "eagle-tree"])
def test_demo_runs_eagle_on_the_gpu_twin_and_stays_exact(drafter, capsys):
    """--random: untrained EAGLE weights; the twin (gpu/eagle.py, gpu.tree's EagleTreeDrafter)
    emits the reference's tokens at greedy."""
    argv = ["demo", "--random", "--backend", "gpu", "--drafter", drafter, "-k", "3"]
    assert main(argv + ["--max-new-tokens", "12", "--no-colour", "--show-rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert f"drafter: {drafter}" in out and "backend: gpu twin:" in out
    assert "identical to autoregressive output: yes" in out
