"""No hidden host syncs: the twin runs on a strict CuPy-like array and never turns a device
value into a host value outside its one sanctioned transfer.

`counting_transfers()` counts the transfers made through `gpu.device.backend.to_host`; it cannot see
an implicit one -- `int(x)`, `if x:`, `np.asarray(x)`, `x.item()`, `x.tolist()`, a `for`
over x, a boolean-mask index -- each of which, on a GPU, waits for the device. Inside
`counting_launches(strict=True)` the twin's arrays are the stand-in's (gpu/device/counting.py),
which raise HiddenSyncError on every one of them, so each run below fails at the line that
would sync. Covered: the autoregressive loop, the chain loop with every drafter (the draft
model, lookup, hybrid, early exit, extra heads) greedy and sampled, the options that pay for
extra sanctioned transfers (trace, a plug-in verify, min_confidence), the ragged batch, and
the tree loop with every tree drafter and draw rule.

What this proves, and what not: the twin's code has no implicit host conversion on these
paths, and it computes the same tokens on the stand-in as the reference (greedy). It does
not prove that CuPy itself never syncs inside a call (a CuPy 13 sort did; the `gpu` extra
needs CuPy >= 14), nor anything about time on a device.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

import gpu
import gpu.tree as twin_tree
import reference
from gpu.device.backend import counting_launches, counting_transfers, to_device
from gpu.device.counting import DeviceArray, HiddenSyncError, HostArrayError
from reference.sampling import GREEDY, SamplingParams
from reference.tree import POINT, SAMPLED, WITHOUT_REPLACEMENT
from specdec.bundled import SELF_DRAFT_DIR, load_exit_head, load_heads

# short (a long prefill is most of a short run's time), and repeating itself, so that the
# lookup drafters find matches in some rounds and not in others
try:
    from threadpoolctl import threadpool_limits
except ImportError:  # the device's python3 has none (scripts/gpu_preflight.py checks it)
    threadpool_limits = None

PROMPT = np.frombuffer(b"w = a * b\nh = a * b\nd = a * ", np.uint8).astype(np.int64)
SAMPLED_PARAMS = SamplingParams(temperature=0.8, top_k=40, top_p=0.9)
EXIT_LAYER = 2


@pytest.fixture(scope="module", autouse=True)
def one_blas_thread():
    """One BLAS thread: what is tested here does not depend on it, and several threads
    fighting over a busy machine's cores make these small matmuls many times slower."""
    with threadpool_limits(limits=1, user_api="blas") if threadpool_limits else nullcontext():
        yield


@pytest.fixture(scope="module")
def parts():
    return load_exit_head(EXIT_LAYER, SELF_DRAFT_DIR), load_heads(SELF_DRAFT_DIR)


def chain_drafter(name: str, target, draft, parts):
    # the twin's drafter `name`, built from twin models on the stand-in
    exit_head, heads = parts
    lookup = gpu.LookupDrafter(target.n_vocab, target.config.n_ctx, 4, 3, "longest")
    return {
        "model": lambda: gpu.ModelDrafter(draft),
        "lookup": lambda: gpu.LookupDrafter(target.n_vocab, target.config.n_ctx),
        "hybrid": lambda: gpu.HybridDrafter(lookup, gpu.ModelDrafter(draft)),
        "early-exit": lambda: gpu.EarlyExitDrafter(target, EXIT_LAYER, exit_head),
        "early-exit, target's ln_f": lambda: gpu.EarlyExitDrafter(target, EXIT_LAYER + 1),
        "heads": lambda: gpu.HeadsDrafter(target, heads),
        "hybrid, heads": lambda: gpu.HybridDrafter(lookup, gpu.HeadsDrafter(target, heads)),
    }[name]()


CHAIN = ["model", "lookup", "hybrid", "early-exit", "early-exit, target's ln_f", "heads"]
CHAIN += ["hybrid, heads"]


def twins(pair):
    # the bundled pair's twins, made on the stand-in (inside counting_launches)
    target, draft = pair
    return gpu.GPT(target.config, target.params), gpu.GPT(draft.config, draft.params)


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED_PARAMS], ids=["greedy", "sampled"])
@pytest.mark.parametrize("name", CHAIN)
def test_chain_rounds_make_no_hidden_sync(name, sampling, pair, parts):
    """Greedy (one-hot rows), and sampled with top-k and top-p (the sorts and the gathers
    of the filters), with every chain drafter."""
    with counting_launches(strict=True) as log, counting_transfers() as transfers:
        target, draft = twins(pair)
        out = gpu.speculative_generate(
            target,
            chain_drafter(name, target, draft, parts),
            PROMPT,
            k=3,
            max_new_tokens=10,
            rng=np.random.default_rng(0),
            sampling=sampling,
        )
    assert len(out.tokens) == 10 and out.stats.accepted > 0
    assert transfers.count == out.stats.rounds  # the one sanctioned transfer per round
    assert log.count > 0 and not log.hidden_syncs


def test_the_stand_in_computes_the_references_numbers(pair):
    """Greedy on the strict stand-in gives the reference's tokens: the same numbers."""
    kw = dict(max_new_tokens=10, sampling=GREEDY)
    theirs = reference.generate(pair[0], PROMPT, rng=np.random.default_rng(0), **kw)
    with counting_launches(strict=True):
        target, draft = twins(pair)
        ours = gpu.speculative_generate(
            target, gpu.ModelDrafter(draft), PROMPT, k=3, rng=np.random.default_rng(0), **kw
        )
    assert ours.tokens == theirs


