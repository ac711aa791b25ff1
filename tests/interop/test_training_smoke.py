"""The training script end to end on tiny models and a tiny budget: it trains both phases,
exports checkpoints that `reference` loads, and writes honest metadata."""

from __future__ import annotations

import json

import numpy as np

from reference import ModelDrafter, SamplingParams, speculative_generate
from reference.weights import load_gpt2
from specdec.training import train_pair

TINY = [
    "--minutes-target", "0.03", "--minutes-draft", "0.03",
    "--max-steps-target", "3", "--max-steps-draft", "3",
    "--target-layers", "1", "--target-embd", "32", "--target-heads", "2",
    "--draft-layers", "1", "--draft-embd", "16", "--draft-heads", "2",
    "--n-positions", "64", "--batch-target", "2", "--batch-draft", "2",
    "--eval-windows", "4", "--threads", "1", "--autocast", "fp32",
]  # fmt: skip


def test_the_script_trains_exports_and_describes_both_models(tmp_path):
    out, runs = tmp_path / "models", tmp_path / "runs"
    train_pair.main(["--out", str(out), "--runs", str(runs), *TINY])
    for role in ("target", "draft"):
        meta = json.loads((out / role / "metadata.json").read_text())
        assert meta["steps"] == 3
        assert meta["bits_per_byte_held_out"] > 0
        assert meta["command"].startswith("python -m specdec.training.train_pair --out")
        assert (runs / f"{role}.pt").is_file()  # the checkpoint a --resume would continue
    draft_meta = json.loads((out / "draft" / "metadata.json").read_text())
    assert draft_meta["hyperparameters"]["kl_weight"] == 0.0  # plain cross-entropy by default
    target, draft = load_gpt2(out / "target"), load_gpt2(out / "draft")
    assert (target.config.n_layer, draft.config.n_embd) == (1, 16)
    res = speculative_generate(
        target,
        ModelDrafter(draft),
        [10, 32, 100],
        k=3,
        max_new_tokens=8,
        rng=np.random.default_rng(0),
        sampling=SamplingParams(temperature=1.0),
    )
    assert len(res.tokens) == 8
