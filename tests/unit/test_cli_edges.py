"""The `specdec` command never guesses: a missing checkpoint folder, a vocabulary that does
not fit the tokenizer, a bad bench option or a report from an earlier run are refused up
front (exit 2, one line); Ctrl-C is one line and exit 130; bench results are written as they
are measured; the demo's statistics say what they count."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from reference import GPT, GPTConfig, init_params
from reference.speculative import SpeculativeStats
from reference.weights import save_gpt2
from specdec.cli import bench, build_parser, demo, main, methods, options
from specdec.cli.demo import unescape
from specdec.report import MARKS, render_marked, stats_table


def refused(capsys, argv, *words, code=2) -> str:
    """main(argv) exits with `code` and one stderr line holding every word; stdout empty."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == code
    captured = capsys.readouterr()
    assert captured.out == "", "work started before the refusal"
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


@pytest.fixture
def no_work(monkeypatch):
    """Any model loading fails the test: a refusal must come before it."""

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded before the options were checked")

    for command in (demo, bench, methods):  # each command module's own name for a loader
        for name in ("load_pair", "load_plain_pair"):
            if hasattr(command, name):
                monkeypatch.setattr(command, name, load)


# ---------------------------------------------------------------- checkpoint folders


def test_a_missing_target_folder_is_an_error_not_random_weights(capsys, tmp_path):
    argv = ["demo", "--target", str(tmp_path / "nope"), "--draft", str(tmp_path)]
    refused(capsys, argv, "--target", "no such folder", "--random")


def test_a_file_given_as_a_folder(capsys, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    argv = ["demo", "--target", str(tmp_path / "model.safetensors"), "--draft", str(tmp_path)]
    refused(capsys, argv, "is a file")


def test_target_without_draft(capsys, tmp_path):
    refused(capsys, ["demo", "--target", str(tmp_path)], "--target and --draft together")


def test_random_and_a_folder_exclude_each_other(capsys, tmp_path):
    argv = ["demo", "--random", "--target", str(tmp_path), "--draft", str(tmp_path)]
    refused(capsys, argv, "--random")


def test_a_folder_that_is_not_a_checkpoint(capsys, tmp_path):
    refused(capsys, ["demo", "--target", str(tmp_path), "--draft", str(tmp_path)], "config.json")


def test_a_vocabulary_that_does_not_fit_the_byte_tokenizer_is_refused_up_front(capsys, tmp_path):
    """300 ids through the byte tokenizer: refused before a word of output."""
    cfg = GPTConfig(n_vocab=300, n_ctx=32, n_embd=8, n_head=2, n_layer=1)
    model = GPT(cfg, init_params(cfg, np.random.default_rng(0)))
    for name in ("t", "d"):
        save_gpt2(model, tmp_path / name)
    argv = ["demo", "--target", str(tmp_path / "t"), "--draft", str(tmp_path / "d")]
    refused(capsys, argv, "scores 300 token ids", "byte-level", "has 257")


# ---------------------------------------------------------------- the prompt


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        (r"a\nb", "a\nb"),
        (r"x\ty", "x\ty"),
        (r"C:\\new", "C:\\new"),
        (r"keep \d as typed", r"keep \d as typed"),
        ("trailing \\", "trailing \\"),
    ],
)
def test_prompt_escapes(typed, meant):
    assert unescape(typed) == meant


def test_the_demo_reads_escapes_in_the_prompt(capsys):
    argv = ["demo", "--random", "--prompt", r"def f():\n    ", "--max-new-tokens", "4"]
    assert main(argv + ["--no-colour"]) == 0
    out = capsys.readouterr().out
    assert "prompt (13 tokens): 'def f():\\n    '" in out


def test_the_demo_reads_a_prompt_file(capsys, tmp_path):
    (tmp_path / "p.txt").write_text("line one\nline two ", encoding="utf-8")
    argv = ["demo", "--random", "--prompt-file", str(tmp_path / "p.txt")]
    assert main(argv + ["--max-new-tokens", "4", "--no-colour"]) == 0
    assert "'line one\\nline two '" in capsys.readouterr().out


