"""The draft's sampled draw as one compiled call (numba, optional): a draft token at T > 0.

At temperature T the draft draws each token from q = softmax(logits / T). The reference
computes that row and inverts its cumulative sum in about a dozen NumPy calls
(reference.sampling.draw_token), some 28 µs a token on the machine of docs/benchmarks.md:
as much as the bundled draft's compiled step itself, paid k times a round. `sampled_draw`
does the same in one compiled loop over the V logits: the same row (shifted by its largest
logit before the division, divided in float64, exp, normalised) and the same draw, the first
id whose cumulative mass (summed in float64, in id order, as np.cumsum does) exceeds
u x the total, from the one uniform u that `sample_token` spends. The row differs from
NumPy's only by rounding (a vectorised exp within a few ulps, a sum taken in another order),
so the token differs only where u falls within that rounding of a boundary. (One more
difference: the exp stops at exp(-87.3) ~ 1e-38, so an id NumPy gives q = 0, a logit more
than 87 T below the top, gets 1e-38 here; a draw reaches it with that probability.)

`FastModelDrafter` is `reference.drafters.ModelDrafter` with this draw in place of its
`draw`; the fast path's drafter (specdec/drafting.py) where the draft model is a FastGPT.
Greedy rows, top-k and top-p, a float64 model and an install without numba keep the
reference's draw.
"""

from __future__ import annotations

import numpy as np

from reference.drafters import ModelDrafter
from reference.sampling import SamplingParams
from specdec.fast_cpu import compiled, step

try:
    import numba
except ImportError:  # the `fast` extra is not installed: the reference's draw runs
    numba = None


if numba is not None:

    @numba.njit(boundscheck=False, error_model="numpy", cache=True)
    def sampled_draw(logits, temperature, u, out):
        # logits [V] float32, temperature > 0, u in [0, 1), out [V] -> the drawn id;
        # out = q = softmax(logits / T), as probabilities_unchecked makes it
        V = logits.shape[0]
        bits = np.empty(V, np.int32)  # exp_into's scratch
        top = logits[0]
        for v in range(V):
            top = max(top, logits[v])
        for v in range(V):  # z = (logits - max) / T: every z <= 0, so exp cannot overflow
            out[v] = np.float32((logits[v] - top) / temperature)
        step.exp_into(out, out, bits)
        total = np.float32(0.0)
        for v in range(V):
            total += out[v]
        for v in range(V):
            out[v] /= total
        mass = 0.0  # float64, in id order: np.cumsum(q, dtype=np.float64)[-1]
        for v in range(V):
            mass += np.float64(out[v])
        threshold = u * mass  # draw_from_cdf: the first id whose cumulative mass exceeds it
        cumulative = 0.0
        for v in range(V):
            cumulative += np.float64(out[v])
            if cumulative > threshold:
                return v
        return V - 1


def compiled_draw_applies(logits: np.ndarray, sampling: SamplingParams) -> bool:
    # the plain softmax at a temperature, on a float32 row the compiled loop reads
    return (
        compiled.AVAILABLE
        and not sampling.greedy
        and sampling.top_k is None
        and sampling.top_p >= 1.0
        and logits.dtype == np.float32
        and logits.flags.c_contiguous
    )


class FastModelDrafter(ModelDrafter):
    """A ModelDrafter whose sampled draws (T > 0, no top-k or top-p) are one compiled call."""

    library_checked = True  # the same q rows as the reference's, each token drawn from its row

    def draw(
        self, logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator, out
    ) -> int:
        # logits [V], out [V] -> one token, out = q: ModelDrafter.draw's law and uniform
        if not (compiled_draw_applies(logits, sampling) and out.flags.c_contiguous):
            return super().draw(logits, sampling, rng, out)
        u = rng.random()
        temperature = np.float64(sampling.temperature)
        return int(compiled.interruptible(sampled_draw, logits, temperature, u, out))
