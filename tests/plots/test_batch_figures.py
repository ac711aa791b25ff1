"""The ragged-batch figures (specdec/figures/batch.py): what they draw is the batch they were given.

Hand-made counts: three sequences, the second finishing after two rounds, the third drafting
fewer tokens in its last round; and one pass with ragged starts and lengths and a finished
row, so every cell is known in advance."""

from __future__ import annotations

import numpy as np

from reference.batch import batch_attention_mask
from specdec import figures
from specdec.figures.batch import HISTORY, NEW, PAD, REAL, UNUSED, acceptance_grid, pass_layout
from tests.plots.test_plot_functions import check_png, drawn, texts  # noqa: F401

ACCEPTED = [[4, 0, 2], [1, 3], [4, 4, 1]]
DRAFTED = [[4, 4, 4], [4, 4], [4, 4, 2]]


def test_acceptance_grid_leaves_finished_rounds_empty():
    grid = acceptance_grid(ACCEPTED)
    assert grid.shape == (3, 3)
    np.testing.assert_array_equal(grid[0], [4, 0, 2])
    assert grid[1, :2].tolist() == [1, 3] and np.isnan(grid[1, 2])


def test_acceptance_heat_map_is_the_counts(tmp_path, drawn):  # noqa: F811
    check_png(
        figures.plot_batch_acceptance(
            ACCEPTED, DRAFTED, tmp_path / "acc.png", row_labels=["A", "B", "C"]
        )
    )
    ax = drawn[-1].axes[0]
    image = ax.get_images()[0].get_array()
    np.testing.assert_array_equal(image.filled(-1), [[4, 0, 2], [1, 3, -1], [4, 4, 1]])
    assert image.mask[1, 2] and not image.mask[1, 1]  # the finished round is blank
    cells = [t for t in texts(drawn[-1]) if "/" in t and t[0].isdigit()]
    assert cells == ["4/4", "0/4", "2/4", "1/4", "3/4", "4/4", "4/4", "1/2"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["A", "B", "C"]


def test_pass_layout_matches_the_mask_of_the_pass():
    start, n_new = np.array([6, 1, 4]), np.array([2, 3, 0])
    tokens, slots = pass_layout(start, n_new)
    np.testing.assert_array_equal(tokens, [[REAL, REAL, PAD], [REAL] * 3, [PAD] * 3])
    assert slots.shape == (3, 8)  # S = max(start + n_new) = 8
    np.testing.assert_array_equal(slots[0], [HISTORY] * 6 + [NEW] * 2)
    np.testing.assert_array_equal(slots[1], [HISTORY] + [NEW] * 3 + [UNUSED] * 4)
    np.testing.assert_array_equal(slots[2], [HISTORY] * 4 + [UNUSED] * 4)
    # a slot the figure calls this row's (history or new) is one its last real position reads
    mask = batch_attention_mask(start, n_new, 3, 8)
    for b in (0, 1):
        np.testing.assert_array_equal(mask[b, n_new[b] - 1], slots[b] != UNUSED)


def test_pass_figure_draws_the_layout(tmp_path, drawn):  # noqa: F811
    start, n_new = np.array([6, 1, 4]), np.array([2, 3, 0])
    check_png(figures.plot_batch_pass(start, n_new, tmp_path / "pass.png"))
    left, right = drawn[-1].axes[:2]
    tokens, slots = pass_layout(start, n_new)
    np.testing.assert_array_equal(left.get_images()[0].get_array(), tokens)
    np.testing.assert_array_equal(right.get_images()[0].get_array(), slots)
    printed = texts(drawn[-1])
    assert [t for t in printed if t.isdigit()][:5] == ["6", "7", "1", "2", "3"]  # position ids
    assert printed.count("pad") == 4
    assert "5 real of 9" in left.get_title()
    assert "12 of 24 serve an unfinished row" in right.get_title()  # 6 + 2 and 1 + 3
