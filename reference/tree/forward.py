"""One forward pass over a tree: position ids = depth, an ancestors-only mask.

The pass is the model's own (`GPT.residual`); a tree only says where its nodes sit
(`tree_placement`). So the CPU fast path's kernels and the GPU twin's run in tree passes
exactly as in chain passes. A chain (parents -1, 0, 1, ..) is exactly `GPT.forward`.
"""

from __future__ import annotations

import numpy as np

from reference.checks import as_token_array
from reference.kv_cache import KVCache, catch_up_tokens
from reference.model import GPT, Placement, check_cache_fits
from reference.sampling import SamplingParams, probabilities
from reference.tree.shape import Tree, ancestor_mask, depths_of


def position_ids(parents: np.ndarray, length: int) -> np.ndarray:  # [n] parents -> [n]
    # a slot at depth d of the temporary forest (d = 0: right after the committed tokens) is
    # the (d+1)-th token after them, wherever it is stored: position = length + depth (its
    # index is only a storage slot; positions by index would give siblings different ones)
    return length + depths_of(parents)


def check_tree_forward(model: GPT, tokens, parents, cache: KVCache | None):
    # every check of tree_hidden, before anything is written -> (tokens [T], parents [P+T])
    tokens = as_token_array(tokens, model.n_vocab)
    pending = 0 if cache is None else cache.pending
    parents = np.asarray(parents)
    n = pending + len(tokens)
    if parents.shape != (n,) or not np.issubdtype(parents.dtype, np.integer):
        raise ValueError(
            f"parents must hold one int per temporary slot: the cache's {pending} pending "
            f"slots and then the {len(tokens)} new tokens, got shape {parents.shape}"
        )
    if np.any(parents < -1) or np.any(parents >= np.arange(n)):
        raise ValueError(
            f"parents[j] must be -1 (right after the committed tokens) or an earlier "
            f"temporary slot, got {parents.tolist()}"
        )
    length = 0 if cache is None else cache.length
    if length + int(depths_of(parents).max()) >= model.config.n_ctx:
        raise ValueError(f"the tree reaches past the model's n_ctx={model.config.n_ctx}")
    if cache is not None:
        check_cache_fits(cache, model.config)
        cache.check_room(len(tokens))
    return tokens, parents.astype(np.int64)


def tree_hidden(model: GPT, tokens, parents, cache: KVCache | None = None) -> np.ndarray:
    # tokens [T], parents [P+T] -> h [T, C], the final hidden states (after ln_f).
    # The cache's P pending slots and the T new tokens form a forest hanging off the
    # committed context: parents[j] is slot j's parent among them (counted from the first
    # temporary slot), -1 if it follows the committed tokens directly. Slot j sits at
    # position length + depth(j) and attends to the committed slots and its own ancestors.
    # A chain (parents -1, 0, 1, ..) is exactly GPT.forward.
    return model.norm(tree_features(model, tokens, parents, cache), "ln_f")


def tree_features(
    model: GPT, tokens, parents, cache: KVCache | None = None, layers=None
) -> np.ndarray:
    # tokens [T], parents [P+T] -> x [T, F], the features before ln_f of `tree_hidden`'s pass:
    # F = C (the top), or with `layers` the residual streams after those blocks side by side
    # (GPT.layer_features, the top last), what an EAGLE drafter reads
    tokens, parents = check_tree_forward(model, tokens, parents, cache)
    at = tree_placement(parents, len(tokens), cache)
    if layers is None:
        return model.residual(tokens, cache, at)
    return model.layer_features(tokens, cache, at, layers)


