"""The oracle's self-drafting laws on the Llama family: early exit (the target's own RMSNorm,
or a random RMSNorm exit head with an adapter), extra heads, EAGLE-1 and EAGLE-3 (a Llama
block: RoPE, GQA, SwiGLU) and EAGLE-2's tree, on a tiny two-block Llama target
(self_drafting.LLAMA_SELF_TARGET: 4 query heads sharing 2 key/value heads, untied lm_head).

Exact laws (zero variance), as test_self_drafting_law.py's on GPT-2: what each drafter can
propose at each context is enumerated from the definitions written in self_drafting.py
(float64 rows: RMSNorm, the lm_head, EAGLE's block run uncached at positions 0..t, EAGLE-3's
features from the uncached forwards of the target's first blocks); the loop's output law
must be the target's to 1e-12.

The loop under test, exactly (no sampled family): the row check (self_drafting.
loop_row_deviation) runs the graded loop (`--speculative`, by default the reference's; the
twin's under `make oracle-gpu`) with a trace, and holds every round's q rows against the
oracle's and its p rows against the target's uncached rows. A cache, position or feature
bug of a drafter made of the target keeps the output law (each q is still the row its draft
was drawn from) and moves q: the row check sees it in the round after the damage, where a
sampled family sees it only through the acceptance, at thousands of runs. What the row check
cannot see, a draft not drawn from the q it reports, is the same family-neutral code
(sample_token, probabilities) the GPT-2 sampled families grade.

EAGLE-2's tree: over real rounds of each backend's tree loop, every tree is the one
proposals.Eagle2TreeLaw grows from the oracle's rows (the proposal law's along-rounds check).

Each check is shown to catch broken variants: broken.LLAMA_DRAFTERS (EAGLE's block rotated
from position 0, an exit head normed as GPT-2's, and the catalogue's self-drafter bugs), an
EAGLE-2 tree labelling its nodes sampled, tree nodes rotated by index instead of depth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

import reference.tree.forward as tree_forward_mod
from reference.eagle import EagleDrafter
from reference.llama import Llama
from reference.sampling import SamplingParams
from reference.speculative import speculative_generate
from reference.tree import EagleTreeDrafter
from specdec.oracle import optional
from specdec.oracle.broken import (
    LLAMA_DRAFTERS,
    EagleTreeLabelsChosenAsSampled,
    with_self_drafter,
)
from specdec.oracle.laws import (
    EXACT_ATOL,
    ModelRows,
    as_reference_verify,
    loop_laws,
    marginal,
    max_abs_difference,
    speculative_law,
    target_law,
)
from specdec.oracle.proposals import (
    AT_ONE,
    EAGLE2,
    Eagle2TreeLaw,
    greedy,
    independent_transform,
    proposals_along_rounds,
)
from specdec.oracle.self_drafting import EagleProposals, llama_self_setup, loop_row_deviation

pytestmark = pytest.mark.distribution

S = SamplingParams
EXACT_SETUPS = [
    llama_self_setup("exit_own_greedy_k2", S(0.0), 2, 6, (0, 1), exit_layer=1, own_exit_norm=True),
    llama_self_setup("exit_own_t1_k2", S(1.0), 2, 5, (3, 0), exit_layer=1, own_exit_norm=True),
    llama_self_setup("exit_rms_t1_k3_len3", S(1.0), 3, 3, (1, 3), exit_layer=1, part_seed=3),
    llama_self_setup(
        "exit_rms_topk_k3_eos", S(0.7, top_k=3), 3, 4, (4, 1), exit_layer=1, eos_id=4, part_seed=2
    ),
    llama_self_setup("heads_greedy_k2", S(0.0), 2, 6, (0, 1), n_heads=2),
    llama_self_setup("heads_t1_k3", S(1.0), 3, 5, (1, 3), n_heads=3),
    llama_self_setup("heads_topp_k2_eos", S(0.7, top_p=0.9), 2, 5, (1, 3), n_heads=2, eos_id=2),
    llama_self_setup("heads_one_token_prompt", S(1.0), 2, 4, (3,), n_heads=2),
    llama_self_setup("eagle_greedy_k2", S(0.0), 2, 6, (0, 1), eagle=True, part_seed=3),
    llama_self_setup("eagle_t1_k2", S(1.0), 2, 4, (3, 0), eagle=True, part_seed=3),
    llama_self_setup(
        "eagle_mixed_k2_eos", S(1.3, top_k=3, top_p=0.85), 2, 5, (4, 2), eagle=True, eos_id=4
    ),
    llama_self_setup("eagle_one_token_prompt", S(1.0), 2, 4, (3,), eagle=True, part_seed=3),
    llama_self_setup(
        "eagle3_t08_k2", S(0.8), 2, 4, (3, 0), eagle=True, part_seed=3, feature_layers=(1, 2)
    ),
    llama_self_setup(
        "eagle3_topk_k2_eos", S(0.7, top_k=3), 2, 4, (1, 3), eagle=True, eos_id=0,
        feature_layers=(1, 2),
    ),
]  # fmt: skip


def test_the_setups_are_llamas_with_llama_heads():
    target = EXACT_SETUPS[0].target_model()
    assert isinstance(target, Llama) and (target.config.n_head, target.config.n_kv_head) == (4, 2)
    assert not target.config.tie_word_embeddings  # the output layer is lm_head, not the embedding
    by_name = {s.name: s for s in EXACT_SETUPS}
    assert by_name["exit_own_t1_k2"].exit_head() == {}
    assert set(by_name["exit_rms_t1_k3_len3"].exit_head()) == {
        "exit.norm.weight",
        "exit.proj.weight",
        "exit.proj.bias",
    }
    eagle3 = by_name["eagle3_t08_k2"].make_drafter()
    assert eagle3.feature_layers == (1, 2) and isinstance(eagle3.block_model, Llama)


@pytest.mark.parametrize("setup", EXACT_SETUPS, ids=lambda s: s.name)
def test_self_drafting_law_on_a_llama_is_the_targets(setup):
    laws = loop_laws(setup)
    spec = marginal(laws.joint, lambda o: o[0])
    assert math.fsum(spec.values()) == pytest.approx(1.0, abs=EXACT_ATOL)
    diff = max_abs_difference(spec, laws.tokens)
    assert diff <= EXACT_ATOL, f"{setup.name}: the loop's law is off by {diff:.3g}"
    if not setup.sampling.greedy:  # not vacuous: drafts are accepted with real probability
        accepted = math.fsum(w for (_, accepts), w in laws.joint.items() if sum(accepts) > 0)
        assert accepted > 0.05, f"{setup.name}: drafts are (almost) never accepted"


class ReportsRowsAtOne:
    """EAGLE's proposals drawn at the setup's temperature, judged with their rows at T = 1."""

    def __init__(self, drawn: EagleProposals, reported: EagleProposals) -> None:
        self.drawn, self.reported = drawn, reported
        self.n_vocab, self.margin = drawn.n_vocab, math.inf

    def outcomes(self, context, k):
        for drafts, _, w in self.drawn.outcomes(context, k):
            yield drafts, self.reported.draft_rows(context, drafts), w


def test_the_exact_check_rejects_rows_reported_at_another_temperature():
    """The comparison is not vacuous on a Llama: q reported at T = 1 for drafts drawn at
    T = 0.8 (EAGLE-3) moves the output law far past the tolerance."""
    setup = next(s for s in EXACT_SETUPS if s.name == "eagle3_t08_k2")
    p_rows = ModelRows(setup.target_model(), setup.sampling)
    wrong_q = ReportsRowsAtOne(setup.draft_law(setup.sampling), setup.draft_law(S(1.0)))
    kw = dict(max_new_tokens=setup.max_new_tokens, eos_id=setup.eos_id)
    wrong = speculative_law(p_rows, wrong_q, setup.prompt, k=setup.k, **kw)
    expected = target_law(p_rows, setup.prompt, **kw)
    assert max_abs_difference(marginal(wrong, lambda o: o[0]), expected) > 0.01


# ---------------------------------------------------------------- the loop's rows, exactly

# float32 rows of the loop against float64 rows of the oracle: observed up to 3.4e-6 on the
# reference and 9e-6 on the twin (NumPy mode; EAGLE's scaled attention amplifies rounding),
# against 0.06 and more for every broken drafter below
ROW_ATOL = 1e-4
SEEDS = (0, 1, 2, 3)  # runs per setup (each several rounds: 10 tokens, k = 2 or 3)
# T without top-k / top-p: no discrete choice that float32 rounding could flip
ROW_SETUPS = {
    s.name: s
    for s in [
        llama_self_setup("exit_own", S(1.0), 3, 10, (3, 0), exit_layer=1, own_exit_norm=True),
        llama_self_setup("exit_rms", S(0.7), 2, 10, (4, 1), exit_layer=1, part_seed=2),
        llama_self_setup("heads", S(1.0), 3, 10, (1, 3), n_heads=3),
        llama_self_setup("eagle", S(0.8), 3, 10, (3, 0), eagle=True, part_seed=3),
        llama_self_setup(
            "eagle3", S(1.0), 3, 10, (1, 3), eagle=True, part_seed=3, feature_layers=(1, 2)
        ),
    ]
}
# which setups each broken drafter runs on (its kind of drafter; EAGLE's q at T = 1 needs T != 1)
BROKEN_ON = {
    "eagle_rotated_from_zero": ("eagle", "eagle3"),
    "exit_normed_as_gpt2": ("exit_own", "exit_rms"),
    "early_exit_keeps_rejected_kv": ("exit_own", "exit_rms"),
    "heads_judged_with_another_heads_q": ("heads",),
    "eagle_feature_one_position_off": ("eagle", "eagle3"),
    "eagle_q_at_temperature_one": ("eagle",),
    "eagle_keeps_draft_features": ("eagle", "eagle3"),
}


@pytest.mark.parametrize("name", ROW_SETUPS)
def test_the_graded_loops_rows_on_a_llama_are_the_oracles(
    name, oracle_plugins, speculative_impl, verify_impl
):
    setup = ROW_SETUPS[name]
    verify_fn = None
    if "speculative" not in oracle_plugins and "verify" in oracle_plugins:
        verify_fn = as_reference_verify(verify_impl)
    for seed in SEEDS:
        deviation = loop_row_deviation(setup, speculative_impl, seed, verify_fn=verify_fn)
        assert deviation <= ROW_ATOL, (name, seed, deviation)


def test_the_row_setups_reach_the_rounds_that_can_go_wrong():
    """Not vacuous: each setup's runs have rounds after a round that kept drafts and after
    one that rejected some (the catch-ups a cache bug breaks), checked by the trace."""
    for setup in ROW_SETUPS.values():
        kept = rejected = 0
        for seed in SEEDS:
            rng = np.random.default_rng(seed)
            kw = dict(k=setup.k, max_new_tokens=setup.max_new_tokens, sampling=setup.sampling)
            result = speculative_generate(
                setup.target_model(), setup.make_drafter(), list(setup.prompt), rng=rng,
                trace=True, **kw,
            )  # fmt: skip
            for before in result.trace[:-1]:  # rounds with a round after them
                kept += before.accepted > 0
                rejected += before.accepted < len(before.draft_tokens)
        assert kept >= 2 and rejected >= 2, (setup.name, kept, rejected)


@pytest.mark.parametrize(
    ("variant", "setup"),
    [(v, s) for v, setups in BROKEN_ON.items() for s in setups],
)
def test_the_row_check_rejects_broken_self_drafters_on_a_llama(variant, setup):
    """Each broken drafter of broken.LLAMA_DRAFTERS, built from the setup's parts, through
    the reference loop: some row of some run is off by far more than float32 rounding."""
    setup = ROW_SETUPS[setup]
    broken = with_self_drafter(LLAMA_DRAFTERS[variant])

    deviations = []
    for seed in SEEDS:
        deviations.append(loop_row_deviation(setup, broken, seed))
        if deviations[-1] > 0.01:
            break
    assert max(deviations) > 0.01, f"the row check does not see {variant}: {deviations}"


def test_the_row_check_rejects_the_twins_rope_sliced_from_zero(monkeypatch):
    """The row check grades the twin's loop as it does the reference's (`make oracle-gpu`
    passes it as --speculative). The twin's Llama (gpu/llama.py) slices a sequence's RoPE
    rows from its tables at the pass's start; sliced from row 0 instead, every pass after
    the first (the target's verification, EAGLE's draft steps) turns by the wrong angles,
    and the twin's own loop shows it in its rows."""
    gpu = optional.twin()
    right = gpu.llama.Llama.rope_at

    def from_zero(self, at):
        if not gpu.llama.is_sequence(at):
            return right(self, at)
        rows = slice(0, at.shape[0])
        return self.rope_cos[rows][None], self.rope_sin[rows][None]

    monkeypatch.setattr(gpu.llama.Llama, "rope_at", from_zero)
    deviation = loop_row_deviation(ROW_SETUPS["eagle"], gpu.speculative.speculative_generate, 0)
    assert deviation > 0.01, deviation