def test_a_prompt_file_that_is_not_utf8_is_named(capsys, tmp_path):
    (tmp_path / "latin.txt").write_bytes("café".encode("latin-1"))
    argv = ["demo", "--random", "--prompt-file", str(tmp_path / "latin.txt")]
    refused(capsys, argv, "latin.txt", "is not UTF-8")


def test_a_prompt_that_is_not_utf8_is_named(capsys):
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")  # what argv holds for such bytes
    refused(capsys, ["demo", "--random", "--prompt", bad], "the prompt (--prompt)", "UTF-8")


def test_prompt_and_prompt_file_together(capsys, tmp_path):
    argv = ["demo", "--random", "--prompt", "a", "--prompt-file", str(tmp_path)]
    refused(capsys, argv, "not both")


# ---------------------------------------------------------------- help, Ctrl-C, huge k


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_every_option_has_help_with_its_default(command):
    sub = subparsers()[command]
    formatter = sub._get_formatter()
    for action in sub._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{command} {action.option_strings} has no help"
        text = formatter._get_help_string(action) % {"default": action.default}
        assert "default" in text, f"{command} {action.option_strings}: {text}"


def test_ctrl_c_is_one_line_and_exit_130(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "cmd_demo", interrupted)
    monkeypatch.setattr(bench, "cmd_bench", interrupted)
    refused(capsys, ["demo", "--random"], "specdec: interrupted", code=130)


@pytest.mark.parametrize(
    ("change", "words"),
    [(["--show-rounds", "-1"], "--show-rounds must be >= 0"), (["--threads", "0"], "--threads")],
)
def test_demo_counts_are_checked(capsys, no_work, change, words):
    refused(capsys, ["demo", "--random"] + change, words)


def test_a_huge_k_is_refused_before_anything_is_built(capsys, no_work):
    err = refused(capsys, ["demo", "--random", "-k", str(10**12)], "k must be in 1..120")
    assert len(err) < 200


# ---------------------------------------------------------------- bench options

BENCH = ["bench", "--random", "--ks", "1", "--temperatures", "0", "--repeats", "1"]
BENCH += ["--prompts", "code", "--max-new-tokens", "4", "--no-transformers"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--n-prompts", "0"], "--n-prompts must be >= 1"),
        (["--ks", "1-x"], "--ks '1-x': expected a list like 1-8 or 1,2,4"),
        (["--ks", "2,,4"], "--ks '2,,4'"),
        (["--ks", "0,1"], "k must be in 1..4"),
        (["--ks", "3-1"], "empty range"),
        (["--ks", "1,1000"], "k must be in 1..4"),
        (["--temperatures", "0,hot"], "--temperatures '0,hot'"),
        (["--temperatures", "-1"], "temperature"),
    ],
)
def test_bench_checks_every_option_before_any_work(capsys, tmp_path, no_work, change, words):
    refused(capsys, BENCH + ["--out", str(tmp_path / "o")] + change, words)


def test_bench_out_must_not_be_a_file(capsys, tmp_path, no_work):
    (tmp_path / "f").write_text("")
    refused(capsys, BENCH + ["--out", str(tmp_path / "f")], "is a file")


def test_bench_never_overwrites_an_earlier_run_silently(capsys, tmp_path, no_work):
    (tmp_path / "bench.md").write_text("an earlier run")
    refused(capsys, BENCH + ["--out", str(tmp_path)], "earlier run", "--overwrite")
    assert (tmp_path / "bench.md").read_text() == "an earlier run"


def test_bench_overwrite_replaces_the_report(capsys, tmp_path):
    (tmp_path / "bench.md").write_text("an earlier run")
    assert main(BENCH + ["--out", str(tmp_path), "--overwrite"]) == 0
    assert (tmp_path / "bench.md").read_text().startswith("Status: complete")


