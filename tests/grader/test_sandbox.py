"""The worker a submitted file runs in (specdec/grading/engine/sandbox.py, worker/): its format,
what it lets through, what it refuses. The attacks themselves are tests/grader/test_hostile.py's."""

from __future__ import annotations

import contextlib
import os
import textwrap

import numpy as np
import pytest

from specdec.grading.engine.replies import RemoteError
from specdec.grading.engine.sandbox import Sandbox, WorkerEnded
from specdec.grading.engine.submission import load_submission
from specdec.grading.engine.worker import wire


@contextlib.contextmanager
def loaded(tmp_path, source: str):
    """A worker that has loaded `source`'s verify, closed afterwards."""
    file = tmp_path / "submitted.py"
    file.write_text(textwrap.dedent(source))
    sandbox = Sandbox(file)
    try:
        assert sandbox.load(["verify"])["found"]
        yield sandbox
    finally:
        sandbox.close()


def plain_record(value):
    raise TypeError(f"not plain: {value!r}")


# --------------------------------------------------------------------------------------------
# The format
# --------------------------------------------------------------------------------------------


def test_plain_values_and_arrays_cross_unchanged():
    value = (
        None,
        True,
        -(2**63),
        2**127 + 5,  # a generator's state is 128 bits
        -0.5,
        "p = target ∑",
        [1, [2.0, "x"]],
        {"a": (1, 2)},
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([], dtype=np.int64),
        np.array(True),
    )
    back = wire.decode(wire.encode(value, plain_record), lambda k, p: (k, p))
    for sent, got in zip(value, back, strict=True):
        if isinstance(sent, np.ndarray):
            assert got.dtype == sent.dtype and got.shape == sent.shape
            assert np.array_equal(got, sent)
        else:
            assert got == sent and type(got) is type(sent)


@pytest.mark.parametrize(
    "data",
    [
        b"",  # nothing
        b"i\x01\x02",  # an int cut short
        b"Z",  # no such tag
        b"l\xff\xff\xff\x7f",  # a list announcing more items than there are bytes
        b"a|O8\x01" + (1).to_bytes(8, "little") + b"\x00" * 8,  # an object array
        b"a<f8\x01" + (-1).to_bytes(8, "little", signed=True),  # a negative shape
        b"a<f8\x01" + (10**6).to_bytes(8, "little"),  # more elements than bytes
        b"d\x01\x00\x00\x00i" + b"\x00" * 8 + b"N",  # a dict key that is not a string
        b"NN",  # bytes after the value
        b"l\x01\x00\x00\x00" * 40 + b"N",  # nested beyond the limit
    ],
)
def test_malformed_bytes_are_refused_with_a_wire_error(data):
    with pytest.raises(wire.WireError):
        wire.decode(data, lambda kind, payload: payload)


# --------------------------------------------------------------------------------------------
# The worker
# --------------------------------------------------------------------------------------------


def test_a_generator_continues_where_the_worker_left_it(tmp_path):
    # three draws in the worker move the grader's generator exactly as three draws here
    with loaded(
        tmp_path, "def verify(p, q, d, rng):\n    return [float(rng.random()) for _ in range(3)]\n"
    ) as sandbox:
        rng, twin = np.random.default_rng(5), np.random.default_rng(5)
        assert sandbox.call(0, (None, None, None, rng), {}) == list(twin.random(3))
        assert rng.random() == twin.random()  # and the next draw here follows them


def test_returned_values_arrive_as_plain_data(tmp_path):
    with loaded(
        tmp_path,
        """
        import numpy as np

        class Always(int):
            def __eq__(self, other):
                return True

        class Pair(tuple):
            pass

        class Counts(dict):
            pass

        class Answer:
            accepted, token = np.int64(2), Always(3)

            def __repr__(self):
                return "Answer()"

        def verify(p, q, d, rng):
            return Always(1), Answer(), Pair((4, 5)), Counts(a=6)
        """,
    ) as sandbox:
        plain, answer, pair, counts = sandbox.call(0, (None, None, None, None), {})
        assert pair == (4, 5) and isinstance(pair, tuple) and counts == {"a": 6}
        assert type(plain) is int and plain == 1 and plain != 0  # its value, not its __eq__
        assert (answer.accepted, answer.token) == (2, 3) and type(answer.token) is int
        assert repr(answer) == "Answer()"


def test_the_worker_sees_no_project_and_runs_limited(tmp_path):
    with loaded(
        tmp_path,
        """
        import importlib.util, os, resource

        def verify(p, q, d, rng):
            found = [n for n in ("reference", "specdec", "gpu") if importlib.util.find_spec(n)]
            return found, os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC)[0]
        """,
    ) as sandbox:
        found, uid, processes = sandbox.call(0, (None, None, None, None), {})
        assert found == [] and processes == 0
        assert uid != 0 or os.geteuid() != 0  # run as root, the worker is not root


def test_a_fork_fails_and_is_reported_as_the_submissions_error(tmp_path):
    with loaded(
        tmp_path,
        """
        import os

        def verify(p, q, d, rng):
            pid = os.fork()
            if pid == 0:  # never here: the limit refuses the fork (kept safe all the same)
                os._exit(0)
            return 0, 0
        """,
    ) as sandbox:
        with pytest.raises(RemoteError) as raised:
            sandbox.call(0, (None, None, None, None), {})
        assert isinstance(raised.value, OSError) and raised.value.frames[-1][0] == "submitted.py"


def test_a_worker_that_exits_ends_every_later_call(tmp_path):
    with loaded(tmp_path, "import os\n\ndef verify(p, q, d, rng):\n    os._exit(0)\n") as sandbox:
        for _ in range(2):
            with pytest.raises(WorkerEnded, match="exit code 0"):
                sandbox.call(0, (None, None, None, None), {})


def test_a_value_too_deep_to_send_back_is_an_error_not_an_ending(tmp_path):
    with loaded(
        tmp_path,
        """
        def verify(p, q, d, rng):
            deep = []
            for _ in range(100):
                deep = [deep]
            return deep
        """,
    ) as sandbox:
        with pytest.raises(RemoteError, match="cannot be sent back"):
            sandbox.call(0, (None, None, None, None), {})
        assert sandbox.load(["verify"])["found"]  # and the worker still answers


def test_a_function_imported_from_elsewhere_is_refused(tmp_path):
    (tmp_path / "borrowed.py").write_text("from numpy import dot as verify\n")
    with pytest.raises(ValueError, match="verify is not defined in borrowed.py"):
        load_submission(f"{tmp_path / 'borrowed.py'}:verify")


def test_closing_removes_the_scratch_folder_and_the_process(tmp_path):
    source = "def verify(p, q, d, rng):\n    print('hello')\n    return 0\n"
    with loaded(tmp_path, source) as sandbox:
        sandbox.call(0, (None, None, None, None), {})
        scratch, process = sandbox.scratch, sandbox.process
    assert not scratch.exists() and process.poll() is not None
    assert sandbox.output() == "hello\n"  # kept, for the report's stderr
