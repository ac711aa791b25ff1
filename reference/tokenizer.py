"""Byte-level tokenizer of the bundled pair: ids 0..255 are bytes, id 256 ends a sequence.

Bytes need no vocabulary file, every string round-trips exactly, and tokens per second is
bytes per second: a speed figure cannot be inflated by a generous tokenizer.
"""

from __future__ import annotations

import numpy as np

EOS = 256  # end of sequence; also separates documents in the training stream
VOCAB_SIZE = 257  # V: 256 byte values + EOS


def encode(text: str | bytes) -> np.ndarray:  # -> [T] int64 ids, no EOS appended
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)


def decode(ids) -> str:  # [T] ids -> text, cut at the first EOS
    out = bytearray()
    for i in ids:
        if int(i) == EOS:
            break
        out.append(int(i))
    return out.decode("utf-8", errors="replace")


def token_text(i: int) -> str:
    """One token, readable: printable bytes as themselves, the rest escaped."""
    if i == EOS:
        return "<eos>"
    ch = chr(i)
    if ch in "\n\t":
        return {"\n": "\\n", "\t": "\\t"}[ch]
    return ch if 32 <= i < 127 else f"\\x{i:02x}"
