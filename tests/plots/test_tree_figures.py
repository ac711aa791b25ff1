"""The tree-draft figures (specdec/figures/trees.py): what they draw is the tree they were given.

A hand-made tree of point masses (root; three children; two grandchildren under the second
child) with a known accepted path, so every node's fate is known in advance."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.patches import FancyBboxPatch

from reference.speculative import ACCEPTED, NEVER_EXAMINED, REJECTED
from reference.tree import POINT, ROOT, Tree, ancestor_mask
from specdec import figures
from specdec.figures.style import FATE_COLOURS
from specdec.figures.trees import tree_fates
from tests.plots.test_plot_functions import check_png, drawn, texts  # noqa: F401

V = 8
TOKENS = [ord("a"), ord("b"), ord("c"), ord("d"), ord("e"), ord("f")]


def small_tree() -> Tree:
    # node: 0 root 'a'; 1 'b', 2 'c', 3 'd' (children of 0); 4 'e', 5 'f' (children of 2)
    tokens = np.array([1, 2, 3, 4, 5, 6])
    parents = np.array([-1, 0, 0, 0, 2, 2])
    q = np.zeros((6, V), dtype=np.float32)
    q[np.arange(1, 6), tokens[1:]] = 1.0
    return Tree(tokens, parents, q, (ROOT,) + (POINT,) * 5)


def label(t: int) -> str:
    return chr(ord("a") + t - 1)


def test_fates_follow_the_walk():
    tree = small_tree()
    # node 1 refused, node 2 accepted (node 3 never tried); under 2, node 4 refused, node 5 too
    assert tree_fates(tree, [2]) == [
        "context",
        REJECTED,
        ACCEPTED,
        NEVER_EXAMINED,
        REJECTED,
        REJECTED,
    ]
    # nothing accepted: every child of the root was tried and refused, 4 and 5 never examined
    assert tree_fates(tree, []) == [
        "context",
        REJECTED,
        REJECTED,
        REJECTED,
        NEVER_EXAMINED,
        NEVER_EXAMINED,
    ]
    assert tree_fates(tree, [1]) == ["context", ACCEPTED] + [NEVER_EXAMINED] * 4


def test_tree_figure_draws_each_node_with_its_fate(tmp_path, drawn):  # noqa: F811
    tree = small_tree()
    check_png(
        figures.plot_tree(
            tree, [2, 5], 7, tmp_path / "tree.png", captions={1: "p=0.10"}, token_label=label
        )
    )
    ax = drawn[-1].axes[0]
    faces = [p.get_facecolor() for p in ax.patches if isinstance(p, FancyBboxPatch)]
    fates = tree_fates(tree, [2, 5])
    assert fates[5] == ACCEPTED and fates[4] == REJECTED
    # one box per node, in node order, coloured by its fate; then the bonus (5 is a leaf)
    assert faces == [to_rgba(FATE_COLOURS[f]) for f in fates] + [to_rgba(FATE_COLOURS["bonus"])]
    printed = texts(drawn[-1])
    letters = [t for t in printed if len(t) == 1 and t.isalpha()]  # the boxes' tokens
    assert letters == [label(t) for t in tree.tokens] + ["g"]  # the nodes, then the bonus
    assert "p=0.10" in printed and "bonus" in printed
    assert "2 accepted + 1 bonus" in ax.get_title()

    check_png(figures.plot_tree(tree, [2], 7, tmp_path / "tree2.png", token_label=label))
    faces = [p.get_facecolor() for p in drawn[-1].axes[0].patches if isinstance(p, FancyBboxPatch)]
    assert faces[-1] == to_rgba(FATE_COLOURS["correction"])  # node 2's children all refused


def test_tree_mask_figure_is_the_pass_mask(tmp_path, drawn):  # noqa: F811
    tree = small_tree()
    check_png(
        figures.plot_tree_mask(tree, 40, tmp_path / "mask.png", n_committed=2, token_label=label)
    )
    ax = drawn[-1].axes[0]
    image = np.asarray(ax.get_images()[0].get_array())
    expected = np.concatenate([np.ones((6, 2), bool), ancestor_mask(tree.parents)], axis=1)
    np.testing.assert_array_equal(image, expected)
    assert not image[4, 2 + 3] and image[4, 2 + 2] and image[4, 2]  # e sees c and a, not d
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert rows[4].endswith("d=2 pos 42") and rows[1].endswith("d=1 pos 41")
