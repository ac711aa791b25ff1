"""What a speculative run records: one round (`Round`), a run's statistics
(`SpeculativeStats`), a round as the trace keeps it (`RoundTrace`), and the result.

Plain records, no algorithm: the round that fills a `Round` is `speculative_round`
(reference/speculative.py), and the bookkeeping that turns rounds into a result is its
`Run`. Chains, trees, ragged batches and the GPU twin all return these same types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from reference.drafters import Draft
from reference.verification import Verification

ACCEPTED, REJECTED, NEVER_EXAMINED = "accepted", "rejected", "never examined"


@dataclass(frozen=True)
class CacheSpan:
    """One cache through one round: committed slots before, slots written, committed after."""

    before: int
    written: int
    after: int


@dataclass(frozen=True)
class Round:
    """What one round did."""

    draft: Draft  # tokens [k_round] and q [k_round, V]
    p: np.ndarray  # [k_round + 1, V] the verification pass's rows (last = bonus row)
    verification: Verification  # accepted drafts and the token after them
    n_catch_up: int  # committed tokens the target cache had not seen, fed before the drafts
    target_cache: CacheSpan
    draft_cache: CacheSpan | None  # None for a drafter without a cache

    @property
    def k(self) -> int:  # drafts proposed this round
        return len(self.draft.tokens)

    @property
    def nodes(self) -> int:  # candidates the verification pass judged: a chain's k drafts
        return self.k

    @property
    def examined(self) -> int:  # positions judged: the accepted ones and the one rejected
        return min(self.verification.accepted + 1, self.k)


@dataclass
class SpeculativeStats:
    """What a run did, counted by draft position. A chain drafts one token per position; a
    tree (reference/tree/) drafts one or more sibling nodes per position (= depth), and its
    accepted path takes at most one of them. So `drafted` and `accepted` count positions
    for both, and `nodes` counts the candidates verified (a chain: its drafts)."""

    k: int  # draft length asked for (a tree: its depth)
    rounds: int = 0  # target forward passes (one verification each)
    drafted: int = 0  # draft positions sent to verification (a tree: its depth per round)
    accepted: int = 0  # draft tokens accepted (a tree: the accepted paths' lengths)
    rejections: int = 0  # rounds that ended on a rejection (a tree: every child rejected)
    emitted: int = 0  # tokens returned (after the EOS / length cut)
    nodes: int = 0  # candidate tokens verified (a tree: every node but the root)
    accepted_per_round: list[int] = field(default_factory=list)
    drafted_per_round: list[int] = field(default_factory=list)  # k, or fewer near the end
    nodes_per_round: list[int] = field(default_factory=list)
    reached: np.ndarray = None  # [positions] how often draft position i was examined
    accepted_at: np.ndarray = None  # [positions] how often draft position i was accepted
    stop_reason: str = ""  # "eos" or "length"
    positions: int = None  # draft positions counted: k, or fewer when no round can draft k

    def __post_init__(self) -> None:
        # A round never drafts more than max_new_tokens - 1 tokens, so a run sizes its
        # counters by min(k, max_new_tokens): a huge k allocates nothing huge.
        if self.positions is None:
            self.positions = self.k
        if self.reached is None:
            self.reached = np.zeros(self.positions, dtype=np.int64)
        if self.accepted_at is None:
            self.accepted_at = np.zeros(self.positions, dtype=np.int64)

    @classmethod
    def pooled(cls, runs) -> SpeculativeStats:
        """Several runs with the same k as one: counts added, so every rate is pooled
        (e.g. alpha = all accepted / all examined, not a mean of per-run alphas)."""
        runs = list(runs)
        ks = {s.k for s in runs}
        if len(ks) != 1:
            raise ValueError(f"pooled needs runs with one k, got k values {sorted(ks)}")
        total = cls(k=ks.pop(), positions=max(s.positions for s in runs))
        for s in runs:
            for name in ("rounds", "drafted", "accepted", "rejections", "emitted", "nodes"):
                setattr(total, name, getattr(total, name) + getattr(s, name))
            total.accepted_per_round += s.accepted_per_round
            total.drafted_per_round += s.drafted_per_round
            total.nodes_per_round += s.nodes_per_round
            total.reached[: s.positions] += s.reached
            total.accepted_at[: s.positions] += s.accepted_at
        return total

    @property
    def acceptance_rate(self) -> float:
        """Fraction of drafted tokens that were accepted: accepted / drafted."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def alpha(self) -> float:
        """Per-position acceptance alpha (Leviathan et al.): accepted / examined positions.

        A position is examined when all drafts before it were accepted; drafts after a
        rejection are never judged, so they are left out. Under the paper's i.i.d. model
        this is the maximum-likelihood estimate of alpha = E[sum_x min(p(x), q(x))]. A tree
        is counted the same way along its walked path: a depth is examined when the walk
        reached its parent and the parent had children, and accepted when one of them was
        (docs/algorithm.md, "Tree drafts").
        """
        examined = self.accepted + self.rejections
        return self.accepted / examined if examined else float("nan")

    @property
    def mean_tokens_per_round(self) -> float:
        return self.emitted / self.rounds if self.rounds else float("nan")

    @property
    def mean_accepted_per_round(self) -> float:  # a tree: the mean accepted path length
        return self.accepted / self.rounds if self.rounds else float("nan")

    @property
    def mean_nodes_per_round(self) -> float:  # candidates verified per round
        return self.nodes / self.rounds if self.rounds else float("nan")

    @property
    def per_position_acceptance(self) -> np.ndarray:  # [positions]: P(accept x_i | examined)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = self.accepted_at / np.maximum(self.reached, 1)
        return np.where(self.reached > 0, rate, np.nan)

    @property
    def accepted_histogram(self) -> np.ndarray:  # [positions+1]: full rounds by drafts accepted
        """Counts over rounds that drafted the full k. The last rounds of a run may draft
        fewer (never more than could be emitted); counting them would put a bonus-only round
        in the "0 accepted" bin although nothing was rejected."""
        rounds = zip(self.accepted_per_round, self.drafted_per_round, strict=True)
        full = [a for a, d in rounds if d == self.k]
        return np.bincount(np.asarray(full, dtype=np.int64), minlength=self.positions + 1)

    def record(
        self, k_round: int, accepted: int, examined: int | None = None, nodes: int | None = None
    ) -> None:
        # examined: positions judged (default, a chain's: the accepted ones and the rejected
        # one, if any); nodes: candidates verified (default, a chain's: k_round)
        examined = min(accepted + 1, k_round) if examined is None else examined
        nodes = k_round if nodes is None else nodes
        self.rounds += 1
        self.drafted += k_round
        self.accepted += accepted
        self.rejections += int(examined > accepted)
        self.nodes += nodes
        self.accepted_per_round.append(accepted)
        self.drafted_per_round.append(k_round)
        self.nodes_per_round.append(nodes)
        self.reached[:examined] += 1
        self.accepted_at[:accepted] += 1