def test_every_llama_broken_drafter_is_tried():
    assert set(BROKEN_ON) == set(LLAMA_DRAFTERS)


# ---------------------------------------------------------------- EAGLE-2's tree


@dataclass(frozen=True)
class LlamaTreeSetup:
    """proposals.ProposalSetup's fields that proposals_along_rounds reads, for an EAGLE-2
    tree on the Llama target (PROPOSAL_SETUPS' trees are GPT-2's)."""

    sampling: SamplingParams
    drafter: str = "eagle-tree"
    prompt: tuple[int, ...] = (3, 0)
    k: int = 3  # the tree's depth limit
    n: int = 0
    seed: int = 614
    tree_drafter: type = EagleTreeDrafter

    @property
    def parts(self):
        base = ROW_SETUPS["eagle"]
        target, eagle = base.target_model(), base.eagle_params()
        return (
            target,
            lambda: self.tree_drafter(EagleDrafter(target, eagle), *EAGLE2),
            lambda s: Eagle2TreeLaw(
                EagleProposals(target, eagle, AT_ONE, independent_transform), *EAGLE2
            ),
        )

    def at(self, sampling: SamplingParams, n: int) -> LlamaTreeSetup:
        return LlamaTreeSetup(sampling, prompt=self.prompt, k=self.k, n=n, seed=self.seed)


TREE = LlamaTreeSetup(S(0.8))


@pytest.mark.parametrize("backend", ["reference", "gpu"])
def test_eagle2_trees_on_a_llama_are_the_oracles_along_rounds(backend):
    for s in (TREE, greedy(TREE)):
        wrong = proposals_along_rounds(s, backend, rounds=4)
        assert not wrong, f"on {backend} at {s.sampling.describe()}: {wrong[:2]}"


def test_the_tree_check_rejects_nodes_labelled_sampled():
    broken = LlamaTreeSetup(S(0.8), tree_drafter=EagleTreeLabelsChosenAsSampled)
    assert proposals_along_rounds(broken, "reference", rounds=2)


def test_the_tree_check_rejects_nodes_rotated_by_index(monkeypatch):
    """The drafter's tree pass reads a node's position like the target's: by node index
    instead of length + depth, its rows change and so does the tree it grows."""
    monkeypatch.setattr(
        tree_forward_mod, "position_ids", lambda parents, n: n + np.arange(len(parents))
    )
    assert proposals_along_rounds(TREE, "reference", rounds=4)
