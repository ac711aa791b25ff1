"""Every drafter on the twin: greedy runs equal the reference's token for token, and the
transfers per round are counted (a chain round: one, whatever the drafter; a tree round:
one per tree level plus one with the draft model, two with the heads)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu
import gpu.tree as twin_tree
import reference
import reference.tree as ref_tree
from gpu.device.backend import counting_transfers, to_host
from gpu.drafters import as_twin_drafter
from reference import drafters as ref_drafters
from reference.sampling import GREEDY, SamplingParams
from specdec.bundled import SELF_DRAFT_DIR, load_exit_head, load_heads

# code that repeats itself, so that the lookup matches in some rounds and not in others
PROMPT = np.frombuffer(
    b"def area(self):\n    return self.w * self.h\n\n"
    b"def perimeter(self):\n    return 2 * (self.w + self.h)\n\ndef area(self):\n    return ",
    np.uint8,
).astype(np.int64)
EXIT_LAYER = 2
SAMPLED = SamplingParams(temperature=0.8, top_k=40)


@pytest.fixture(scope="module")
def parts():
    """The bundled self-drafting parts: the exit head after block 2 and the extra heads."""
    return load_exit_head(EXIT_LAYER, SELF_DRAFT_DIR), load_heads(SELF_DRAFT_DIR)


@pytest.fixture(scope="module")
def twins(pair):
    target, draft = pair
    return gpu.GPT(target.config, target.params), gpu.GPT(draft.config, draft.params)


def lookup(target) -> reference.LookupDrafter:
    # the lab's hybrid lookup: matches of 3-4 tokens only, so the fallback drafts too
    return reference.LookupDrafter(target.n_vocab, target.config.n_ctx, 4, 3, "longest")


def chain_drafter(name: str, core, target, draft, parts):
    # the drafter `name` of `core` (reference or gpu) for this pair
    exit_head, heads = parts
    if name == "early-exit":
        return core.EarlyExitDrafter(target, EXIT_LAYER, exit_head)
    if name == "early-exit, target's ln_f":
        return core.EarlyExitDrafter(target, EXIT_LAYER + 1)
    if name == "heads":
        return core.HeadsDrafter(target, heads)
    if name == "lookup":
        return core.LookupDrafter(target.n_vocab, target.config.n_ctx)
    fallback = {
        "hybrid, model": lambda: core.ModelDrafter(draft),
        "hybrid, early exit": lambda: core.EarlyExitDrafter(target, EXIT_LAYER, exit_head),
        "hybrid, heads": lambda: core.HeadsDrafter(target, heads),
    }[name]()
    return core.HybridDrafter(lookup(target), fallback)


CHAIN = [
    "early-exit",
    "early-exit, target's ln_f",
    "heads",
    "lookup",
    "hybrid, model",
    "hybrid, early exit",
    "hybrid, heads",
]


@pytest.mark.parametrize("name", CHAIN)
def test_greedy_twin_drafters_equal_the_reference_with_one_transfer_per_round(
    name, pair, twins, parts
):
    """The twin's drafter, and the reference's handed to the twin's loop (swapped for its
    twin), give the reference's tokens and accepted counts; every round one transfer."""
    kw = dict(k=4, max_new_tokens=40, sampling=GREEDY)
    theirs = reference.speculative_generate(
        pair[0], chain_drafter(name, reference, *pair, parts), PROMPT, rng=rng(), **kw
    )
    with counting_transfers() as log:
        ours = gpu.speculative_generate(
            twins[0], chain_drafter(name, gpu, *twins, parts), PROMPT, rng=rng(), **kw
        )
    handed = gpu.speculative_generate(
        pair[0], chain_drafter(name, reference, *pair, parts), PROMPT, rng=rng(), **kw
    )
    assert ours.tokens == theirs.tokens == handed.tokens
    assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round
    assert log.count == ours.stats.rounds
    assert ours.stats.accepted > 0


@pytest.mark.parametrize("name", CHAIN)
def test_sampled_twin_rounds_make_one_transfer_each(name, twins, parts):
    with counting_transfers() as log:
        out = gpu.speculative_generate(
            twins[0],
            chain_drafter(name, gpu, *twins, parts),
            PROMPT,
            k=4,
            max_new_tokens=40,
            rng=rng(3),
            sampling=SAMPLED,
        )
    assert log.count == out.stats.rounds
    assert out.stats.accepted > 0


def test_the_hybrids_rounds_are_drafted_by_both_its_parts(twins, parts):
    """Not vacuous: the hybrid on the twin drafts some rounds on the host (lookup) and some
    on the device (its fallback), and each kind of round makes its one transfer."""
    drafter = chain_drafter("hybrid, heads", gpu, *twins, parts)
    who = []
    real_propose = drafter.propose

    def propose(*args):
        draft = real_propose(*args)
        who.append(type(drafter.proposer).__name__)
        return draft

    drafter.propose = propose
    with counting_transfers() as log:
        out = gpu.speculative_generate(
            twins[0], drafter, PROMPT, k=4, max_new_tokens=40, rng=rng(), sampling=GREEDY
        )
    assert set(who) == {"LookupDrafter", "HeadsDrafter"}
    assert log.count == out.stats.rounds


