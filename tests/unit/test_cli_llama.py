"""`specdec demo` and `specdec bench` on a Llama-family pair of checkpoint folders: a tiny
random Llama target (GQA 2:1) and a one-block draft, each a config.json, a model.safetensors
and one word-level tokenizer.json, written here.

The CLI runs the pair on the CPU fast path (specdec/fast_cpu/llama.py) and says so on its
models line; the GPU twin runs it too (`--backend gpu`: gpu/llama.py). Without trained parts
for this target, the drafters that need them (extra heads, EAGLE) are refused in one line and
left out of the method table by name (tests/unit/test_llama_trained_drafters.py trains them)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reference.config import LlamaConfig
from reference.llama import init_llama_params
from reference.weights import write_safetensors
from specdec.cli import main

tokenizers = pytest.importorskip("tokenizers")  # the lab extra: a checkpoint's tokenizer.json

WORDS = "the a cat dog sat ran on in mat box and then it was red big".split()
V = 24  # the words, [UNK], and a few unused ids up to the models' vocabulary
PROMPT = "the cat sat on the mat and the dog sat on the box"


def word_tokenizer(path) -> None:
    # a word-level tokenizer of exactly V ids, split on whitespace
    vocab = {"[UNK]": 0} | {w: i + 1 for i, w in enumerate(WORDS)}
    vocab |= {f"[unused{i}]": i for i in range(len(vocab), V)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))


def llama_folder(directory, seed: int, n_embd: int, n_layer: int, n_head: int, n_kv_head: int):
    cfg = LlamaConfig(
        n_vocab=V, n_ctx=96, n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_kv_head=n_kv_head,
        n_inner=24, model_type="qwen2",
    )  # fmt: skip
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(cfg.to_hf_dict()))
    write_safetensors(
        directory / "model.safetensors",
        init_llama_params(cfg, np.random.default_rng(seed), std=0.5),
        metadata={"format": "pt"},
    )
    word_tokenizer(directory / "tokenizer.json")


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("llama-pair")
    llama_folder(root / "target", 0, n_embd=16, n_layer=3, n_head=4, n_kv_head=2)
    llama_folder(root / "draft", 1, n_embd=8, n_layer=1, n_head=2, n_kv_head=2)
    return ["--target", str(root / "target"), "--draft", str(root / "draft")]


@pytest.mark.parametrize("drafter", ["model", "lookup", "early-exit", "tree"])
def test_the_demo_runs_plain_on_a_llama_pair_and_stays_exact(pair, drafter, capsys):
    argv = ["demo", *pair, "--prompt", PROMPT, "--drafter", drafter, "--max-new-tokens", "10"]
    assert main(argv + ["--no-colour", "--show-rounds", "1"]) == 0
    out = capsys.readouterr().out
    models = next(line for line in out.splitlines() if line.startswith("models:"))
    assert models.endswith("CPU fast path (docs/fast-path.md)"), models
    assert "greedy: speculative output identical to autoregressive output: yes" in out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["demo", "--drafter", "heads"], "the heads drafter needs extra heads trained on this"),
        (["demo", "--drafter", "eagle"], "the eagle drafter needs EAGLE weights trained on this"),
        (["bench", "--backend", "gpu"], "benches the bundled GPT-2 pair only"),
    ],
)
def test_what_does_not_run_on_a_llama_pair_is_refused_in_one_line(
    pair, argv, named, tmp_path, capsys
):
    extra = ["--prompt", PROMPT] if argv[0] == "demo" else ["--out", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        main(argv + pair + extra + ["--max-new-tokens", "4"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and named in err, err
    assert err.count("\n") == 1


def test_the_bench_and_the_method_table_run_on_a_llama_pair(pair, tmp_path, capsys):
    common = [*pair, "--prompts", "text", "--max-new-tokens", "9", "--repeats", "1"]
    common += ["--temperatures", "0", "--no-transformers", "--n-prompts", "1"]
    assert main(["bench", *common, "--ks", "2", "--out", str(tmp_path / "one")]) == 0
    out = capsys.readouterr().out
    assert "CPU fast path" in out and "| 2 |" in out
    assert main(["bench", *common, "--drafter", "all", "--out", str(tmp_path / "all")]) == 0
    out = capsys.readouterr().out
    table = (tmp_path / "all" / "methods.md").read_text()
    for name in ("heads", "lookup+heads", "tree-heads", "eagle", "eagle-tree"):
        assert f"not run: {name}: " in out and f"- {name}: " in table, name
    for name in ("model", "lookup", "hybrid", "early-exit", "tree", "tree-wide"):
        assert f"| {name} | " in table, name


@pytest.mark.parametrize("drafter", ["model", "early-exit", "tree"])
def test_the_demo_runs_a_llama_pair_on_the_gpu_twin_and_stays_exact(pair, drafter, capsys):
    argv = ["demo", *pair, "--backend", "gpu", "--prompt", PROMPT, "--drafter", drafter]
    assert main(argv + ["--max-new-tokens", "10", "--no-colour"]) == 0
    out = capsys.readouterr().out
    assert "gpu twin" in out
    assert "greedy: speculative output identical to autoregressive output: yes" in out
