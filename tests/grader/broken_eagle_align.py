"""Broken submissions of the EAGLE alignment exercise,
`catch_up_pairs(context [n], features [m, C], cached) -> (tokens [r], feats [r, C])`
(notebooks/exercises/my_eagle_align.py), each one small mistake a student makes on top of a
correct function, to test that the grader rejects it and that its hint names the mistake."""

from __future__ import annotations

import numpy as np


def correct(context, features, cached):
    t = np.arange(cached, min(len(context) - 1, len(features)))
    return context[t + 1], features[t]


def feature_one_ahead(context, features, cached):
    """x(t + 1) with f(t + 1), indexed: runs past the last feature in a round."""
    t = np.arange(cached, min(len(context) - 1, len(features)))
    return context[t + 1], features[t + 1]


def feature_one_ahead_sliced(context, features, cached):
    """x(t + 1) with f(t + 1), by slices: one feature row short in a round."""
    n = len(context)
    return context[cached + 1 : n], features[cached + 1 : n]


def feature_one_behind(context, features, cached):
    """x(t + 1) with f(t - 1) (at t = 0, features[-1] reads the last row)."""
    t = np.arange(cached, min(len(context) - 1, len(features)))
    return context[t + 1], features[t - 1]


def tokens_not_shifted(context, features, cached):
    """x(t) with f(t): the token the feature has already read."""
    t = np.arange(cached, min(len(context) - 1, len(features)))
    return context[t], features[t]


def cached_pairs_fed_again(context, features, cached):
    """Every known pair from t = 0: the cache's own rows fed a second time."""
    t = np.arange(0, min(len(context) - 1, len(features)))
    return context[t + 1], features[t]


def last_pair_dropped(context, features, cached):
    """t = cached .. n - 3: the pair of the token just committed left out."""
    t = np.arange(cached, min(len(context) - 1, len(features)) - 1)
    return context[t + 1], features[t]


def every_feature_paired(context, features, cached):
    """t up to m - 1, by slices: at prefill the last feature gets no token."""
    return context[cached + 1 :], features[cached:]


def newest_first(context, features, cached):
    """The right pairs, newest first."""
    tokens, feats = correct(context, features, cached)
    return tokens[::-1], feats[::-1]


def fused_rows(context, features, cached):
    """Returns [e; f]-like rows: the token id glued to its feature, not the feature alone."""
    tokens, feats = correct(context, features, cached)
    return tokens, np.concatenate([tokens[:, None].astype(feats.dtype), feats], axis=1)


def one_cached_pair_fed_again(context, features, cached):
    """Starts at t = cached - 1: the cache's last pair fed a second time."""
    t = np.arange(max(cached - 1, 0), min(len(context) - 1, len(features)))
    return context[t + 1], features[t]


def first_new_pair_skipped(context, features, cached):
    """Starts at t = cached + 1, as if `cached` were the last cached position."""
    t = np.arange(cached + 1, min(len(context) - 1, len(features)))
    return context[t + 1], features[t]


def token_two_ahead(context, features, cached):
    """x(t + 2) with f(t), by slices: the tokens shifted once too often."""
    r = min(len(context) - 1, len(features)) - cached
    return context[cached + 2 : cached + 2 + r], features[cached : cached + r]


def one_feature_for_every_pair(context, features, cached):
    """Every pair gets f(cached): no catalogued mistake, so the hint names the first wrong row."""
    t = np.arange(cached, min(len(context) - 1, len(features)))
    return context[t + 1], features[np.full_like(t, cached)]


VARIANTS = {
    name: function
    for name, function in globals().items()
    if callable(function) and function.__module__ == __name__ and name != "correct"
}
