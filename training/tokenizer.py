"""Byte-level tokenizer: ids 0..255 are the bytes themselves, id 256 is end-of-sequence.

Why bytes: no vocabulary file to ship, every string round-trips exactly, and "tokens per
second" equals "bytes per second", so speed figures cannot be inflated by the tokenizer.
"""

from __future__ import annotations

import numpy as np

EOS: int = 256  # separates documents in the training stream; ends a generation
VOCAB_SIZE: int = 257  # V: 256 byte values + EOS


def encode(text: str | bytes) -> np.ndarray:
    """str|bytes -> [T] uint16 ids (UTF-8 bytes; no EOS added)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return np.frombuffer(data, dtype=np.uint8).astype(np.uint16)


def decode(ids) -> str:
    """[T] ids -> str; stops at the first EOS, undecodable byte runs become U+FFFD."""
    out = bytearray()
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        out.append(i)
    return out.decode("utf-8", errors="replace")
