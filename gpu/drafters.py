"""The twin's draft model: k proposals without asking the host anything.

What differs from reference/drafters.py, and why: in the reference each drafted token is a
Python int, sampled on the host and fed back as the next input. Here it stays a device
scalar: the k uniforms are drawn from the numpy Generator in one call and copied over, each
token is `inverse_cdf(q_i, u_i)` on the device and goes straight into the next forward call,
and the proposal comes back as device arrays (tokens [k], q [k, V]), each q row and its
token written in place by one fused launch (gpu/sampling.py `pick`). The host only moves the
cache pointers, which it knows without looking (it fed them). Stopping a round early
(`min_confidence`) needs the draft's confidence on the host, so it costs one transfer per
drafted token: the twin keeps the option for parity, and the bench does not use it on a GPU.
Where every launch of a step is a fused kernel, the steps after a round's first are one CUDA
graph, captured once and replayed each round after one copy of their cache slots
(`propose_by_graph`, gpu/device/graphs.py): the proposal is then the graph's own buffers.
The protocol (`Drafter`, `Draft`) and the cache discipline are the reference's.
`as_twin_drafter` maps each of the reference's drafters to its twin, so the twin's loops
(and the oracle, which builds reference drafters) can be handed either; each twin registers
itself where it is defined (`register_twin`), so no module here imports the others.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from gpu.device.backend import copy_into, memory_kind, to_device, to_host, xp
from gpu.device.fused import pick_fits
from gpu.device.graphs import StepGraph, graphs_on, slot_from
from gpu.device.kernels import MAX_HS, MAX_S
from gpu.model import GPT, as_twin_model
from gpu.sampling import pick
from reference import drafters as reference_drafters
from reference.checks import as_token_array, check_generator, check_positive_int
from reference.drafters import Draft, Drafter
from reference.kv_cache import catch_up_tokens
from reference.lookup import HybridDrafter
from reference.sampling import SamplingParams, check_sampling

__all__ = ["Draft", "Drafter", "ModelDrafter", "as_twin_drafter", "register_twin"]


class ModelDrafter(reference_drafters.ModelDrafter):
    """An independent draft GPT on the device, with its own device KV cache."""

    library_checked = True  # q rows from `probabilities`, each token drawn from its row

    def __init__(self, model: GPT, min_confidence: float | None = None) -> None:
        model = as_twin_model(model)  # a reference model: its weights are copied over once
        super().__init__(model, min_confidence)

    def propose(self, context, k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        # context [n] (host) -> Draft(tokens [k], q [k, V]) on the device
        context = as_token_array(context, self.n_vocab, "context")
        k = check_positive_int(k, "k", minimum=0)
        check_sampling(sampling)
        check_generator(rng)
        if k > 0:
            self.check_room(len(context), k)
        self.cache.rollback()
        self._fed_context = self._fed_drafts = 0
        if k == 0:
            return Draft(xp.zeros(0, dtype=np.int64), xp.zeros((0, self.n_vocab), np.float32))
        if self.by_graph(k, sampling):  # the steps after the first: one graph launch
            return self.propose_by_graph(context, k, sampling, rng)
        u = to_device(rng.random(k))  # one host draw per round, copied over once
        new = catch_up_tokens(self.cache, context)
        logits = self.step(new)  # [V]: q_1(. | context)
        self._fed_context = len(new)
        q = xp.empty((k, self.n_vocab), dtype=np.float32)  # filled row by row
        tokens = xp.empty(k, dtype=np.int64)
        drafted = 0
        for i in range(k):
            if i > 0 and self.unsure(logits):
                break  # a shorter round (one transfer per step to know it)
            # q_i and x_i ~ q_i written in place, one launch (gpu/sampling.py `pick`)
            pick(logits.reshape(1, -1), sampling, u[i : i + 1], probs=q[i : i + 1],
                 tokens=tokens[i : i + 1])  # fmt: skip
            drafted += 1
            if i < k - 1:
                logits = self.step(tokens[i : i + 1])
                self._fed_drafts += 1
        return Draft(tokens[:drafted], q[:drafted])

    def by_graph(self, k: int, sampling: SamplingParams) -> bool:
        # True when this round's steps 2..k can be one captured graph (gpu/device/graphs.py):
        # graphs on, every launch of a step a fused kernel (the draw's too; the attention's
        # for every slot the cache has), no early stop (a sync per step), the library's step
        cfg = self.model.config
        return (
            k > 1
            and graphs_on()
            and self.min_confidence is None
            and type(self).step is ModelDrafter.step
            and self.model.fused_steps  # a twin Llama's step runs bodies: no graph holds it
            and pick_fits(sampling)
            and self.cache.capacity <= MAX_S
            and cfg.n_embd // cfg.n_head <= MAX_HS
        )

    def propose_by_graph(self, context, k: int, sampling: SamplingParams, rng) -> Draft:
        # context [n] (host) -> Draft(tokens [k], q [k, V]): the first step as `propose`'s (its
        # 1 or 2 catch-up tokens), then steps 2..k replayed from this (k, sampling)'s graph.
        # The draft's arrays are the graph's buffers: valid until the next round overwrites them
        graph = self.draft_graph(k, sampling)
        copy_into(graph.u, rng.random(k))  # one host draw per round, copied over once
        new = catch_up_tokens(self.cache, context)
        logits = self.step(new)  # [V]: q_1(. | context)
        self._fed_context = len(new)
        pick(logits.reshape(1, -1), sampling, graph.u[0:1], probs=graph.q[0:1],
             tokens=graph.tokens[0:1])  # fmt: skip
        captured = graph.steps.run is not None or graph.steps.capture(
            lambda: self.graph_steps(graph, k, sampling)
        )  # captured once, at its first round
        if not captured:  # the device refused it (graphs off from now on): one by one
            self.draft_steps(graph, k, sampling, None)
        else:
            graph.steps.replay(self.cache.end + np.arange(k - 1))  # step i's slot, i = 2..k
            self.cache.mark_written(k - 1)  # the pointer moves the graph's writes: the host's
        self._fed_drafts = k - 1
        return Draft(graph.tokens, graph.q)

    def draft_graph(self, k: int, sampling: SamplingParams) -> DraftGraph:
        # this (k, sampling)'s graph and buffers, made once for this drafter's cache
        if getattr(self, "_graph_cache", None) is not self.cache:  # the first, or a new cache:
            self._graphs, self._graph_cache = {}, self.cache  # (old graphs wrote the old one)
        if (k, sampling) not in self._graphs:
            self._graphs[k, sampling] = DraftGraph(k, self.n_vocab)
        return self._graphs[k, sampling]

    def graph_steps(self, graph: DraftGraph, k: int, sampling: SamplingParams) -> None:
        # what the graph holds: steps 2..k, each reading its slot from the graph's device
        # array; the cache's pointers left as found (the host moves them after each replay)
        pending = self.cache.pending
        try:
            self.draft_steps(graph, k, sampling, graph.steps.args)
        finally:
            self.cache.pending = pending

    def draft_steps(self, graph: DraftGraph, k: int, sampling: SamplingParams, slots) -> None:
        # steps 2..k: step i forwards token i - 1 and draws token i into row i of the buffers;
        # slots [k - 1] (device): step i's first slot read from slots[i - 1] (a graph's), or
        # None: from the host's placement, as any step
        for i in range(1, k):
            with slot_from(None if slots is None else slots[i - 1 : i]):
                logits = self.step(graph.tokens[i - 1 : i])
            pick(logits.reshape(1, -1), sampling, graph.u[i : i + 1], probs=graph.q[i : i + 1],
                 tokens=graph.tokens[i : i + 1])  # fmt: skip

    def step(self, tokens):
        # tokens [T] (host, or a device id) -> logits [V] on the device after the last one;
        # their K/V stay in the draft's cache (an early-exit drafter reads its exit here)
        return self.model.forward_unchecked(tokens, self.cache)[-1]

    def unsure(self, logits) -> bool:
        if self.min_confidence is None:
            return False
        top = 1.0 / float(to_host(xp.exp(logits - logits.max()).sum()))
        return top < self.min_confidence


class DraftGraph:
    """A round's drafting buffers, allocated once, and the graph of its steps 2..k.

    u [k] the round's uniforms, q [k, V] and tokens [k] the proposal, written in place by
    every round; steps: the captured graph (gpu/device/graphs.py), args [k - 1] the slots."""

    def __init__(self, k: int, n_vocab: int) -> None:
        self.u = xp.zeros(k, dtype=np.float64)
        self.q = xp.zeros((k, n_vocab), dtype=np.float32)
        self.tokens = xp.zeros(k, dtype=np.int64)
        self.steps = StepGraph(k - 1)


# reference drafter class -> how to build its twin. Each twin's module registers its own
# (`register_twin`, at its import: gpu/__init__ imports them all), so this module imports no
# twin of another drafter and the twins may import it
TWIN_MAKERS: dict[type, Callable] = {}


def register_twin(reference_type: type, make: Callable) -> None:
    """`make(drafter)` builds the twin of a reference drafter of exactly `reference_type`."""
    TWIN_MAKERS[reference_type] = make


def as_twin_drafter(drafter):
    """The twin of a reference drafter -- ModelDrafter, EarlyExitDrafter, HeadsDrafter, a
    HybridDrafter (its fallback's twin), ModelTreeDrafter, HeadsTreeDrafter -- built once and
    remembered; any other drafter as it is: the twin's own, or one used on the host (a
    LookupDrafter, a plug-in, a subclass: its exact type decides, so a subclass that
    changes how it drafts is never swapped for the library's twin)."""
    make = TWIN_MAKERS.get(type(drafter))
    if make is None:
        return drafter
    if isinstance(drafter, HybridDrafter) and as_twin_drafter(drafter.fallback) is drafter.fallback:
        return drafter  # its parts are already the twin's, or host drafters: kept as it is
    twins = _twin_drafters.setdefault(drafter, {})  # its state is reset by every run's prefill
    if memory_kind() not in twins:
        twins[memory_kind()] = make(drafter)
    return twins[memory_kind()]


# reference drafter -> {memory kind: its twin} (gpu.device.backend.memory_kind); weak keys,
# so a twin lives as long as its drafter
_twin_drafters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

register_twin(reference_drafters.ModelDrafter, lambda d: ModelDrafter(d.model, d.min_confidence))
register_twin(HybridDrafter, lambda d: HybridDrafter(d.lookup, as_twin_drafter(d.fallback)))
