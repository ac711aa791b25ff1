"""specdec/report.py, the text renderings the CLI prints and notebooks 2-7 teach from, on rounds
built by hand so that every expected string is known in advance."""

from __future__ import annotations

import numpy as np

from reference.speculative import RoundTrace, SpeculativeStats
from specdec import report

V = 256  # byte-level ids


def rows(pairs: list[tuple[int, float]], n: int) -> np.ndarray:
    """[n, V] float rows; row i puts mass pairs[i][1] on token pairs[i][0], the rest on 0."""
    out = np.zeros((n, V), np.float32)
    for i in range(n):
        tok, mass = pairs[i] if i < len(pairs) else (0, 1.0)
        out[i, tok] = mass
        out[i, 0] += 1.0 - mass
    return out


def make_round(drafts: str, accepted: int, token: str, p, q, cache=(5, 9, 7)) -> RoundTrace:
    ids = np.array([ord(c) for c in drafts], np.int64)
    k = len(ids)
    kind = "bonus" if accepted == k else "correction"
    emitted = [int(t) for t in ids[:accepted]] + [ord(token)]
    return RoundTrace(
        context_len=cache[0],
        draft_tokens=ids,
        q_rows=rows(list(zip(ids.tolist(), q, strict=True)), k),
        p_rows=rows(list(zip(ids.tolist(), p, strict=True)), k + 1),
        accepted=accepted,
        token=ord(token),
        token_kind=kind,
        emitted=emitted,
        target_cache=cache,
        draft_cache=None,
    )


# round 1: drafts "ab", "a" accepted, "b" rejected, correction "c" -> emits "ac"
# round 2: drafts "de", both accepted, bonus "f" -> emits "def"
ROUND_1 = make_round("ab", 1, "c", p=[0.9, 0.2], q=[0.5, 0.8])
ROUND_2 = make_round("de", 2, "f", p=[0.5, 0.25], q=[0.5, 0.5], cache=(7, 10, 10))
TRACE = [ROUND_1, ROUND_2]


def test_fates_name_each_emitted_token():
    assert report.fates(TRACE) == [
        (ord("a"), "accepted"),
        (ord("c"), "correction"),
        (ord("d"), "accepted"),
        (ord("e"), "accepted"),
        (ord("f"), "bonus"),
    ]


def test_render_tokens_marks_fates_with_brackets_or_colour():
    assert report.render_tokens(TRACE, colour=False) == "a[c]de{f}"
    coloured = report.render_tokens(TRACE, colour=True)
    green, red, end = report.ANSI["accepted"], report.ANSI["correction"], report.ANSI["end"]
    assert coloured.startswith(f"{green}a{end}{red}c{end}")
    assert coloured.replace(end, "").count("\033[") == 5  # one colour per token


def test_byte_piece_keeps_layout_and_escapes_the_rest():
    assert [report.byte_piece(t) for t in (ord("x"), 10, 9, 0, 200)] == [
        "x",
        "\n",
        "\t",
        "\\x00",
        "\\xc8",
    ]


def test_render_marked_puts_the_fates_under_the_text():
    text = report.render_marked("> ", TRACE)
    m = report.MARKS
    assert text == "> acdef\n  " + m["accepted"] + m["correction"] + m["accepted"] * 2 + m["bonus"]


def test_describe_round_shows_p_q_and_the_acceptance_probability():
    lines = report.describe_round(1, ROUND_1).splitlines()
    assert lines[0] == "round   1  context=5"
    # x1: p 0.9, q 0.5 -> min(1, p/q) = 1; x2: p 0.2, q 0.8 -> 0.25, rejected
    assert "x1='a'" in lines[1] and "p=0.900 q=0.500 min(1,p/q)=1.000  accept" in lines[1]
    assert "x2='b'" in lines[2] and "p=0.200 q=0.800 min(1,p/q)=0.250  REJECT" in lines[2]
    assert lines[3] == "    -> correction 'c'; target cache 5->9 written, 7 kept"
    assert "-> bonus 'f'; target cache 7->10 written, 10 kept" in report.describe_round(2, ROUND_2)


def stats_of_rounds() -> SpeculativeStats:
    s = SpeculativeStats(k=3)
    s.record(3, 0)  # x1 rejected
    s.record(3, 3)  # all accepted
    s.record(1, 1)  # a short last round: not in the histogram
    s.emitted, s.stop_reason = 1 + 4 + 2, "length"
    return s


def test_per_position_text_rates_and_never_examined():
    s = stats_of_rounds()
    # position 1 examined 3 times (accepted twice), positions 2 and 3 once (accepted once)
    assert report.per_position_text(s) == "0.67 1.00 1.00"
    s = SpeculativeStats(k=2)
    s.record(2, 0)
    text = report.per_position_text(s)
    assert text.startswith("0.00 n/a") and "never examined" in text


def test_histogram_text_says_how_many_rounds_it_leaves_out():
    assert report.histogram_text(stats_of_rounds()) == (
        "1 0 0 1  (not counted: 1 shorter rounds, at the length limit or stopped early)"
    )
    s = SpeculativeStats(k=1)
    s.record(1, 1)
    assert report.histogram_text(s) == "0 1"


def test_stats_table_rows():
    s = stats_of_rounds()
    table = report.stats_table(s, {"autoregressive_tps": 100.0, "speculative_tps": 150.0})
    values = dict(
        (name.strip(), value)
        for name, value in (line.strip().split("  ", 1) for line in table.splitlines())
    )
    assert values["rounds (target passes)"].strip() == "3"
    assert values["drafted / accepted"].strip() == "7 / 4"
    assert values["acceptance rate (accepted/drafted)"].strip() == f"{4 / 7:.3f}"
    assert values["alpha (accepted/examined)"].strip() == f"{4 / 5:.3f}"
    assert values["mean tokens per round"].strip() == "2.33"
    assert values["measured speedup"].strip() == "1.50x"
    assert values["stopped by"].strip() == "length"


def test_stats_table_of_a_tree_counts_depths_nodes_and_paths():
    """Two rounds of a depth-2 tree with 6 candidates: a path of 2 (a leaf), then all of the
    root's children refused. alpha = 2 accepted / 3 examined depths."""
    s = SpeculativeStats(k=2)
    s.record(2, 2, examined=2, nodes=6)
    s.record(2, 0, examined=1, nodes=6)
    s.emitted, s.stop_reason = 3 + 1, "length"
    table = report.stats_table(s, tree="2,2 (children per node at depths 1..2; 6 candidates)")
    values = dict(
        (name.strip(), value.strip())
        for name, value in (line.strip().split("  ", 1) for line in table.splitlines())
    )
    assert values["tree shape"] == "2,2 (children per node at depths 1..2; 6 candidates)"
    assert values["depth k"] == "2"
    assert values["nodes verified per round"] == "6.00 (12 in all)"
    assert values["accepted path length per round"] == "1.00"
    assert values["mean tokens per round"] == "2.00"
    assert values["alpha (accepted/examined depths)"] == f"{2 / 3:.3f}"
    assert values["per-depth acceptance 1..k"] == "0.50 1.00"
    assert values["full-depth rounds (depth 2) by path length 0..k"] == "1 0 1"
    assert "draft length k" not in table and "per-position" not in table