def test_the_autoregressive_loop_and_the_paid_options_make_no_hidden_sync(pair):
    """The paid options -- a trace, a plug-in verify, min_confidence -- bring more values
    back, each through to_host; an EOS stop reads the token that the transfer brought."""
    kw = dict(max_new_tokens=8, rng=np.random.default_rng(1), sampling=SAMPLED_PARAMS)
    with counting_launches(strict=True):
        target, draft = twins(pair)
        assert len(gpu.generate(target, PROMPT, eos_id=10, **kw)) <= 8
        for options, drafter in [
            (dict(trace=True), gpu.ModelDrafter(draft)),
            (dict(verify_fn=reference.verify), gpu.ModelDrafter(draft)),
            ({}, gpu.ModelDrafter(draft, min_confidence=0.3)),
        ]:
            out = gpu.speculative_generate(target, drafter, PROMPT, k=3, **kw, **options)
            assert len(out.tokens) == 8


def test_the_batch_makes_no_hidden_sync(pair):
    """Ragged rows (three prompt lengths), sampled, each row with its own drafter; reference
    drafters handed over are swapped for stand-in twins."""
    prompts = [PROMPT, PROMPT[:12], PROMPT[:20]]
    with counting_launches(strict=True), counting_transfers() as transfers:
        results = gpu.speculative_generate_batch(
            pair[0],
            [reference.ModelDrafter(pair[1]) for _ in prompts],
            prompts,
            k=3,
            max_new_tokens=8,
            rng=np.random.default_rng(2),
            sampling=SAMPLED_PARAMS,
        )
    assert [len(r.tokens) for r in results] == [8, 8, 8]
    assert transfers.count == max(r.stats.rounds for r in results)  # one per batched round


TREES = {
    "sampled (2, 2)": lambda target, draft, heads: twin_tree.ModelTreeDrafter(
        draft, (2, 2), SAMPLED
    ),
    "without replacement (3, 1)": lambda target, draft, heads: twin_tree.ModelTreeDrafter(
        draft, (3, 1), WITHOUT_REPLACEMENT
    ),
    "top-b (2, 1, 1)": lambda target, draft, heads: twin_tree.ModelTreeDrafter(
        draft, (2, 1, 1), POINT
    ),
    "heads (3, 2, 1)": lambda target, draft, heads: twin_tree.HeadsTreeDrafter(
        gpu.HeadsDrafter(target, heads), (3, 2, 1), 8
    ),
}


@pytest.mark.parametrize("name", list(TREES))
def test_tree_rounds_make_no_hidden_sync(name, pair, parts):
    with counting_launches(strict=True):
        target, draft = twins(pair)
        out = twin_tree.tree_speculative_generate(
            target,
            TREES[name](target, draft, parts[1]),
            PROMPT,
            max_new_tokens=8,
            rng=np.random.default_rng(3),
            sampling=SamplingParams(temperature=0.9),
        )
    assert len(out.tokens) == 8


CONVERSIONS = {
    "int": lambda x: int(x[0]),
    "float": lambda x: float(x[0]),
    "bool": lambda x: bool(x[0]),
    "if": lambda x: 1 if x[0] > 0 else 0,
    "np.asarray": np.asarray,
    "item": lambda x: x[0].item(),
    "tolist": lambda x: x.tolist(),
    "iteration": list,
    "a Python index": lambda x: [1, 2, 3][x[0]],
    "a format spec": lambda x: f"{x[0]:.2f}",
    "a boolean mask": lambda x: x[x > 1],
    "nonzero": lambda x: gpu.device.backend.xp.nonzero(x),
}


@pytest.mark.parametrize("conversion", list(CONVERSIONS))
def test_every_implicit_host_conversion_raises(conversion):
    with counting_launches(strict=True):
        x = to_device(np.arange(3))
        with pytest.raises(HiddenSyncError, match="host sync"):
            CONVERSIONS[conversion](x)


def test_a_hidden_sync_in_the_loop_is_caught(pair, monkeypatch):
    """The test can fail: the reference's per-token NaN check, put back into the twin's
    draft step (`if not np.all(np.isfinite(logits))`), is a sync per drafted token."""
    from gpu import drafters
    from reference.checks import check_finite

    def step_with_a_check(self, tokens):
        logits = self.model.forward_unchecked(tokens, self.cache)[-1]
        check_finite(logits, "the draft model's logits")
        return logits

    monkeypatch.setattr(drafters.ModelDrafter, "step", step_with_a_check)
    with counting_launches(strict=True), pytest.raises(HiddenSyncError):
        target, draft = twins(pair)
        gpu.speculative_generate(
            target, gpu.ModelDrafter(draft), PROMPT, k=3, max_new_tokens=8,
            rng=np.random.default_rng(0), sampling=GREEDY,
        )  # fmt: skip


def test_a_host_array_in_a_device_operation_is_refused_as_cupy_refuses_it(pair):
    with counting_launches(strict=True):
        x = to_device(np.ones(3, dtype=np.float32))
        assert isinstance(x, DeviceArray)
        with pytest.raises(HostArrayError, match="to_device"):
            x + np.ones(3, dtype=np.float32)
    # a twin made outside holds host arrays (or, on a GPU machine, CuPy's): indexing them
    # with the stand-in's ids, or mixing them with its rows, is refused inside -- a
    # HostArrayError (a TypeError), CuPy's own TypeError, or a HiddenSyncError when NumPy
    # asks the stand-in's index for a host value
    made_outside = gpu.GPT(pair[0].config, pair[0].params)
    with counting_launches(strict=True), pytest.raises((TypeError, HiddenSyncError)):
        gpu.generate(made_outside, PROMPT, max_new_tokens=2, rng=np.random.default_rng(0))
