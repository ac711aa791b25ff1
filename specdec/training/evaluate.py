"""Re-measure an exported pair: held-out bits per byte and teacher-forced agreement of p and q.

    python -m specdec.training.evaluate --models models [--snippets 20] [--bpb]

Works on the float16 files in models/ (reloaded as float32), so it checks what ships.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specdec.training.corpus import load_corpus
from specdec.training.train_pair import held_out_bits_per_byte, load_exported, pair_agreement


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="models")
    ap.add_argument("--snippets", type=int, default=20, help="held-out snippets for agreement")
    ap.add_argument("--length", type=int, default=256, help="tokens per snippet")
    ap.add_argument("--bpb", action="store_true", help="also recompute held-out bits per byte")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    corpus = load_corpus()
    target = load_exported(Path(args.models) / "target")
    draft = load_exported(Path(args.models) / "draft")
    report = pair_agreement(target, draft, corpus.held_out, args.snippets, args.length, args.seed)
    if args.bpb:
        n_pos = target.config.n_positions
        report["bits_per_byte"] = {
            "target": round(held_out_bits_per_byte(target, corpus.held_out, n_pos, None), 4),
            "draft": round(held_out_bits_per_byte(draft, corpus.held_out, n_pos, None), 4),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
