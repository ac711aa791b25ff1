"""The oracle on the Llama family: the laws of the chain, the tree and the batch on tiny
RoPE + GQA pairs (specdec/oracle/laws.py, `tiny_llama`: RMSNorm, SwiGLU, 2 query heads per
key/value head, rope_theta 10 so that every rotation pair turns visibly in 16 positions).

Exact laws (float64 rows from the target's plain uncached forward, enumeration):

* the chain: the whole speculative procedure's law of the generated tokens equals the
  target's own autoregressive law (greedy, temperature, top-k, top-p, EOS, a noisy-copy
  draft and an independent smaller one), to 1e-12;
* the tree: one tree round whose target rows come from the real one-pass tree verification
  (the cache, the ancestor mask, RoPE at position length + depth; float32, so to 2e-5)
  emits the target's law of depth + 1 tokens; with node positions taken from the node's
  index instead of its depth, it does not; the real top-b tree drafter's tree too, to 1e-12;
* the ragged batch: one round per row whose target rows come from the real batched pass
  (prompts of 1, 2 and 3 tokens in one cache, every draft pair of all rows fed together and
  rolled back) emits each row's target law; with every row's positions counted from 0
  instead of its own start, it does not.

The loops under test, on Llama pairs (the plug-ins `--speculative`, `--tree`, `--batch`, by
default the reference's):

* sampled, the chain: one setup of cases.LLAMA_LOOP_SETUPS, 10 000 runs, checked three times
  (tokens, round 1, round 2) in a Holm family of its own at ALPHA = 1e-3;
* greedy, the tree loop (a sampled and a top-b tree) and the ragged batch loop: 12 tokens
  over several rounds must be the target's greedy path, a point mass (no sampled tree or
  batch family on this family: their 4 000 and 2 500 runs would cost 18 s and 11 s more).

Under `make oracle-gpu` the same checks grade the GPU twin's loops (gpu/llama.py: the
oracle's reference Llamas become twin Llamas), at the same sizes: the sampled chain costs
~3.1 ms a run there (~31 s for the 10 000; half under `make test`'s scale).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import reference.batch as batch_mod
import reference.tree.forward as tree_forward_mod
from reference.batch import batched_forward, new_batch_cache, pad_right
from reference.drafters import ModelDrafter
from reference.llama import Llama
from reference.sampling import SamplingParams, probabilities
from reference.tree import POINT, SAMPLED, ModelTreeDrafter
from specdec.oracle.cases import LLAMA_LOOP_SETUPS, LLAMA_MEMBERS, llama_family
from specdec.oracle.laws import (
    ALPHA,
    EXACT_ATOL,
    ModelRows,
    as_reference_verify,
    holm,
    loop_laws,
    marginal,
    max_abs_difference,
    round_law,
    target_law,
    tiny_llama,
)

from . import test_exact_laws as exact_laws
from .test_tree_law import PROMPT as TREE_PROMPT
from .test_tree_law import REAL_ATOL, deterministic_tree_law, real_model_laws

pytestmark = pytest.mark.distribution

# (n_embd, n_layer, n_head, std, seed) of tiny_llama: 4 query heads, 2 key/value heads
V4_TARGET = (16, 1, 4, 0.6, 31)
V4_DRAFT = (0.3, 32)  # the target plus noise
V4_SMALL_DRAFT = (8, 1, 2, 0.6, 33)  # an independent, smaller Llama (one key/value head)


def exact_setup(name, sampling, k, max_new_tokens, eos_id=None, draft=V4_DRAFT, prompt=(1, 2)):
    # test_exact_laws.py's enumerated setup, on the Llama-family pair above
    return exact_laws.exact_setup(
        name, sampling, k, max_new_tokens, eos_id, draft, prompt, V4_TARGET, "llama"
    )


EXACT_SETUPS = [
    exact_setup("greedy_k2", SamplingParams(0.0), k=2, max_new_tokens=4),
    exact_setup("t1_k2_len4", SamplingParams(1.0), k=2, max_new_tokens=4, prompt=(3, 0, 1)),
    exact_setup("t07_k3_len3_eos", SamplingParams(0.7), k=3, max_new_tokens=3, eos_id=2),
    exact_setup(
        "mixed_k2_eos", SamplingParams(1.3, top_k=3, top_p=0.85), k=2, max_new_tokens=5, eos_id=1
    ),
    exact_setup(
        "small_draft_k3_eos", SamplingParams(0.9), k=3, max_new_tokens=4, eos_id=0,
        draft=V4_SMALL_DRAFT,
    ),
]  # fmt: skip


def test_the_setups_are_llamas_with_shared_key_value_heads():
    target, draft = EXACT_SETUPS[0].target_model(), EXACT_SETUPS[-1].draft_model()
    assert isinstance(target, Llama) and isinstance(EXACT_SETUPS[0].draft_model(), Llama)
    assert (target.config.n_head, target.config.n_kv_head) == (4, 2)
    assert (draft.config.n_head, draft.config.n_kv_head) == (2, 1)
    assert target.new_cache().k.shape[1] == 2  # the cache holds the key/value heads only


# ---------------------------------------------------------------- the chain, exactly


@pytest.mark.parametrize("setup", EXACT_SETUPS, ids=lambda s: s.name)
def test_the_speculative_law_on_a_llama_pair_is_the_targets(setup):
    laws = loop_laws(setup)
    spec = marginal(laws.joint, lambda o: o[0])
    assert math.fsum(spec.values()) == pytest.approx(1.0, abs=EXACT_ATOL)
    diff = max_abs_difference(spec, laws.tokens)
    assert diff <= EXACT_ATOL, f"{setup.name}: speculative law is off by {diff:.3g}"
    for tokens in spec:  # every sequence stops at EOS or at the length limit, never earlier
        assert len(tokens) == setup.max_new_tokens or tokens[-1] == setup.eos_id


# ---------------------------------------------------------------- the tree, exactly


def tree_pair():
    # V = 3 as test_tree_law.py's real-model checks; GQA 2:1 in the target, 1 kv head in the draft
    return tiny_llama(3, 16, 16, 2, 4, 0.6, 21), tiny_llama(3, 16, 8, 1, 2, 0.6, 22)


def test_a_real_tree_pass_on_a_llama_gives_the_targets_law():
    got, expected = real_model_laws(*tree_pair())
    assert max_abs_difference(got, expected) < REAL_ATOL


def test_tree_positions_must_be_depths_on_a_llama(monkeypatch):
    """RoPE reads a node's position like GPT-2's wpe: by node index instead of depth, the
    siblings turn by different angles and the law moves by far more than the tolerance."""
    monkeypatch.setattr(
        tree_forward_mod, "position_ids", lambda parents, n: n + np.arange(len(parents))
    )
    got, expected = real_model_laws(*tree_pair())
    assert max_abs_difference(got, expected) > 10 * REAL_ATOL


def test_the_real_top_b_tree_on_a_llama_keeps_the_targets_law():
    target, draft = tree_pair()
    sampling = SamplingParams(0.8)
    p_rows = ModelRows(target, sampling)
    drafter = ModelTreeDrafter(draft, (2, 2, 1), POINT)
    drafter.reset()
    drafter.prefill(np.array(TREE_PROMPT[:-1]))
    tree = drafter.propose_tree(np.array(TREE_PROMPT), 3, 99, sampling, np.random.default_rng(0))
    assert tree.depth == 3
    got = deterministic_tree_law(p_rows, tree, 4)
    expected = target_law(p_rows, TREE_PROMPT, max_new_tokens=4)
    assert max_abs_difference(got, expected) < EXACT_ATOL


# ---------------------------------------------------------------- the ragged batch, exactly

BATCH_PROMPTS = [(2,), (2, 3), (1, 0, 3)]  # ragged: each row starts at its own slot
BATCH_K = 2


def batch_rows(target: Llama, sampling: SamplingParams) -> list[dict]:
    """Row b's target rows, context -> [V] float64, from the real batched pass: prefill the
    three prompts in one ragged pass, commit, then for each of the V^k draft tuples feed
    every row a different one in one pass (row b the (j + b)-th), read its rows, roll back."""
    V = target.n_vocab
    cache = new_batch_cache(target, len(BATCH_PROMPTS))
    tokens, n_new = pad_right([np.array(p) for p in BATCH_PROMPTS])
    logits = batched_forward(target, tokens, n_new, cache)
    cache.commit(n_new)
    rows: list[dict] = [{p: logits[b, len(p) - 1]} for b, p in enumerate(BATCH_PROMPTS)]
    drafts = list(itertools.product(range(V), repeat=BATCH_K))
    for j in range(len(drafts)):
        fed = [drafts[(j + b) % len(drafts)] for b in range(len(BATCH_PROMPTS))]
        logits = batched_forward(target, np.array(fed), np.full(len(fed), BATCH_K), cache)
        cache.rollback()
        for b, (prompt, d) in enumerate(zip(BATCH_PROMPTS, fed, strict=True)):
            for i in range(BATCH_K):
                rows[b][prompt + d[: i + 1]] = logits[b, i]
    assert (cache.length == [len(p) for p in BATCH_PROMPTS]).all()  # only the prompts stay
    return [{c: probability_row(z, sampling) for c, z in by_context.items()} for by_context in rows]


def probability_row(logits: np.ndarray, sampling: SamplingParams) -> np.ndarray:
    # float32 logits of the real pass -> float64 probabilities, as ModelRows turns its own
    return probabilities(logits.astype(np.float64), sampling)


def batch_round_gaps() -> list[float]:
    """Per row: the largest gap between (one round whose p rows are the batch pass's, then
    the target's own rows to k + 1 tokens) and the target's law of k + 1 tokens."""
    setup = LLAMA_LOOP_SETUPS["llama_t1_k2"]
    target, sampling = setup.target_model(), SamplingParams(1.0)
    p_rows, q_rows = ModelRows(target, sampling), ModelRows(setup.draft_model(), sampling)
    gaps = []
    for prompt, rows in zip(BATCH_PROMPTS, batch_rows(target, sampling), strict=True):
        law: dict = {}
        for (_, emitted), w in round_law(rows.__getitem__, q_rows, prompt, BATCH_K).items():
            rest = BATCH_K + 1 - len(emitted)
            for tail, pv in target_law(p_rows, prompt + emitted, max_new_tokens=rest).items():
                law[emitted + tail] = law.get(emitted + tail, 0.0) + w * pv
        expected = target_law(p_rows, prompt, max_new_tokens=BATCH_K + 1)
        gaps.append(max_abs_difference(law, expected))
    return gaps


def test_a_real_ragged_batch_round_on_a_llama_gives_each_rows_law():
    gaps = batch_round_gaps()
    assert max(gaps) < REAL_ATOL, gaps


def test_batch_rows_must_start_at_their_own_position_on_a_llama(monkeypatch):
    """Every row's new tokens placed at positions 0.. instead of start[b]..: their queries
    turn by the wrong angles against the cached keys, and the rows whose history is not
    empty leave the target's law."""
    right = batch_mod.batch_placement

    def from_zero(start, n_new, T):
        at = right(start, n_new, T)
        positions = np.where(np.arange(T)[None, :] < n_new[:, None], np.arange(T)[None, :], 0)
        return type(at)(at.shape, positions, at.mask, at.start, at.n_new, at.stop)

    monkeypatch.setattr(batch_mod, "batch_placement", from_zero)
    gaps = batch_round_gaps()
    assert min(gaps) > 10 * REAL_ATOL, gaps


# ---------------------------------------------------------------- the loop, sampled


@pytest.fixture(scope="module")
def llama_results(oracle_plugins, speculative_impl, verify_impl):
    verify_fn = None
    if "speculative" not in oracle_plugins and "verify" in oracle_plugins:
        verify_fn = as_reference_verify(verify_impl)
    results = llama_family(speculative_impl, verify_fn)
    return results, holm({name: r.p_value for name, r in results.items()})


GREEDY = SamplingParams(0.0)
GREEDY_PROMPTS = [(1,), (2, 5), (3, 0, 7)]  # ragged, for the batch
GREEDY_TOKENS = 12  # several rounds: rollbacks, catch-ups and compactions pile up


def greedy_pair() -> tuple[Llama, Llama]:
    return tiny_llama(8, 32, 16, 2, 4, 0.6, 41), tiny_llama(8, 32, 8, 1, 2, 0.6, 42)


def greedy_paths(target: Llama) -> list[tuple[int, ...]]:
    # the target's greedy law for each prompt: a point mass, from its uncached forwards
    rows = ModelRows(target, GREEDY)
    laws = [target_law(rows, p, max_new_tokens=GREEDY_TOKENS) for p in GREEDY_PROMPTS]
    assert all(len(law) == 1 for law in laws)
    assert rows.margin > 1e-3, f"an argmax is {rows.margin:.2g} from a tie"
    return [next(iter(law)) for law in laws]


@pytest.mark.parametrize(("widths", "draw"), [((2, 2), SAMPLED), ((2, 1, 1), POINT)])
def test_the_graded_tree_loop_is_the_greedy_path_on_a_llama(widths, draw, tree_impl):
    """The tree loop under test (`--tree`) at T = 0 on a Llama pair: the law is a point
    mass, 12 tokens over several rounds, so a compaction or position slip shows (a loop that
    skips compaction leaves it: on the first prompt for (2, 2), on all three for (2, 1, 1))."""
    target, draft = greedy_pair()
    drafter = ModelTreeDrafter(draft, widths, draw)
    got = [
        tuple(int(t) for t in tree_impl(
            target, drafter, p, max_new_tokens=GREEDY_TOKENS, rng=np.random.default_rng(0),
            sampling=GREEDY,
        ).tokens)
        for p in GREEDY_PROMPTS
    ]  # fmt: skip
    assert got == greedy_paths(target)


def test_the_graded_batch_loop_is_the_greedy_path_on_a_llama(batch_impl):
    """The batch loop under test (`--batch`) at T = 0 on a Llama pair, three ragged rows:
    each row's tokens are its own greedy path (rows placed at positions 0.. instead of their
    own starts leave it in every row)."""
    target, draft = greedy_pair()
    results = batch_impl(
        target,
        [ModelDrafter(draft) for _ in GREEDY_PROMPTS],
        [list(p) for p in GREEDY_PROMPTS],
        k=3,
        max_new_tokens=GREEDY_TOKENS,
        rng=np.random.default_rng(0),
        sampling=GREEDY,
        eos_id=None,
    )
    assert [tuple(int(t) for t in r.tokens) for r in results] == greedy_paths(target)


def test_the_llama_setup_is_exact_and_well_conditioned():
    for setup in LLAMA_LOOP_SETUPS.values():
        laws = loop_laws(setup)
        assert max_abs_difference(marginal(laws.joint, lambda o: o[0]), laws.tokens) <= EXACT_ATOL
        assert laws.margin > 1e-3, (
            f"{setup.name}: a discrete choice is {laws.margin:.2g} from a tie"
        )
        # every rollback and catch-up path has mass: round 1 keeps 0, 1 or 2 drafts
        assert min(laws.round1.get(a, 0.0) for a in range(setup.k + 1)) > 0.1, laws.round1


def test_llama_family_is_complete(llama_results):
    assert sorted(llama_results[0]) == sorted(LLAMA_MEMBERS)


@pytest.mark.parametrize("member", LLAMA_MEMBERS)
def test_llama_loop_law(member, llama_results):
    results, adjusted = llama_results
    assert adjusted[member] >= ALPHA, (
        f"Holm-adjusted p = {adjusted[member]:.3g} < alpha = {ALPHA} in the Llama loop family "
        f"of {len(results)}: {results[member].describe()}"
    )
