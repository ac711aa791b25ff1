"""Tree drafts: several candidate continuations, judged by ONE target pass.

A chain draft bets everything on one guess per position; a tree keeps several guesses per
position (siblings) and a guess for what follows each of them (children). Node 0, the
root, is the last committed token: the one neither model has cached yet, so the
verification pass feeds it first, exactly like the catch-up token of a chain round.

    node  = (token, parent, depth, q row, how it was drawn)
    depth = number of edges from the root; a node at depth d sits at absolute position
            root_position + d, whatever its index in the tree

One round, with `context` = the committed tokens (the root is context[-1]):

    1. draft              the drafter builds a Tree of depth <= k
    2. verification pass  ONE target forward over [catch-up tokens, root, nodes 1..n-1]:
                          position ids = depth, and a mask in which every node sees the
                          committed context and its own ancestors only; row i of the
                          result is p(. | path from the root to node i)
    3. verify_tree        at each node, try its children in order (exact multi-candidate
                          acceptance); descend into the accepted one; when all are rejected
                          or a leaf is reached, sample one more token from the current p
    4. compact, commit    the accepted path's K/V, scattered over the tree's temporary slots,
                          are gathered right after the committed ones; commit; roll back

Trees come from `ModelTreeDrafter` (a draft model filling a static shape: b children per
node, sampled, without replacement, or its top-b as point masses), `HeadsTreeDrafter`
(the extra heads' favourites, pruned by estimated path probability) and `EagleTreeDrafter`
(EAGLE-2: an EAGLE drafter expanding the nodes it is most confident in, up to a budget). The loop is
`tree_speculative_generate`: the chain's loop (a `Run` per sequence) with `tree_round`.

One module per concern: shape.py (the tree, its checks), forward.py (the pass: positions
and mask), rule.py (exact acceptance and its law), compaction.py (the accepted path's
K/V), drafters.py (trees from a model or from heads), eagle.py (EAGLE-2's dynamic tree),
loop.py (one round, the loop).

Nodes are stored in breadth-first order (parents nondecreasing), so the children of a node
are contiguous, a node's parent comes before it, and cutting a tree at a depth or at a node
count keeps a tree. docs/algorithm.md ("Tree drafts") proves that the output law is the
target's, for every way of drawing the siblings listed below.
"""

from reference.tree.compaction import compact, kept_slots
from reference.tree.drafters import (
    TREE_PARTS,
    HeadsTreeDrafter,
    ModelTreeDrafter,
    TreeDrafter,
    choose_children,
    heads_candidates,
)
from reference.tree.eagle import EagleTreeDrafter
from reference.tree.forward import (
    chain_parents,
    check_tree_forward,
    position_ids,
    target_room,
    tree_features,
    tree_forward,
    tree_forward_rows,
    tree_hidden,
    tree_pass_features,
    tree_pass_rows,
    tree_placement,
    tree_verification_pass,
)
from reference.tree.loop import TreeRound, tree_round, tree_speculative_generate
from reference.tree.rule import (
    TreeVerification,
    sibling_rows,
    verify_tree,
    verify_tree_law,
    verify_tree_unchecked,
    without_tokens,
)
from reference.tree.shape import (
    DRAWS,
    POINT,
    ROOT,
    SAMPLED,
    WITHOUT_REPLACEMENT,
    Tree,
    TreeShape,
    ancestor_mask,
    check_siblings,
    check_tree,
    depths_of,
)

__all__ = [
    "DRAWS",
    "POINT",
    "ROOT",
    "SAMPLED",
    "WITHOUT_REPLACEMENT",
    "TREE_PARTS",
    "EagleTreeDrafter",
    "HeadsTreeDrafter",
    "ModelTreeDrafter",
    "Tree",
    "TreeRound",
    "TreeDrafter",
    "TreeShape",
    "TreeVerification",
    "ancestor_mask",
    "chain_parents",
    "check_siblings",
    "check_tree",
    "check_tree_forward",
    "choose_children",
    "compact",
    "depths_of",
    "heads_candidates",
    "kept_slots",
    "position_ids",
    "sibling_rows",
    "target_room",
    "tree_forward_rows",
    "tree_features",
    "tree_forward",
    "tree_hidden",
    "tree_pass_features",
    "tree_pass_rows",
    "tree_placement",
    "tree_round",
    "tree_speculative_generate",
    "tree_verification_pass",
    "verify_tree",
    "verify_tree_law",
    "verify_tree_unchecked",
    "without_tokens",
]