def test_bench_asks_for_torch_before_any_work_when_the_transformers_row_is_wanted(
    capsys, tmp_path, monkeypatch, no_work
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    argv = [a for a in BENCH if a != "--no-transformers"] + ["--out", str(tmp_path / "o")]
    refused(capsys, argv, "needs torch", "--no-transformers")


def test_bench_keeps_what_was_measured_when_interrupted(tmp_path):
    """A real run, interrupted with SIGINT once its first (T, k) cells are written: it exits
    130, and bench.md and bench.json hold exactly the cells finished, and say how many."""
    import json
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "o"
    # Ctrl-C as a terminal delivers it: a shell without job control (a CI script run in the
    # background, say) starts its children with SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler; so the child restores the handler before running the CLI
    start = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from specdec.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = [sys.executable, "-c", start, "bench", "--random", "--ks", "1-8"]
    argv += ["--temperatures", "0,0.8", "--repeats", "2", "--prompts", "code"]
    argv += ["--max-new-tokens", "48", "--no-transformers", "--out", str(out)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    report = out / "bench.md"
    deadline = time.monotonic() + 120
    # interrupt as soon as the first cell is written: fifteen more cells leave the signal
    # seconds of margin on any machine, however loaded
    while time.monotonic() < deadline and run.poll() is None:
        first = report.read_text().split("\n", 1)[0] if report.is_file() else ""
        if re.fullmatch(r"Status: partial: \d+ of 16 \(T, k\) cells measured", first):
            break
        time.sleep(0.02)
    assert run.poll() is None, f"the run ended before it was interrupted: {run.communicate()}"
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130, err.decode()
    text = report.read_text()
    first = text.splitlines()[0]
    assert first.startswith("Status: partial (interrupted)"), first
    done = int(first.split("; ")[1].split(" of ")[0])
    assert 1 <= done < 16, first
    rows = [line for line in text.splitlines() if line.startswith(("| 0 | ", "| 0.8 | "))]
    assert len(rows) == 2 * done, f"{done} cells said, {len(rows)} rows in the two tables"
    data = json.loads((out / "bench.json").read_text())
    assert data["status"] == first.removeprefix("Status: ")
    assert len(data["points"]) == done
    assert f"{done} of 16" in err.decode()
    assert not list(out.glob("*.tmp")), "a temporary file was left behind"


def test_bench_names_the_machine_in_its_report_and_json(tmp_path, capsys):
    """bench.md's header and bench.json name the CPU, the BLAS, its kernel and the threads;
    the fast path's choices and the plain model's costs are reported beside it."""
    import json

    from specdec.machine import describe_machine

    argv = ["bench", "--random", "--ks", "1,2", "--temperatures", "0", "--repeats", "1"]
    argv += ["--prompts", "code", "--max-new-tokens", "6", "--no-transformers"]
    assert main(argv + ["--out", str(tmp_path), "--threads", "1"]) == 0
    machine = describe_machine()
    text = (tmp_path / "bench.md").read_text()
    header = text.splitlines()[2]
    for words in (machine.cpu, machine.blas, f"{machine.kernel} kernels", "1 BLAS thread"):
        assert words in header, (words, header)
    assert "the same profile of the plain model" in text
    assert "Fast path, target model:" in text and "| configuration | tricks |" in text
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["status"] == "complete" and len(data["points"]) == 2
    assert data["machine"]["kernel"] == machine.kernel and data["machine"]["threads"] == 1
    assert set(data["fast_path_kept_rows"]) == {"target", "draft"}
    assert data["plain_costs"]["v"]["3"] > 0
    # each pass beside its floor (issue 33): the floors are measured, and no pass beats them
    assert "the floor of a pass" in text and "measured / floor: T=1 " in text
    floors = {int(T): f for T, f in data["floors_s"].items()}
    assert set(floors) == {1, 2, 3} and all(f > 0 for f in floors.values())
    assert floors[1] <= floors[2] <= floors[3]
    # specdec.measure.summary reads the same file into one row per run (README's machine table)
    from specdec.measure.summary import main as summary_main

    capsys.readouterr()
    assert summary_main([str(tmp_path)]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    best = max(data["points"], key=lambda p: p["speedup"])
    for words in (machine.cpu, machine.kernel, f"k = {best['k']}: **{best['speedup']:.2f}x**"):
        assert words in row, (words, row)
    assert summary_main([str(tmp_path / "nothing")]) == 2
    assert "no bench.json" in capsys.readouterr().err


def test_bench_random_transformers_row_uses_the_same_random_weights(capsys, tmp_path, monkeypatch):
    """With --random, transformers gets the random pair itself (saved for the run), never
    the bundled pair or another model."""
    from reference.weights import load_gpt2

    seen = {}

    def fake_row(target_dir, draft_dir, target, draft, *args):
        for name, directory, model in (("t", target_dir, target), ("d", draft_dir, draft)):
            saved = load_gpt2(directory)
            for key, w in model.params.items():
                np.testing.assert_array_equal(saved.params[key], w)
            seen[name] = directory
        return {
            "k": args[1],
            "temperature": args[2],
            "transformers_tps": 1.0,
            "ours_tps": 1.0,
            "ratio": 1.0,
            "ratio_min": 1.0,
            "ratio_max": 1.0,
        }

    monkeypatch.setattr(bench, "run_transformers_rows", fake_row)
    argv = [a for a in BENCH if a != "--no-transformers"] + ["--out", str(tmp_path)]
    assert main(argv) == 0
    assert "specdec-random-" in str(seen["t"]) and not seen["t"].exists()  # cleaned up
    assert "Against transformers' assisted generation" in (tmp_path / "bench.md").read_text()


# ---------------------------------------------------------------- what the demo shows


def test_statistics_say_what_they_count():
    """The histogram counts full rounds only and says how many it leaves out; a position
    never examined shows n/a with the reason, not a bare nan."""
    stats = SpeculativeStats(k=3)
    stats.record(3, 0)  # rejected at once: positions 2 and 3 never examined
    stats.record(3, 0)
    stats.record(1, 1)  # a short round near the end
    text = stats_table(stats)
    assert "full rounds (all 3 drafted) by drafts accepted 0..k  2 0 0 0" in text
    assert "not counted: 1 shorter rounds" in text
    assert "0.33 n/a n/a  (n/a: never examined" in text
    assert "nan" not in text


def test_fates_are_marked_under_the_text_without_brackets():
    from types import SimpleNamespace as Round  # the three fields a trace's fates read

    trace = [
        Round(emitted=[ord("["), ord("1")], accepted=1, token_kind="correction"),
        Round(emitted=[10, ord("]")], accepted=2, token_kind="bonus"),
    ]
    text = render_marked("x = ", trace)
    lines = text.split("\n")
    assert lines[0] == "x = [1"  # the code's own bracket, untouched, no marker inside
    assert lines[1] == "    " + MARKS["accepted"] + MARKS["correction"] + MARKS["accepted"]
    assert lines[2] == "]" and lines[3] == MARKS["accepted"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (["--drafter", "model,medusa"], "comma list"),
        (["--drafter", "all", "--prompts", "heldout,poems"], "each set must be one of"),
        (["--prompts", "code,copy"], "one set with one drafter"),
        (["--drafter", "all", "--backend", "gpu"], "cpu backend only"),
    ],
)
def test_the_method_table_options_are_checked_before_any_work(
    capsys, tmp_path, no_work, change, words
):
    refused(capsys, BENCH + ["--out", str(tmp_path / "o")] + change, words)


def test_the_demo_refuses_an_unknown_drafter_before_any_work(capsys, no_work):
    refused(capsys, ["demo", "--random", "--drafter", "medusa"], "--drafter 'medusa'")
    refused(capsys, ["demo", "--random", "--drafter", "medusa", "--backend", "gpu"], "'medusa'")


def test_heads_need_heads_trained_for_the_target(capsys):
    """--random has no trained heads: the heads drafter says how to make them."""
    refused(
        capsys, ["demo", "--random", "--drafter", "heads", "--max-new-tokens", "4"], "train_heads"
    )


def test_the_method_table_runs_every_drafter_against_one_baseline(capsys, tmp_path):
    out = tmp_path / "o"
    argv = BENCH[:]
    argv[argv.index("--prompts") + 1] = "code,copy"
    assert main(argv + ["--drafter", "model,lookup,early-exit", "--out", str(out)]) == 0
    text = (out / "methods.md").read_text()
    for words in ("**code**", "**copy**", "| model |", "| lookup |", "| early-exit |"):
        assert words in text, words


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["demo", "--random", "--drafter", "model", "--tree", "2,1"], "use it with --drafter tree"),
        (["demo", "--random", "--drafter", "tree", "--tree", "2,0"], "every width must be >= 1"),
        (["demo", "--random", "--drafter", "tree", "--tree", "2,x"], "--tree '2,x'"),
        (["demo", "--backend", "gpu", "--drafter", "tree", "--tree", "0"], "must be >= 1"),
    ],
)
def test_tree_options_are_checked_before_any_work(capsys, no_work, argv, words):
    refused(capsys, argv, words)


