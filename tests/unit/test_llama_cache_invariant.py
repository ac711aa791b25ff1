"""The KV invariant on the Llama family, under random histories: after every step, the
committed slots equal a fresh prefill of the committed tokens (docs/kv-cache.md, 'The
invariant').

What changes with the family is where positions go: a key is cached already rotated for its
position, so the invariant holds only if every pass rotates by the position its slot will
have once committed: a k-token append at cache.end.., a tree node at length + depth (and
compaction moves it to exactly that slot), a batch row at its own start. A rollback moves a
pointer and must re-rotate nothing. GQA: the cache holds the n_kv_head shared heads."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.batch import batched_forward, new_batch_cache, pad_right
from reference.config import LlamaConfig
from reference.llama import Llama, init_llama_params
from reference.tree import compact, tree_forward

from .helpers import assert_cache_is_prefill, assert_close_scaled

V, CAPACITY = 12, 40
# GQA 2:1; rope_theta 10 so that every rotation pair of a 4-wide head turns visibly per
# position (at 10 000 a wrong position would barely change a key); std 0.5: rows that
# depend on their context
CONFIG = LlamaConfig(
    n_vocab=V, n_ctx=48, n_embd=16, n_head=4, n_kv_head=2, n_layer=2, n_inner=24, rope_theta=10.0
)
MODEL = Llama(CONFIG, init_llama_params(CONFIG, np.random.default_rng(48), std=0.5))

tokens = st.lists(st.integers(0, V - 1), min_size=1, max_size=4)
append_op = st.tuples(st.just("append"), tokens)
commit_op = st.tuples(st.just("commit"), st.floats(0.0, 1.0))
rollback_op = st.tuples(st.just("rollback"), st.none())
# a tree of 1..5 nodes: node i's parent is choice % (i + 1) - 1 (-1: a child of the last
# committed token), then the path to `pick` % n is compacted and committed
tree_op = st.tuples(
    st.just("tree"),
    st.tuples(tokens, st.lists(st.integers(0, 99), min_size=4, max_size=4), st.integers(0, 99)),
)


def path_to(parents: np.ndarray, node: int) -> list[int]:
    path = []
    while node >= 0:
        path, node = [node, *path], int(parents[node])
    return path


@settings(deadline=None, max_examples=30, derandomize=True)  # fixed examples
@given(ops=st.lists(st.one_of(append_op, commit_op, rollback_op, tree_op), max_size=14))
def test_appends_rollbacks_and_compacted_trees_keep_committed_slots_a_prefill(ops):
    """Appends of 1..4 tokens (their logits equal the uncached forward's), commits of
    n <= pending, rollbacks, and tree rounds: a random tree after the committed tokens,
    one path of it compacted and committed, the rest rolled back."""
    cache, committed, pending = MODEL.new_cache(CAPACITY), [], []
    for op, arg in ops:
        if op == "append" and len(committed) + len(pending) + len(arg) <= CAPACITY:
            logits = MODEL.forward(arg, cache)
            full = MODEL.forward(committed + pending + arg)[-len(arg) :]
            assert_close_scaled(logits, full, "append logits")
            pending += arg
        elif op == "commit":
            n = int(round(arg * len(pending)))
            cache.commit(n)
            committed, pending = committed + pending[:n], pending[n:]
        elif op == "rollback":
            cache.rollback()
            pending = []
        elif op == "tree" and len(committed) + len(arg[0]) <= CAPACITY:
            cache.rollback()  # a tree round starts from the committed tokens
            nodes, choices, pick = np.array(arg[0]), arg[1], arg[2]
            parents = np.array([choices[i] % (i + 1) - 1 for i in range(len(nodes))])
            tree_forward(MODEL, nodes, parents, cache)
            path = path_to(parents, pick % len(nodes))
            compact(cache, path)
            cache.commit(len(path))
            cache.rollback()
            committed, pending = committed + [int(t) for t in nodes[path]], []
        assert (cache.length, cache.pending) == (len(committed), len(pending))
        assert_cache_is_prefill(MODEL, cache, committed)


B = 3
row_tokens = st.lists(st.integers(0, V - 1), max_size=3)  # 0: a row that rides along
feed_op = st.tuples(st.just("feed"), st.lists(row_tokens, min_size=B, max_size=B))
row_commit_op = st.tuples(st.just("commit"), st.lists(st.floats(0.0, 1.0), min_size=B, max_size=B))


@settings(deadline=None, max_examples=30, derandomize=True)  # fixed examples
@given(ops=st.lists(st.one_of(feed_op, feed_op, row_commit_op, rollback_op), max_size=12))
def test_a_ragged_batch_keeps_each_rows_committed_slots_a_prefill(ops):
    """B rows fed ragged passes (0..3 tokens each; each row's logits equal its own uncached
    forward), committing different counts per row, rolled back together: row b's committed
    slots equal a prefill of row b's committed tokens alone."""
    cache = new_batch_cache(MODEL, B, CAPACITY)
    committed: list[list[int]] = [[] for _ in range(B)]
    pending: list[list[int]] = [[] for _ in range(B)]
    for op, arg in ops:
        if op == "feed":
            if (
                max(
                    len(c) + len(p) + len(a)
                    for c, p, a in zip(committed, pending, arg, strict=True)
                )
                > CAPACITY
            ):
                continue
            padded, n_new = pad_right([np.array(a, dtype=np.int64) for a in arg])
            if padded.shape[1] == 0:
                continue  # every row empty: no pass to make
            logits = batched_forward(MODEL, padded, n_new, cache)
            for b, a in enumerate(arg):
                if a:
                    full = MODEL.forward(committed[b] + pending[b] + a)[-len(a) :]
                    assert_close_scaled(logits[b, : len(a)], full, f"row {b} logits")
                pending[b] += a
        elif op == "commit":
            n = np.array([int(round(f * len(p))) for f, p in zip(arg, pending, strict=True)])
            cache.commit(n)
            for b in range(B):
                committed[b] += pending[b][: n[b]]
                pending[b] = pending[b][n[b] :]
        else:
            cache.rollback()
            pending = [[] for _ in range(B)]
        for b in range(B):
            assert_cache_is_prefill(MODEL, cache.row(b), committed[b], f"row {b}")