def tree_forward_rows(model: GPT, x: np.ndarray, parents, cache: KVCache) -> np.ndarray:
    # x [T, C] rows already past the embedding (an EAGLE block's fused rows), parents
    # [P+T] as in tree_hidden -> [T, C] after the model's blocks: the tree pass over rows
    # instead of tokens, each row attending to the committed slots and its own ancestors
    # (positions are not read: such a model embeds nothing). Written as temporary slots.
    parents = np.asarray(parents, dtype=np.int64)
    if parents.shape != (cache.pending + len(x),):
        raise ValueError(
            f"parents must hold one int per temporary slot: the cache's {cache.pending} "
            f"pending slots and then the {len(x)} new rows, got shape {parents.shape}"
        )
    cache.check_room(len(x))
    at = model.placed(tree_placement(parents, len(x), cache))
    out = model.blocks(x, cache, at, 0, model.config.n_layer)
    cache.mark_written_at(at)
    return out


def tree_placement(parents: np.ndarray, T: int, cache: KVCache | None) -> Placement:
    # parents [P+T] -> where the T new nodes sit: positions length + depth, written at slots
    # cache.end.. in node order (a slot is storage, not a position), and the mask [T, S]:
    # every committed slot, then ancestors-or-self among the temporary slots
    length = 0 if cache is None else cache.length
    start = length if cache is None else cache.end
    new = slice(len(parents) - T, len(parents))
    mask = np.concatenate([np.ones((T, length), dtype=bool), ancestor_mask(parents)[new]], axis=1)
    positions = position_ids(parents, length)[new]
    return Placement((T,), positions, mask, np.array([start]), np.array([T]), start + T)


def tree_forward(model: GPT, tokens, parents, cache: KVCache | None = None) -> np.ndarray:
    # tokens [T], parents [P+T] -> logits [T, V]: row j is p(. | committed, path to node j)
    return model.logits(tree_hidden(model, tokens, parents, cache))


def chain_parents(m: int) -> np.ndarray:  # -> [m]: -1, 0, 1, .., m-2 (a plain sequence)
    return np.arange(m, dtype=np.int64) - 1


def tree_pass_rows(
    target: GPT, cache: KVCache, context: np.ndarray, tree: Tree
) -> tuple[np.ndarray, int]:
    # -> (h [n, C] the final hidden rows of the root and the nodes, m = the catch-up tokens
    # fed, the root included): ONE target forward over [catch-up tokens before the root,
    # root, nodes 1..n-1]; the catch-up chain is an ordinary sequence ending in the root
    x, m = tree_pass_features(target, cache, context, tree)
    return target.norm(x[m - 1 :], "ln_f"), m


def tree_pass_features(
    target: GPT, cache: KVCache, context: np.ndarray, tree: Tree, layers=None
) -> tuple[np.ndarray, int]:
    # -> (x [m-1+n, F], m): `tree_pass_rows`'s forward stopped before ln_f, every row it fed:
    # the catch-up tokens before the root (rows 0..m-2), the root (m-1), node a (m-1+a) --
    # the target cache's slot order, so `kept_slots(m, path)` picks the kept positions'
    # features. F = C, or the residual streams after the blocks `layers` (tree_features)
    if cache.pending:
        raise ValueError(f"the target cache has {cache.pending} temporary slots; roll back first")
    new = catch_up_tokens(cache, context)  # ends with the root, context[-1]
    if len(new) == 0 or int(new[-1]) != int(tree.tokens[0]):
        raise ValueError("the tree's root must be the last committed token, not yet cached")
    m = len(new)
    tokens = np.concatenate([new[:-1], tree.tokens])
    parents = np.concatenate([chain_parents(m), tree.parents[1:] + (m - 1)])
    return tree_features(target, tokens, parents, cache, layers), m


def tree_verification_pass(
    target: GPT, cache: KVCache, context: np.ndarray, tree: Tree, sampling: SamplingParams
) -> tuple[np.ndarray, int, np.ndarray]:
    # context [N] committed tokens, a tree of n nodes -> (p [n, V], m = the catch-up tokens
    # fed, the root included, h [n, C]): `tree_pass_rows`, then the target's distributions
    h, m = tree_pass_rows(target, cache, context, tree)
    return probabilities(target.logits(h), sampling), m, h


def target_room(cache: KVCache, context: np.ndarray) -> int:
    # the most tree nodes (root included) that one verification pass can write
    return cache.capacity - len(context) + 1