def test_early_exit_verification_starts_at_the_exit_layer(twins, parts, monkeypatch):
    """The twin's pass runs the drafter's rows through the reference's continue_in (its K/V
    of blocks 0..L'-1 copied, blocks L'.. run) in every round that drafted; the lower blocks
    are the twin target's own arrays."""
    calls = []
    real = ref_drafters.SharedLayers.continue_in
    monkeypatch.setattr(
        ref_drafters.SharedLayers,
        "continue_in",
        lambda self, *a: calls.append(self.n_layer) or real(self, *a),
    )
    drafter = gpu.EarlyExitDrafter(twins[0], EXIT_LAYER, parts[0])
    out = gpu.speculative_generate(
        twins[0], drafter, PROMPT, k=3, max_new_tokens=30, rng=rng(), sampling=SAMPLED
    )
    assert calls == [EXIT_LAYER] * sum(1 for k in out.stats.drafted_per_round if k)
    name = "h.1.attn.c_attn.weight"
    assert drafter.model.params[name] is twins[0].params[name]
    assert drafter.model.config.n_layer == EXIT_LAYER


def test_the_heads_draft_from_the_prefills_state_and_each_rounds(twins, parts):
    """Prefill hands the target's last row over, so round 1 drafts; every later round drafts
    from the row the round handed over (a drafter that missed it would stop drafting)."""
    drafter = gpu.HeadsDrafter(twins[0], parts[1])
    out = gpu.speculative_generate(
        twins[0], drafter, PROMPT, k=4, max_new_tokens=30, rng=rng(), sampling=GREEDY
    )
    rounds = out.stats.drafted_per_round
    assert rounds[0] == drafter.n_heads == 4
    expected = [min(4, 30 - 1 - emitted) for emitted in emitted_before(out)]
    assert rounds == expected


def emitted_before(result) -> list[int]:
    # tokens emitted before each round: what bounds its draft length
    done, out = 0, []
    for accepted in result.stats.accepted_per_round:
        out.append(done)
        done += accepted + 1
    return out


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_broken_draft_is_reported_not_accepted(pair, twins):
    """A draft model with NaN weights: its q rows are NaN, which the twin does not check per
    drafted token; the round's finiteness flag covers q too, so the run fails loudly."""
    _, draft = pair
    params = dict(draft.params)
    params["h.0.mlp.c_fc.bias"] = np.full_like(params["h.0.mlp.c_fc.bias"], np.nan)
    broken = gpu.ModelDrafter(gpu.GPT(draft.config, params))
    with pytest.raises(ValueError, match="logits contains NaN"):
        gpu.speculative_generate(
            twins[0], broken, PROMPT, k=3, max_new_tokens=8, rng=rng(), sampling=SAMPLED
        )


class Repeater(gpu.ModelDrafter):
    """A plug-in built on the twin's drafter that writes its own propose (badly: its token
    has probability 0 under the row it reports)."""

    def propose(self, context, k, sampling, rng):
        draft = super().propose(context, k, sampling, rng)
        q = np.zeros((len(draft.tokens), self.n_vocab), np.float32)
        q[:, 0] = 1.0
        return gpu.Draft(np.full(len(draft.tokens), 7), q)


def test_a_plug_in_on_a_twin_drafter_is_checked_like_the_references(pair, twins):
    with pytest.raises(ValueError, match="probability 0"):
        gpu.speculative_generate(
            twins[0], Repeater(twins[1]), PROMPT, k=3, max_new_tokens=8, rng=rng()
        )


def test_every_reference_drafter_has_a_twin(pair, parts):
    """What the oracle hands the twin: each reference drafter becomes the twin's own, once;
    host drafters and plug-in subclasses stay as they are."""
    target, draft = pair
    exit_head, heads = parts
    heads_ref = reference.HeadsDrafter(target, heads)
    cases = {
        reference.ModelDrafter(draft): gpu.ModelDrafter,
        reference.EarlyExitDrafter(target, EXIT_LAYER, exit_head): gpu.EarlyExitDrafter,
        heads_ref: gpu.HeadsDrafter,
        ref_tree.ModelTreeDrafter(draft, (2, 1)): twin_tree.ModelTreeDrafter,
        ref_tree.HeadsTreeDrafter(heads_ref, (2, 1)): twin_tree.HeadsTreeDrafter,
    }
    for drafter, twin_type in cases.items():
        twin = as_twin_drafter(drafter)
        assert type(twin) is twin_type and as_twin_drafter(drafter) is twin
    hybrid = as_twin_drafter(reference.HybridDrafter(lookup(target), heads_ref))
    assert type(hybrid.fallback) is gpu.HeadsDrafter
    assert hybrid.fallback is as_twin_drafter(heads_ref)
    ready = reference.HybridDrafter(lookup(target), gpu.HeadsDrafter(target, heads))
    assert as_twin_drafter(ready) is ready  # its fallback is the twin's already
    plain = reference.LookupDrafter(target.n_vocab, target.config.n_ctx)

    class Mine(reference.ModelDrafter):
        pass

    for kept in (plain, Mine(draft)):
        assert as_twin_drafter(kept) is kept


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------- trees