@dataclass
class RoundTrace:
    """Everything one round did, for the demo's account and the plots."""

    context_len: int  # committed tokens before the round
    draft_tokens: np.ndarray  # [k_round]
    q_rows: np.ndarray  # [k_round, V] draft distributions
    p_rows: np.ndarray  # [k_round+1, V] target distributions (last = bonus row)
    accepted: int  # drafts accepted
    token: int  # correction (after a rejection) or bonus token
    token_kind: str  # "correction" or "bonus"
    emitted: list[int]  # what the round added to the output (after EOS / length cut)
    target_cache: tuple[int, int, int]  # (committed before, written end, committed after)
    draft_cache: tuple[int, int, int] | None  # the same for the drafter's cache, if it has one

    @classmethod
    def of(cls, rnd: Round, context_len: int, emitted: list[int]) -> RoundTrace:
        v, spans = rnd.verification, (rnd.target_cache, rnd.draft_cache)
        target_span, draft_span = ((s.before, s.written, s.after) if s else None for s in spans)
        return cls(
            context_len=context_len,
            draft_tokens=rnd.draft.tokens.copy(),
            q_rows=rnd.draft.q.copy(),
            p_rows=rnd.p.copy(),
            accepted=v.accepted,
            token=v.token,
            token_kind="bonus" if v.accepted == rnd.k else "correction",
            emitted=emitted,
            target_cache=target_span,
            draft_cache=draft_span,
        )

    @property
    def draft_fates(self) -> list[str]:  # [k_round]: ACCEPTED, REJECTED or NEVER_EXAMINED
        """Draft i is accepted (i < accepted), the one rejected (i == accepted), or never
        examined (after the rejection: its row was conditioned on a rejected token)."""
        a = self.accepted
        return [
            ACCEPTED if i < a else REJECTED if i == a else NEVER_EXAMINED
            for i in range(len(self.draft_tokens))
        ]

    @property
    def p_of_drafts(self) -> np.ndarray:  # [k_round]: p_i(x_i)
        return self.p_rows[np.arange(len(self.draft_tokens)), self.draft_tokens]

    @property
    def q_of_drafts(self) -> np.ndarray:  # [k_round]: q_i(x_i)
        return self.q_rows[np.arange(len(self.draft_tokens)), self.draft_tokens]

    @property
    def acceptance_probabilities(self) -> np.ndarray:  # [k_round]: min(1, p/q)
        return np.minimum(1.0, self.p_of_drafts / self.q_of_drafts)


@dataclass
class SpeculativeResult:
    tokens: list[int]  # the generated tokens (prompt excluded)
    stats: SpeculativeStats
    trace: list[RoundTrace] | None = None