@pytest.mark.parametrize("drafter", ["tree", "tree-wide", "tree-heads"])
def test_k_with_a_tree_drafter_is_refused_before_any_work(capsys, no_work, drafter):
    """A tree's depth comes from its shape: an explicit -k is an error, not silently dropped."""
    refused(capsys, ["demo", "--random", "--drafter", drafter, "-k", "3"], "-k", "--tree")


@pytest.mark.parametrize(("tree", "ks", "deeper"), [(None, "3,5,7", "5,7"), ("2,1", "2,3", "3")])
def test_bench_refuses_a_k_deeper_than_the_tree(capsys, tmp_path, no_work, tree, ks, deeper):
    """A tree's k is the depth it is cut at: ks above the shape's depth (4 for `tree`, 2 for
    --tree 2,1) would measure the same tree again under another label."""
    argv = BENCH + ["--out", str(tmp_path / "o"), "--drafter", "tree", "--ks", ks]
    argv += ["--max-new-tokens", "16"]
    argv += [] if tree is None else ["--tree", tree]
    refused(capsys, argv, f"--ks {deeper}", "at most the shape's depth")


def test_the_method_table_refuses_one_tree_shape_for_all(capsys, tmp_path, no_work):
    argv = BENCH + ["--out", str(tmp_path / "o"), "--drafter", "all", "--tree", "2,1"]
    refused(capsys, argv, "--tree shapes one tree drafter")