def tree_drafter(name: str, core_tree, heads_core, target, draft, parts):
    if name == "heads (3, 2, 2, 1), 10 nodes":
        return core_tree.HeadsTreeDrafter(
            heads_core.HeadsDrafter(target, parts[1]), (3, 2, 2, 1), 10
        )
    widths, draw = {
        "top-b (2, 1, 1, 1)": ((2, 1, 1, 1), ref_tree.POINT),
        "sampled (2, 2)": ((2, 2), ref_tree.SAMPLED),
        "without replacement (3, 1)": ((3, 1), ref_tree.WITHOUT_REPLACEMENT),
    }[name]
    return core_tree.ModelTreeDrafter(draft, widths, draw)


TREES = [
    "top-b (2, 1, 1, 1)",
    "sampled (2, 2)",
    "without replacement (3, 1)",
    "heads (3, 2, 2, 1), 10 nodes",
]


def tree_transfers(name: str, result) -> int:
    # a tree round: one transfer per level the draft model drafted (the tree's depth), or
    # one for the heads' favourites when there was anything to draft; plus the walk's one
    drafted = result.stats.drafted_per_round
    if name.startswith("heads"):
        return result.stats.rounds + sum(1 for depth in drafted if depth)
    return result.stats.rounds + sum(drafted)


@pytest.mark.parametrize("name", TREES)
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_twin_trees_equal_the_reference_and_count_their_transfers(
    name, sampling, pair, twins, parts
):
    """Greedy: the reference's tokens and accepted paths. Sampled too, except without
    replacement: the twin draws each level's uniforms in the reference's order, but draws b
    per parent even when q's support runs out (the reference stops), so there it is the same
    law (the oracle's), not the same stream."""
    kw = dict(max_new_tokens=24, sampling=sampling)
    theirs = ref_tree.tree_speculative_generate(
        pair[0], tree_drafter(name, ref_tree, reference, *pair, parts), PROMPT, rng=rng(), **kw
    )
    with counting_transfers() as log:
        ours = twin_tree.tree_speculative_generate(
            twins[0], tree_drafter(name, twin_tree, gpu, *twins, parts), PROMPT, rng=rng(), **kw
        )
    handed = twin_tree.tree_speculative_generate(
        pair[0], tree_drafter(name, ref_tree, reference, *pair, parts), PROMPT, rng=rng(), **kw
    )
    assert ours.tokens == handed.tokens
    if sampling.greedy or "without" not in name:
        assert ours.tokens == theirs.tokens
        assert ours.stats.accepted_per_round == theirs.stats.accepted_per_round
    assert log.count == tree_transfers(name, ours)
    assert ours.stats.accepted > 0


def test_a_twin_tree_trace_costs_no_transfer_and_equals_the_references(pair, twins):
    """The round keeps its host copy of p (the walk's), so the trace copies nothing more."""
    name = "top-b (2, 1, 1, 1)"
    kw = dict(max_new_tokens=24, sampling=SAMPLED)
    counts, traces = [], []
    for trace in (False, True):
        with counting_transfers() as log:
            out = twin_tree.tree_speculative_generate(
                twins[0],
                tree_drafter(name, twin_tree, gpu, *twins, None),
                PROMPT,
                rng=rng(),
                trace=trace,
                **kw,
            )
        counts.append(log.count)
        traces.append(out.trace)
    theirs = ref_tree.tree_speculative_generate(
        pair[0],
        tree_drafter(name, ref_tree, reference, *pair, None),
        PROMPT,
        rng=rng(),
        trace=True,
        **kw,
    )
    assert counts[0] == counts[1]
    assert len(traces[1]) == len(theirs.trace)
    for ours, ref in zip(traces[1], theirs.trace, strict=True):
        assert list(ours.draft_tokens) == list(ref.draft_tokens) and ours.emitted == ref.emitted
        np.testing.assert_allclose(ours.p_rows, ref.p_rows, atol=1e-5)


def test_compaction_on_the_device_cache_equals_the_references(pair, twins):
    """The twin's compact gathers on the device what the reference's gathers on the host."""
    target, _ = pair
    theirs, ours = target.new_cache(), twins[0].new_cache()
    tokens = np.arange(1, 9)
    target.forward(tokens, theirs)
    twins[0].forward(tokens, ours)
    for cache in (theirs, ours):
        cache.commit(2)
    ref_tree.compact(theirs, [0, 2, 5])
    twin_tree.compact(ours, [0, 2, 5])
    for a, b in ((theirs.k, ours.k), (theirs.v, ours.v)):
        np.testing.assert_allclose(to_host(b)[:, :, :5], a[:, :, :5], atol=1e-5)
    with pytest.raises(ValueError, match="increasing indices of the 6 temporary slots"):
        twin_tree.compact(ours, [2, 1])
