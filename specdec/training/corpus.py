"""Offline training corpus: the Python standard library's own source files, as bytes.

Why this corpus: it is on every machine that runs Python (no download, no licence question,
nothing to commit), it is ~11 MB of real, varied code, and code is predictable enough that a
small model learns it well — which is what makes speculative decoding's acceptance rate high.

The held-out split is decided by a hash of each file's relative path, so it is the same on
every machine and does not depend on the order in which the file system lists directories.
"""

from __future__ import annotations

import hashlib
import platform
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reference.tokenizer import EOS

MAX_FILE_BYTES = 200_000  # a few huge generated tables (e.g. unicode data) would dominate
HELD_OUT_PERCENT = 2  # ~2% of files, chosen by path hash
SKIPPED_DIRS = {"site-packages", "test", "tests", "idle_test"}  # third-party code and test suites


@dataclass
class Corpus:
    train: np.ndarray  # [N_train] uint16 token ids, documents joined by EOS
    held_out: np.ndarray  # [N_held] uint16 token ids, documents joined by EOS
    train_files: list[str] = field(default_factory=list)  # relative paths, sorted
    held_out_files: list[str] = field(default_factory=list)
    root: str = ""  # the stdlib directory the files were read from

    def describe(self) -> dict:
        """The facts about the corpus that go into each model's metadata.json."""
        return {
            "name": "CPython standard library sources (*.py)",
            "python_version": platform.python_version(),
            # the folder itself differs per machine: name it, do not print a local path
            "stdlib_dir": 'sysconfig.get_paths()["stdlib"]',
            "excluded": sorted(SKIPPED_DIRS) + [f"files > {MAX_FILE_BYTES} bytes"],
            "held_out_rule": f"sha256(relative path) % 100 < {HELD_OUT_PERCENT}",
            "train_files": len(self.train_files),
            "held_out_files": len(self.held_out_files),
            "train_tokens": int(self.train.size),
            "held_out_tokens": int(self.held_out.size),
            "tokenizer": "bytes 0..255, EOS = 256, vocab_size = 257",
        }


def stdlib_dir() -> Path:
    """The directory of the running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def list_sources(root: Path) -> list[Path]:
    """All *.py files under root that belong in the corpus, in a fixed (sorted) order."""
    files = []
    for path in sorted(root.rglob("*.py")):
        rel_parts = path.relative_to(root).parts
        if any(part in SKIPPED_DIRS for part in rel_parts[:-1]):
            continue
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            continue
        files.append(path)
    return files


def is_held_out(relative_path: str) -> bool:
    """Deterministic split: the same file lands on the same side on every machine."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % 100 < HELD_OUT_PERCENT


def join_documents(documents: list[bytes]) -> np.ndarray:
    """[doc bytes, ...] -> [N] uint16 stream: doc0 EOS doc1 EOS ... (EOS after each document)."""
    pieces = []
    eos = np.array([EOS], dtype=np.uint16)
    for doc in documents:
        pieces.append(np.frombuffer(doc, dtype=np.uint8).astype(np.uint16))
        pieces.append(eos)
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint16)


def load_corpus(root: Path | None = None) -> Corpus:
    """Read the stdlib sources and split them into a train and a held-out stream."""
    root = stdlib_dir() if root is None else root
    train_docs, held_docs, train_names, held_names = [], [], [], []
    for path in list_sources(root):
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        if is_held_out(rel):
            held_docs.append(data)
            held_names.append(rel)
        else:
            train_docs.append(data)
            train_names.append(rel)
    return Corpus(
        train=join_documents(train_docs),
        held_out=join_documents(held_docs),
        train_files=train_names,
        held_out_files=held_names,
        root=str(root),
    )


def sample_windows(
    stream: np.ndarray, batch: int, length: int, rng: np.random.Generator
) -> np.ndarray:
    """[N] stream -> [B, T+1] random windows; inputs are [:, :-1], next-token targets [:, 1:]."""
    starts = rng.integers(0, stream.size - length - 1, size=batch)
    offsets = np.arange(length + 1)
    return stream[starts[:, None] + offsets[None, :]]  # [B, T+1]


def tile_windows(stream: np.ndarray, length: int, max_windows: int | None = None) -> np.ndarray:
    """[N] stream -> [W, T+1] consecutive windows that share one boundary token (for evaluation).

    Every token of the stream (but the first) is predicted exactly once, each with the context
    available inside its window.
    """
    n_windows = (stream.size - 1) // length
    if max_windows is not None:
        n_windows = min(n_windows, max_windows)
    idx = np.arange(n_windows)[:, None] * length + np.arange(length + 1)[None, :]
    return stream[idx]  # [W, T+1]


if __name__ == "__main__":
    corpus = load_corpus()
    for key, value in corpus.describe().items():
        print(f"{key:>16}: {value}")