def test_the_demo_runs_a_tree_of_the_shape_given(capsys):
    argv = ["demo", "--random", "--drafter", "tree", "--tree", "3,1", "--max-new-tokens", "8"]
    assert main(argv + ["--show-rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "drafter: tree" in out and "k=2: the tree's depth" in out


def test_the_demo_reports_a_tree_by_depth_and_nodes_not_as_a_chain(capsys):
    """--tree 2,2,1 has depth 3 and 2 + 4 + 4 = 10 candidates: the statistics give nodes per
    round and one acceptance rate per depth 1..3, never a row for a 4th position or a
    histogram of full rounds that no tree of this shape can fill."""
    argv = ["demo", "--random", "--drafter", "tree", "--tree", "2,2,1", "--max-new-tokens", "30"]
    assert main(argv + ["--no-colour"]) == 0
    out = capsys.readouterr().out
    table = out.split("\nstatistics (", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    rows = dict((part.strip() for part in line.strip().split("  ", 1)) for line in table)
    assert rows["tree shape"] == "2,2,1 (children per node at depths 1..3; 10 candidates)"
    assert rows["depth k"] == "3"
    nodes = float(rows["nodes verified per round"].split()[0])
    assert 0 < nodes <= 10, rows["nodes verified per round"]
    assert len(rows["per-depth acceptance 1..k"].split("  ")[0].split()) == 3
    histogram = rows["full-depth rounds (depth 3) by path length 0..k"].split("  ")[0].split()
    assert len(histogram) == 4 and sum(map(int, histogram)) > 0, histogram
    for chain_only in ("draft length k", "per-position acceptance", "full rounds (all"):
        assert chain_only not in out, chain_only
    assert "accepted path length per round" in rows and "alpha (accepted/examined depths)" in rows


# ---------------------------------------------------------------- EAGLE


def test_demo_runs_eagle_on_random_weights(capsys):
    """--random: untrained EAGLE weights for the random target; exact all the same."""
    argv = ["demo", "--random", "--drafter", "eagle", "-k", "3", "--max-new-tokens", "12"]
    assert main(argv + ["--no-colour", "--show-rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "drafter: eagle" in out and "sampling: greedy, k=3," in out
    assert "per-position acceptance 1..k" in out and "mean tokens per round" in out
    assert "identical to autoregressive output: yes" in out


@pytest.mark.parametrize(("k", "said"), [(["-k", "3"], "k=3"), ([], "k=4")])
def test_demo_runs_the_eagle_tree_with_k_as_its_node_budget(capsys, k, said):
    argv = ["demo", "--random", "--drafter", "eagle-tree", "--max-new-tokens", "16"] + k
    assert main(argv + ["--no-colour", "--show-rounds", "1", "--temperature", "0.8"]) == 0
    out = capsys.readouterr().out
    nodes = int(said.removeprefix("k="))
    assert f"sampling: T=0.8, {said}," in out
    if not k:  # the default, and where it came from
        assert f"{said}: the dynamic tree's node budget and depth limit" in out
    table = out.split("\nstatistics (", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    rows = dict((part.strip() for part in line.strip().split("  ", 1)) for line in table)
    assert rows["tree shape"].startswith(f"dynamic (EAGLE-2): the {nodes} likeliest candidates")
    assert 0 < float(rows["nodes verified per round"].split()[0]) <= nodes
    assert len(rows["per-depth acceptance 1..k"].split("  ")[0].split()) == nodes


def test_bench_reports_eagles_tokens_per_round_and_alpha_by_position(capsys, tmp_path):
    argv = BENCH + ["--out", str(tmp_path), "--drafter", "eagle", "--ks", "1,2"]
    assert main(argv) == 0
    report = (tmp_path / "bench.md").read_text()
    assert "Drafter: eagle" in report and "alpha by position 1..k" in report
    points = json.loads((tmp_path / "bench.json").read_text())["points"]
    assert [len(p["alpha_by_position"]) for p in points] == [1, 2]
    assert all(p["tokens_per_round"] >= 1 for p in points)


def test_the_method_table_sets_eagle_against_its_tree_at_equal_nodes(capsys, tmp_path):
    out = tmp_path / "o"
    assert main(BENCH + ["--drafter", "model,eagle,eagle-tree", "--out", str(out)]) == 0
    text = (out / "methods.md").read_text()
    for words in (
        "| model |",
        "| eagle |",
        "| eagle-tree |",
        "at equal nodes",
        "| eagle / eagle-tree |",
    ):
        assert words in text, words


@pytest.mark.parametrize("command", ["demo", "bench"])
@pytest.mark.parametrize("drafter", ["eagle", "eagle-tree"])
def test_eagle_without_trained_weights_says_how_to_train_them(
    capsys, tmp_path, no_work, command, drafter
):
    """A folder without the drafter's files: refused before any model is loaded, naming the
    training command; a folder that is not there, by name."""
    argv = ["demo", "--random"] if command == "demo" else BENCH + ["--out", str(tmp_path / "o")]
    argv += ["--drafter", drafter]
    refused(capsys, argv + ["--eagle", str(tmp_path)], "python -m specdec.training.train_eagle")
    refused(capsys, argv + ["--eagle", str(tmp_path / "nope")], "--eagle", "no such folder")


def test_the_eagle_tree_refuses_a_fixed_shape(capsys, no_work):
    argv = ["demo", "--random", "--drafter", "eagle-tree", "--tree", "2,1"]
    refused(capsys, argv, "--tree", "own confidence", "-k sets its node budget")


@pytest.mark.parametrize("drafter", ["eagle", "eagle-tree"])
def test_eagle_without_a_twin_is_refused_on_the_gpu_backend(
    capsys, tmp_path, no_work, monkeypatch, drafter
):
    monkeypatch.setattr(options, "twin_has", lambda module, name: False)
    refused(capsys, ["demo", "--random", "--backend", "gpu", "--drafter", drafter], "no GPU twin")
    argv = BENCH + ["--out", str(tmp_path / "o"), "--backend", "gpu", "--drafter", drafter]
    refused(capsys, argv, "no GPU twin", "--backend cpu")
