"""Broken submissions of the two drafting exercises, each one small mistake a student makes,
to test that the grader rejects them and that its hint names the mistake.

* prompt lookup: propose_lookup(context [T], k, n_vocab, max_ngram=3)
  -> (draft_tokens [m], q_rows [m, V]) (notebooks/exercises/my_lookup.py);
* tree verification: verify_tree(p_rows [n, V], tree, rng) -> (path, token)
  (notebooks/exercises/my_tree.py).

The last two tree variants are exact but keep fewer candidates than the contract's rule:
their law passes, their rule does not, and the grader must say "exact".
"""

from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------------------------------
# Prompt lookup
# --------------------------------------------------------------------------------------------


def point_masses(tokens, n_vocab: int):
    tokens = np.asarray(tokens, dtype=np.int64)
    return tokens, np.eye(n_vocab)[tokens].reshape(len(tokens), n_vocab)


def matches_itself(context, k, n_vocab, max_ngram=3):
    """Scans the ends e from T (the suffix itself) backwards: the first hit is the suffix,
    with nothing after it, so it never proposes anything."""
    context = list(context)
    T = len(context)
    for n in range(min(max_ngram, T - 1), 0, -1):
        for e in range(T, n - 1, -1):
            if context[e - n : e] == context[T - n :]:
                return point_masses(context[e : e + k], n_vocab)
    return point_masses([], n_vocab)


def oldest_occurrence(context, k, n_vocab, max_ngram=3):
    """Copies after the first occurrence of the last n tokens, not the most recent."""
    context = list(context)
    T = len(context)
    for n in range(min(max_ngram, T - 1), 0, -1):
        for e in range(n, T):
            if context[e - n : e] == context[T - n :]:
                return point_masses(context[e : e + k], n_vocab)
    return point_masses([], n_vocab)


def most_recent(context, n: int):
    # the largest e <= T - 1 with context[e-n:e] == the last n tokens, or None
    T = len(context)
    return next(
        (e for e in range(T - 1, n - 1, -1) if context[e - n : e] == context[T - n :]), None
    )


def uniform_q(context, k, n_vocab, max_ngram=3):
    """The right tokens, judged with a uniform q (as if any token could have been copied)."""
    context = list(context)
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        e = most_recent(context, n)
        if e is not None and k > 0:
            tokens = np.asarray(context[e : e + k], dtype=np.int64)
            return tokens, np.full((len(tokens), n_vocab), 1.0 / n_vocab)
    return point_masses([], n_vocab)


def smoothed_q(context, k, n_vocab, max_ngram=3):
    """The right tokens, with q smoothed so that no token has probability 0."""
    tokens, q = reference_like(context, k, n_vocab, max_ngram)
    return tokens, 0.9 * q + 0.1 / n_vocab


def longer_than_k(context, k, n_vocab, max_ngram=3):
    """Copies k + 1 tokens (the slice's end is off by one)."""
    context = list(context)
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        e = most_recent(context, n)
        if e is not None:
            return point_masses(context[e : e + k + 1], n_vocab)
    return point_masses([], n_vocab)


def copies_the_ngram(context, k, n_vocab, max_ngram=3):
    """Copies from the start of the matched n tokens instead of what follows them."""
    context = list(context)
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        e = most_recent(context, n)
        if e is not None and k > 0:
            return point_masses(context[e - n : e - n + k], n_vocab)
    return point_masses([], n_vocab)


def shortest_ngram_first(context, k, n_vocab, max_ngram=3):
    """Tries n = 1 first: the most recent occurrence of the last token alone wins."""
    context = list(context)
    for n in range(1, min(max_ngram, len(context) - 1) + 1):
        e = most_recent(context, n)
        if e is not None and k > 0:
            return point_masses(context[e : e + k], n_vocab)
    return point_masses([], n_vocab)


def reference_like(context, k, n_vocab, max_ngram=3):
    # the contract (a helper of smoothed_q, not a broken variant)
    context = list(context)
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        e = most_recent(context, n)
        if e is not None and k > 0:
            return point_masses(context[e : e + k], n_vocab)
    return point_masses([], n_vocab)


LOOKUP_VARIANTS = {
    "matches_itself": matches_itself,
    "oldest_occurrence": oldest_occurrence,
    "uniform_q": uniform_q,
    "smoothed_q": smoothed_q,
    "longer_than_k": longer_than_k,
    "copies_the_ngram": copies_the_ngram,
    "shortest_ngram_first": shortest_ngram_first,
}


# --------------------------------------------------------------------------------------------
# Tree verification
# --------------------------------------------------------------------------------------------


def sample(weights, rng):
    weights = np.asarray(weights, dtype=np.float64)
    return int(rng.choice(len(weights), p=weights / weights.sum()))


def residual(p, q):
    gap = np.maximum(p - q, 0.0)
    return gap / gap.sum() if gap.sum() > 0 else p


def law_given_earlier(tree, child, earlier):
    # the contract's q_j (a helper of the variants below)
    q = np.asarray(tree.q[child], dtype=np.float64)
    if tree.draws[child] == "without replacement" and earlier:
        q = q.copy()
        q[earlier] = 0.0
        q /= q.sum()
    return q


def residual_not_updated(p_rows, tree, rng):
    """Every sibling is judged against the node's original row."""
    node, path = 0, []
    while True:
        p = p_rows[node]
        earlier = []
        for child in tree.children(node):
            x = int(tree.tokens[child])
            q = law_given_earlier(tree, child, earlier)
            if rng.random() < min(1.0, p[x] / q[x]):
                path.append(child)
                node = child
                break
            earlier.append(x)
        else:
            return tuple(path), sample(p, rng)


