"""The format a worker and the grading process speak (worker.py, beside it; engine/sandbox.py).

A message is a 4-byte length and one value; a value is a tag and its body: None, bools,
ints (128-bit ones included: a generator's state), floats, strings, lists, tuples, dicts with
string keys, NumPy arrays of numbers, generators' states, and 'x' records that each side
rebuilds its own way (a handle to an object the worker keeps, a model to build, an object
described by its repr). Nothing is pickled: the grading process builds from these bytes only
plain values it then checks itself, and refuses bytes that are not one whole value
(WireError) however the other side wrote them.

Standard library and NumPy only: the worker imports a copy of this file, without the project.
"""

from __future__ import annotations

import os
import select
import struct
import time

import numpy as np

# --------------------------------------------------------------------------------------------
# The wire format: a message is a 4-byte length and one value, each value a tag and its body
# --------------------------------------------------------------------------------------------

MAX_MESSAGE = 256 << 20  # bytes: a bigger message is refused (a submission flooding the pipe)
MAX_DEPTH = 32  # nesting of lists, tuples and dicts
DTYPES = ("|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8")
LENGTH = struct.Struct("<I")
INT64 = struct.Struct("<q")
FLOAT = struct.Struct("<d")


class WireError(ValueError):
    """Bytes that are not a value of this format (or one beyond its limits)."""


def encode(value, other) -> bytes:
    """value -> bytes; `other(value) -> (kind, payload)` encodes what is not plain data."""
    out: list[bytes] = []
    put(out, value, other, 0)
    return b"".join(out)


def put(out: list, value, other, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} levels deep")
    kind = type(value)
    writer = WRITERS.get(kind)
    if writer is not None:
        writer(out, value, other, depth)
    elif value is None:
        out.append(b"N")
    elif kind is np.ndarray and value.dtype.str in DTYPES:
        put_array(out, value)
    elif kind is np.random.Generator:  # its state, for the other side's twin of it
        put_generator(out, value, other, depth)
    else:
        name, payload = other(value)
        out.append(b"x")
        put(out, name, other, depth + 1)
        put(out, payload, other, depth + 1)


def put_int(out: list, value: int, other, depth: int) -> None:
    if -(1 << 63) <= value < (1 << 63):
        out.append(b"i" + INT64.pack(value))
    else:  # a generator's 128-bit state
        size = (value.bit_length() + 8) // 8
        out.append(b"I" + LENGTH.pack(size) + value.to_bytes(size, "little", signed=True))


def put_str(out: list, value: str, other, depth: int) -> None:
    data = value.encode("utf-8", "replace")
    out.append(b"s" + LENGTH.pack(len(data)) + data)


def put_sequence(out: list, value, other, depth: int) -> None:
    out.append((b"l" if type(value) is list else b"t") + LENGTH.pack(len(value)))
    for item in value:
        put(out, item, other, depth + 1)


def put_dict(out: list, value: dict, other, depth: int) -> None:
    out.append(b"d" + LENGTH.pack(len(value)))
    for key, item in value.items():
        put_str(out, str(key), other, depth)
        put(out, item, other, depth + 1)


def put_array(out: list, array: np.ndarray) -> None:
    if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
        array = array.copy(order="C")
    shape = struct.pack(f"<{array.ndim}q", *array.shape)
    out.append(b"a" + array.dtype.str.encode() + bytes([array.ndim]) + shape + array.tobytes())


PCG64_STATE = struct.Struct("<qQQQQBI")  # key, state (hi, lo), inc (hi, lo), has_uint32, uinteger


def put_generator(out: list, generator, other, depth: int) -> None:
    # other(generator) -> ("rng", key): the number both sides know it by
    _, key = other(generator)
    state = generator.bit_generator.state
    if state["bit_generator"] == "PCG64":
        inner, low = state["state"], (1 << 64) - 1
        out.append(
            b"g"
            + PCG64_STATE.pack(
                key,
                inner["state"] >> 64,
                inner["state"] & low,
                inner["inc"] >> 64,
                inner["inc"] & low,
                state["has_uint32"],
                state["uinteger"],
            )
        )
    else:
        out.append(b"G" + INT64.pack(key))
        put(out, state, other, depth + 1)


WRITERS = {
    bool: lambda out, value, other, depth: out.append(b"T" if value else b"F"),
    int: put_int,
    float: lambda out, value, other, depth: out.append(b"f" + FLOAT.pack(value)),
    str: put_str,
    list: put_sequence,
    tuple: put_sequence,
    dict: put_dict,
}


def decode(data: bytes, extension):
    """bytes -> value; `extension(kind, payload)` rebuilds an 'x' record. WireError on bytes
    that are not one whole value."""
    try:
        value, at = read(bytes(data), 0, extension, 0)
    except (struct.error, IndexError, UnicodeDecodeError, OverflowError, ValueError) as error:
        if isinstance(error, WireError):
            raise
        raise WireError(f"malformed message ({type(error).__name__}: {error})") from None
    if at != len(data):
        raise WireError(f"{len(data) - at} bytes after the value")
    return value


