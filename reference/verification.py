"""`verify`: exact acceptance-rejection of k drafted tokens against the target.

For draft position i (0-based) with token x = draft_tokens[i]:

    accept x with probability   a_i(x) = min(1, p_i(x) / q_i(x))
    on the first rejection      token ~ norm(max(0, p_i - q_i))       (the residual)
    if all k are accepted       token ~ p_k                           (the bonus row)

Why it is exact: for any y, P(emit y at position i) = q(y) min(1, p(y)/q(y))
+ P(reject) * residual(y) = min(q(y), p(y)) + max(0, p(y) - q(y)) = p(y), because
P(reject) = 1 - sum_y min(p, q) = sum_y max(0, p - q), the residual's normaliser.

Greedy decoding and point-mass drafts (n-gram, prompt lookup) are this same function
with one-hot rows: min(1, p/q) is then 1 if the target's argmax equals the draft and 0
otherwise, and the residual of one-hot p minus one-hot q is the target's own choice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference.checks import as_token_array, check_generator, check_probability_rows
from reference.sampling import sample_token

# float32 rows computed by softmax sum to 1 within a few 1e-7; a row off by more than this
# was not normalised (or not computed by `probabilities`), which would break exactness.
ROW_SUM_ATOL = 1e-4


@dataclass(frozen=True)
class Verification:
    accepted: int  # number of draft tokens accepted, 0..k
    token: int  # residual sample on a rejection, bonus sample from row k otherwise

    def emitted(self, draft_tokens) -> list[int]:
        """draft_tokens[:accepted] + [token]."""
        return [int(t) for t in draft_tokens[: self.accepted]] + [int(self.token)]

    @classmethod
    def from_plugin(cls, answer, k: int, n_vocab: int, plugin) -> Verification:
        """A plugged-in verify's answer, checked before either cache moves: it must be a
        Verification-like (accepted, token) with 0 <= accepted <= k and token in 0..V-1.
        (accepted = -1 would emit drafts that were never verified.)"""
        accepted, token = getattr(answer, "accepted", None), getattr(answer, "token", None)
        name = plugin_name(plugin)
        if not (is_int(accepted) and is_int(token)):
            raise TypeError(
                f"the plugged-in verify {name} must return a Verification(accepted, token) of "
                f"ints, got {answer!r}"
            )
        if not 0 <= accepted <= k:
            raise ValueError(
                f"the plugged-in verify {name} returned accepted={accepted}; it must be in "
                f"0..{k} (the drafts of this round)"
            )
        if not 0 <= token < n_vocab:
            raise ValueError(
                f"the plugged-in verify {name} returned token={token}; it must be in "
                f"0..{n_vocab - 1} (the vocabulary)"
            )
        return cls(int(accepted), int(token))


def is_int(x) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def plugin_name(fn) -> str:
    # "module.function" for the error messages that blame a plug-in
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}.{qualname}" if module else qualname


def acceptance_probability(p_x: float, q_x: float) -> float:
    # a(x) = min(1, p(x) / q(x)); q(x) > 0 because x was drawn from q
    if not float(q_x) > 0:  # also refuses NaN
        raise ValueError(
            f"acceptance_probability: q(x) = {q_x}, but a drafted token has q(x) > 0 (it was "
            f"sampled from q); pass the distribution the draft was really drawn from"
        )
    return min(1.0, float(p_x) / float(q_x))


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    # [V], [V] -> [V]:  norm(max(0, p - q)) = max(0, p - q) / sum_y max(0, p(y) - q(y))
    r = np.maximum(p.astype(np.float64) - q.astype(np.float64), 0.0)
    total = r.sum()
    if total <= 0.0:
        # p == q (to rounding): a rejection had probability 0; p itself is the right law
        return p.astype(np.float64) / p.sum(dtype=np.float64)
    return r / total


def check_verify_inputs(p_target, q_draft, draft_tokens, rng) -> np.ndarray:
    """Validate the contract of `verify`; returns draft_tokens as an int array [k]."""
    check_generator(rng)
    check_probability_rows(p_target, "p_target", ROW_SUM_ATOL)
    check_probability_rows(q_draft, "q_draft", ROW_SUM_ATOL)
    if p_target.ndim != 2 or p_target.shape[0] < 1:
        raise ValueError(
            f"p_target must be 2-D [k+1, V] with at least one row (row k is the bonus row), "
            f"got shape {p_target.shape}"
        )
    if q_draft.ndim != 2:
        raise ValueError(f"q_draft must be 2-D [k, V], got shape {q_draft.shape}")
    k_plus_1, V = p_target.shape
    k = k_plus_1 - 1
    if q_draft.shape != (k, V):
        raise ValueError(
            f"q_draft must have shape [k, V] = {(k, V)} to match p_target {p_target.shape} "
            f"(p has one more row: the bonus row), got {q_draft.shape}"
        )
    tokens = as_token_array(draft_tokens, V, "draft_tokens", allow_empty=True)
    if tokens.shape != (k,):
        raise ValueError(f"draft_tokens must have length k = {k}, got {tokens.shape[0]}")
    q_of_drafts = q_draft[np.arange(k), tokens]
    if np.any(q_of_drafts <= 0):
        i = int(np.argmax(q_of_drafts <= 0))
        raise ValueError(
            f"draft_tokens[{i}] = {tokens[i]} has q_draft probability 0: a draft token must "
            f"be drawn from q_draft, so q must be the distribution it was sampled from"
        )
    return tokens


def accepts(p_x: float, q_x: float, rng: np.random.Generator) -> bool:
    # accept the draft x with probability min(1, p(x)/q(x)): one fresh uniform per decision
    # (reusing one would correlate the decisions)
    return rng.random() < acceptance_probability(p_x, q_x)


def residual_token(p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> int:
    # [V], [V] -> the token after a rejection: a sample of norm(max(0, p - q))
    return sample_token(residual_distribution(p, q), rng)


def bonus_token(p_bonus: np.ndarray, rng: np.random.Generator) -> int:
    # [V] -> the extra token after k acceptances: a sample of the target's row k
    return sample_token(p_bonus, rng)


def verify(p_target, q_draft, draft_tokens, rng: np.random.Generator) -> Verification:
    # p_target [k+1, V], q_draft [k, V], draft_tokens [k] -> Verification(accepted, token)
    # Row i of p and q scores draft_tokens[i]; row k of p is the bonus row.
    tokens = check_verify_inputs(p_target, q_draft, draft_tokens, rng)
    return verify_unchecked(p_target, q_draft, tokens, rng)


def verify_unchecked(p_target, q_draft, draft_tokens, rng: np.random.Generator) -> Verification:
    # `verify` without its checks, for rows the library computed itself (the loop's own
    # verification pass and its own drafter's q): the decision, and nothing else
    for i, x in enumerate(draft_tokens):
        if not accepts(p_target[i, x], q_draft[i, x], rng):
            return Verification(i, residual_token(p_target[i], q_draft[i], rng))
    k = len(draft_tokens)
    return Verification(k, bonus_token(p_target[k], rng))


def verify_law(p_target: np.ndarray, q_draft: np.ndarray, draft_tokens) -> dict:
    """Exact law of verify's output for *given* drafts: {(accepted, token): probability}.

    float64 throughout; used by the oracle's exact-law tests and by the notebooks.
    """
    law: dict[tuple[int, int], float] = {}
    reach = 1.0  # probability that position i is examined (all earlier ones accepted)
    p64, q64 = p_target.astype(np.float64), q_draft.astype(np.float64)
    for i, x in enumerate(draft_tokens):
        a = min(1.0, p64[i, x] / q64[i, x])
        for y, r in enumerate(residual_distribution(p64[i], q64[i])):
            mass = reach * (1.0 - a) * r
            if mass > 0:  # list only outcomes that can happen
                law[(i, y)] = law.get((i, y), 0.0) + mass
        reach *= a
    k = len(draft_tokens)
    for y, r in enumerate(p64[k]):
        if reach * r > 0:
            law[(k, y)] = law.get((k, y), 0.0) + reach * r
    return law