def abs_residual(p_rows, tree, rng):
    """After a refusal, the next sibling faces norm(|p - q|) instead of norm(max(0, p - q))."""
    node, path = 0, []
    while True:
        p = p_rows[node]
        earlier = []
        for child in tree.children(node):
            x = int(tree.tokens[child])
            q = law_given_earlier(tree, child, earlier)
            if rng.random() < min(1.0, p[x] / q[x]):
                path.append(child)
                node = child
                break
            p = np.abs(p - q) / np.abs(p - q).sum()
            earlier.append(x)
        else:
            return tuple(path), sample(p, rng)


def without_replacement_not_renormalised(p_rows, tree, rng):
    """Siblings drawn without replacement: the earlier tokens are zeroed in q, but q is not
    renormalised."""
    node, path = 0, []
    while True:
        p = p_rows[node]
        earlier = []
        for child in tree.children(node):
            x = int(tree.tokens[child])
            q = np.array(tree.q[child], dtype=np.float64)
            if tree.draws[child] == "without replacement":
                q[earlier] = 0.0
            if rng.random() < min(1.0, p[x] / q[x]):
                path.append(child)
                node = child
                break
            p = residual(p, q)
            earlier.append(x)
        else:
            return tuple(path), sample(p, rng)


def descends_without_new_row(p_rows, tree, rng):
    """Reads the root's row once and keeps using it (and its residuals) all the way down."""
    node, path = 0, []
    p = p_rows[0]
    while True:
        earlier = []
        for child in tree.children(node):
            x = int(tree.tokens[child])
            q = law_given_earlier(tree, child, earlier)
            if rng.random() < min(1.0, p[x] / q[x]):
                path.append(child)
                node = child
                break
            p = residual(p, q)
            earlier.append(x)
        else:
            return tuple(path), sample(p, rng)


def final_token_from_q(p_rows, tree, rng):
    """Samples the final token from `q`: the last sibling's law, or a leaf's own row."""
    node, path = 0, []
    while True:
        p = p_rows[node]
        q = tree.q[node]
        earlier = []
        for child in tree.children(node):
            x = int(tree.tokens[child])
            q = law_given_earlier(tree, child, earlier)
            if rng.random() < min(1.0, p[x] / q[x]):
                path.append(child)
                node = child
                break
            p = residual(p, q)
            earlier.append(x)
        else:
            return tuple(path), sample(q, rng)


def final_token_from_root_row(p_rows, tree, rng):
    """Walks correctly, then samples the final token from the root's row."""
    node, path = 0, []
    while True:
        p = p_rows[node]
        earlier = []
        for child in tree.children(node):
            x = int(tree.tokens[child])
            q = law_given_earlier(tree, child, earlier)
            if rng.random() < min(1.0, p[x] / q[x]):
                path.append(child)
                node = child
                break
            p = residual(p, q)
            earlier.append(x)
        else:
            return tuple(path), sample(p_rows[0], rng)


def leaf_token_from_parent_row(p_rows, tree, rng):
    """On accepting a leaf, stops at once and samples from the row it was judged with (its
    parent's) instead of the leaf's own row."""
    node, path = 0, []
    while True:
        p = p_rows[node]
        earlier = []
        for child in tree.children(node):
            x = int(tree.tokens[child])
            q = law_given_earlier(tree, child, earlier)
            if rng.random() < min(1.0, p[x] / q[x]):
                path.append(child)
                if not tree.children(child):
                    return tuple(path), sample(p_rows[node], rng)
                node = child
                break
            p = residual(p, q)
            earlier.append(x)
        else:
            return tuple(path), sample(p, rng)


# exact, but slower: the law passes, the rule does not


def keep_with_p_resample_without_x(p_rows, tree, rng):
    """Keeps a sibling x with probability p(x); on a refusal, p without x, renormalised. Exact
    for any q (the one-candidate argument, sibling after sibling), but keeps fewer."""
    node, path = 0, []
    while True:
        p = np.asarray(p_rows[node], dtype=np.float64)
        for child in tree.children(node):
            x = int(tree.tokens[child])
            if rng.random() < p[x]:
                path.append(child)
                node = child
                break
            p = p.copy()
            p[x] = 0.0
            p /= p.sum()
        else:
            return tuple(path), sample(p, rng)


def first_child_only(p_rows, tree, rng):
    """Tries only the first child of each node (a chain inside the tree): exact, keeps fewer."""
    node, path = 0, []
    while True:
        p = p_rows[node]
        children = tree.children(node)
        if children:
            child = children[0]
            x = int(tree.tokens[child])
            q = np.asarray(tree.q[child], dtype=np.float64)
            if rng.random() < min(1.0, p[x] / q[x]):
                path.append(child)
                node = child
                continue
            p = residual(p, q)
        return tuple(path), sample(p, rng)


TREE_VARIANTS = {
    "residual_not_updated": residual_not_updated,
    "abs_residual": abs_residual,
    "without_replacement_not_renormalised": without_replacement_not_renormalised,
    "descends_without_new_row": descends_without_new_row,
    "final_token_from_q": final_token_from_q,
    "final_token_from_root_row": final_token_from_root_row,
    "leaf_token_from_parent_row": leaf_token_from_parent_row,
}
EXACT_BUT_SLOWER = {
    "keep_with_p_resample_without_x": keep_with_p_resample_without_x,
    "first_child_only": first_child_only,
}