def read(data: bytes, at: int, extension, depth: int):
    """The value that starts at data[at] -> (value, where the next one starts)."""
    if depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} levels deep")
    tag = data[at]
    at += 1
    if tag == 105:  # i
        return INT64.unpack_from(data, at)[0], at + 8
    if tag == 108 or tag == 116:  # l, t
        (n,) = LENGTH.unpack_from(data, at)
        at += 4
        items = []
        for _ in range(n):
            item, at = read(data, at, extension, depth + 1)
            items.append(item)
        return (items if tag == 108 else tuple(items)), at
    if tag == 97:  # a
        return read_array(data, at)
    if tag == 102:  # f
        return FLOAT.unpack_from(data, at)[0], at + 8
    if tag == 115:  # s
        (n,) = LENGTH.unpack_from(data, at)
        return str(data[at + 4 : at + 4 + n], "utf-8"), at + 4 + inside(data, at + 4, n)
    if tag == 78:  # N
        return None, at
    if tag == 84 or tag == 70:  # T, F
        return tag == 84, at
    if tag == 73:  # I
        (n,) = LENGTH.unpack_from(data, at)
        at += 4
        return int.from_bytes(data[at : at + inside(data, at, n)], "little", signed=True), at + n
    if tag == 100:  # d
        (n,) = LENGTH.unpack_from(data, at)
        at += 4
        made = {}
        for _ in range(n):
            key, at = read(data, at, extension, depth + 1)
            if type(key) is not str:
                raise WireError("a dict key that is not a string")
            made[key], at = read(data, at, extension, depth + 1)
        return made, at
    if tag == 103:  # g: a PCG64 generator's state
        key, s_hi, s_lo, i_hi, i_lo, has, extra = PCG64_STATE.unpack_from(data, at)
        state = {
            "bit_generator": "PCG64",
            "state": {"state": (s_hi << 64) | s_lo, "inc": (i_hi << 64) | i_lo},
            "has_uint32": has,
            "uinteger": extra,
        }
        return extension("rng", (key, state)), at + PCG64_STATE.size
    if tag == 71:  # G: another generator's state
        (key,) = INT64.unpack_from(data, at)
        state, at = read(data, at + 8, extension, depth + 1)
        if type(state) is not dict:
            raise WireError("a generator's state that is not a dict")
        return extension("rng", (key, state)), at
    if tag == 120:  # x
        kind, at = read(data, at, extension, depth + 1)
        payload, at = read(data, at, extension, depth + 1)
        if type(kind) is not str:
            raise WireError("a record without a name")
        return extension(kind, payload), at
    raise WireError(f"unknown tag {tag!r}")


def inside(data: bytes, at: int, n: int) -> int:
    # n, once it is known that n bytes follow `at`
    if at + n > len(data):
        raise WireError("the message ends in the middle of a value")
    return n


def read_array(data: bytes, at: int) -> tuple[np.ndarray, int]:
    dtype = str(data[at : at + 3], "ascii")
    if dtype not in DTYPES:
        raise WireError(f"an array of dtype {dtype!r}")
    ndim = data[at + 3]
    shape = struct.unpack_from(f"<{ndim}q", data, at + 4)
    at += 4 + 8 * ndim
    count = 1
    for n in shape:
        if n < 0:
            raise WireError(f"an array of shape {shape}")
        count *= n
    size = inside(data, at, count * np.dtype(dtype).itemsize)
    array = np.frombuffer(data, dtype=dtype, count=count, offset=at).reshape(shape).copy()
    return array, at + size


def send(fd: int, value, other) -> None:
    data = encode(value, other)
    if len(data) > MAX_MESSAGE:
        raise WireError(f"a message of {len(data)} bytes (the limit is {MAX_MESSAGE})")
    write_all(fd, LENGTH.pack(len(data)) + data)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


SPIN_S = 0.0005  # how long a side polls for the other's answer before it sleeps on the pipe


def read_exactly(fd: int, n: int) -> bytes:
    """n bytes from fd; EOFError when the other side closed it first.

    The two sides take turns, so the answer usually comes within microseconds: polling for it
    a little while costs less than sleeping and being woken (48 us per exchange on a 2-core
    virtual machine against 6 us). After SPIN_S it sleeps until the answer comes."""
    chunks, left = [], n
    while left:
        chunk = poll(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def poll(fd: int, n: int) -> bytes:
    """os.read(fd, n), polling the non-blocking fd for SPIN_S before it blocks."""
    try:
        return os.read(fd, n)
    except BlockingIOError:
        pass
    end = time.perf_counter() + SPIN_S
    while time.perf_counter() < end:
        try:
            return os.read(fd, n)
        except BlockingIOError:
            os.sched_yield() if hasattr(os, "sched_yield") else None
    select.select([fd], [], [])
    return os.read(fd, n)


def receive_bytes(fd: int) -> bytes:
    (size,) = LENGTH.unpack(read_exactly(fd, 4))
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes announced (the limit is {MAX_MESSAGE})")
    return read_exactly(fd, size)


def builtin_error(name: str) -> type:
    """The built-in exception class of that name (RuntimeError when there is none)."""
    import builtins

    error = getattr(builtins, name, None)
    return error if isinstance(error, type) and issubclass(error, Exception) else RuntimeError
