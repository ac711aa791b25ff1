# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Accept or reject: the rule that keeps the target's distribution
#
# *Article §4. Code: `reference/verification.py` (`verify`, `verify_law`,
# `acceptance_probability`, `residual_distribution`), `reference/sampling.py`.
# Tests: `tests/unit/test_verify.py`, `pytest -m distribution` (notebook 09).*
#
# A draft token x, drawn from q, is kept with probability
#
# a(x) = min(1, p(x) / q(x)).
#
# At the first rejection, the replacement is drawn from the **residual**
#
# r(y) = max(0, p(y) − q(y)) / Σ_z max(0, p(z) − q(z)),
#
# and the round ends. If all k drafts survive, one more token comes from the bonus row
# p_{k+1}. This is the rule of [Leviathan et al., 2023](../docs/references.md#leviathan2023),
# found at the same time by [Chen et al., 2023](../docs/references.md#chen2023), who call it
# modified rejection sampling. Notation follows Leviathan et al.: **p is the target, q the
# draft** (Chen et al. and several code bases swap the letters — see `docs/notation.md`).
#
# The claim: whatever q is, the emitted token follows p exactly. Not "approximately", and
# not because the accepted tokens alone follow p — the accepted mass and the corrected mass
# together add up to p.

# %%
import os
import tempfile
from pathlib import Path

import numpy as np
from IPython.display import Image, display
from scipy import stats

from reference import (
    ModelDrafter,
    SamplingParams,
    acceptance_probability,
    generate,
    probabilities,
    residual_distribution,
    sample_token,
    speculative_generate,
    verify,
)
from reference.sampling import GREEDY, one_hot
from reference.tokenizer import EOS, decode, encode
from reference.verification import verify_law
from specdec.bundled import bundled_pair_available, load_bundled_pair
from specdec.figures import plot_acceptance_example, plot_law_comparison
from specdec.machine import describe_machine, use_blas_threads
from specdec.oracle.laws import (
    TableRows,
    marginal,
    max_abs_difference,
    round_law,
    speculative_law,
    target_law,
)
from specdec.report import quoted
from specdec.standins import random_pair

use_blas_threads()  # the same BLAS threads in JupyterLab as in render.py (specdec/machine.py)
print(describe_machine().line())
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
target, draft = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)

# %% [markdown]
# ## 1. The A/B example, by hand
#
# Two tokens. The draft likes A too much: q = (0.8, 0.2); the target wants p = (0.6, 0.4).

# %%
labels = ["A", "B"]
q = np.array([0.8, 0.2])
p = np.array([0.6, 0.4])
accept = np.array([acceptance_probability(p[i], q[i]) for i in range(2)])
accepted_mass = q * accept  # P(draft proposes y and it is kept)
p_reject = 1.0 - accepted_mass.sum()
residual = residual_distribution(p, q)
output = accepted_mass + p_reject * residual

print("token   q     p     a=min(1,p/q)   kept mass q·a   residual r   output")
for i, name in enumerate(labels):
    print(f"  {name}   {q[i]:.2f}  {p[i]:.2f}      {accept[i]:.2f}            "
          f"{accepted_mass[i]:.2f}          {residual[i]:.2f}       {output[i]:.2f}")
print(f"acceptance rate Σ min(p, q) = {accepted_mass.sum():.2f};  P(reject) = {p_reject:.2f}, "
      "and all of that mass goes to B")
# the numbers the next paragraph states
np.testing.assert_allclose(accept, [0.75, 1.0], err_msg="a = min(1, p/q) should be (0.75, 1)")
np.testing.assert_allclose(accepted_mass, [0.6, 0.2], err_msg="kept mass should be (0.6, 0.2)")
np.testing.assert_allclose(residual, [0.0, 1.0], err_msg="the residual should be all on B")
np.testing.assert_allclose(output, p, err_msg="the output law should be p = (0.6, 0.4)")

# %% [markdown]
# A is proposed 80 % of the time but kept only 75 % of those times: 0.6. B is always kept:
# 0.2. The 0.2 of rejections all turn into B, because the residual max(0, p − q) = (0, 0.2)
# has no room left on A. Output: A 0.6, B 0.4 — exactly p.
#
# ## 2. The same example, sampled with `verify`
#
# `verify(p_target [k+1, V], q_draft [k, V], draft_tokens [k], rng)` is the project's one
# implementation of the rule. Here k = 1: row 0 of p judges the draft, row 1 is the bonus
# row (its values do not matter for the first token). The first emitted token is the draft
# if it was accepted, otherwise the residual sample.

# %%
P = np.array([[0.6, 0.4], [0.5, 0.5]])  # [k+1, V]
Q = np.array([[0.8, 0.2]])  # [k, V]
rng = np.random.default_rng(1)
n = 20_000
first = np.zeros(2, dtype=np.int64)
n_accepted = 0
for _ in range(n):
    x = sample_token(Q[0], rng)  # the draft proposes x ~ q
    v = verify(P, Q, [x], rng)
    first[x if v.accepted == 1 else v.token] += 1
    n_accepted += v.accepted
freq = first / n
chi2 = stats.chisquare(first, n * p)
binom = stats.binomtest(n_accepted, n, 0.8)
print(f"{n} runs: A {freq[0]:.4f}, B {freq[1]:.4f}   (target 0.6, 0.4);  "
      f"chi-square p-value {chi2.pvalue:.3f}")
print(f"acceptance rate {n_accepted / n:.4f} (exact 0.8);  binomial p-value {binom.pvalue:.3f}")

# %% [markdown]
# (Under a correct sampler the chi-square p-value is uniform between 0 and 1: one seed in a
# hundred gives p < 0.01 by chance. The oracle therefore fixes its seeds, sizes its samples
# for power and corrects for the number of tests — notebook 09.)

# %%
path = plot_acceptance_example(p, q, FIGURES / "ab_example.png", labels=labels, sampled=freq,
                               n_samples=n)
display(Image(filename=str(path)))

# %% [markdown]
# ### Why it is exact
#
# The picture is one case of a three-line argument that holds for every p and q over the same
# tokens: the proof both papers give, in our words. Write the draft's proposal as x ~ q and
# let y be the token that comes out.
#
# 1. **A rejection happens with probability Z = Σ max(0, p − q).** The draft proposes x with
#    probability q(x) and keeps it with min(1, p(x)/q(x)), so x is proposed *and kept* with
#    probability q(x) · min(1, p(x)/q(x)) = min(p(x), q(x)) (also when q(x) = 0: never
#    proposed, nothing kept). Summing, P(reject) = 1 − Σ min(p, q). Because Σ p = 1, that is
#    Σ (p − min(p, q)) = Σ max(0, p − q): the very sum that normalises the residual.
# 2. **Two ways to emit y.** As a kept draft, with probability min(p(y), q(y)); or after a
#    rejection, from the residual: Z · max(0, p(y) − q(y)) / Z = max(0, p(y) − q(y)).
# 3. **They add up to p.** min(a, b) + max(0, a − b) = a for any numbers a, b: if a ≤ b
#    the two terms are a and 0, otherwise b and a − b. So P(y) = p(y).
#
# When p = q, Z = 0: nothing is ever rejected and the residual is never needed. On the A/B
# example: kept mass (0.6, 0.2), Z = 0.2 = max(0, 0.6 − 0.8) + max(0, 0.4 − 0.2), residual
# (0, 1), output (0.6, 0.2) + 0.2 · (0, 1) = (0.6, 0.4).
#
# The same three quantities computed with the project's own `acceptance_probability` and
# `residual_distribution`, on the A/B example and on 2 000 random pairs (random vocabulary
# sizes, some tokens with q = 0 and some with p = 0, a few pairs with p = q):

# %%
def proof_terms(p, q):
    # p [V], q [V] (float64) -> (kept mass [V], P(reject), output law [V]), term by term
    kept = np.array([q[x] * acceptance_probability(p[x], q[x]) if q[x] > 0 else 0.0
                     for x in range(len(p))])
    z = 1.0 - kept.sum()
    return kept, z, kept + z * residual_distribution(p, q)


def random_distribution(V, rng):
    d = rng.dirichlet(np.full(V, 0.5))
    d[rng.random(V) < 0.25] = 0.0  # tokens one side never gives (top-k, a point mass, ...)
    if d.sum() == 0:
        d[rng.integers(V)] = 1.0
    return d / d.sum()


rng = np.random.default_rng(5)
pairs = [(p, q)]  # the A/B example first
for trial in range(2_000):
    V = int(rng.integers(2, 40))
    p_r = random_distribution(V, rng)
    pairs.append((p_r, p_r.copy() if trial % 100 == 0 else random_distribution(V, rng)))
worst = {"kept - min(p, q)": 0.0, "Z - Σ max(0, p - q)": 0.0, "output - p": 0.0}
for p_r, q_r in pairs:
    kept, z, out = proof_terms(p_r, q_r)
    worst["kept - min(p, q)"] = max(worst["kept - min(p, q)"],
                                    np.abs(kept - np.minimum(p_r, q_r)).max())
    worst["Z - Σ max(0, p - q)"] = max(worst["Z - Σ max(0, p - q)"],
                                       abs(z - np.maximum(p_r - q_r, 0).sum()))
    worst["output - p"] = max(worst["output - p"], np.abs(out - p_r).max())
kept, z, out = proof_terms(p, q)
print(f"A/B: kept {kept}, P(reject) Z = {z:.2f}, output {out}")
print(f"{len(pairs)} pairs, largest |difference| (float64 rounding only):")
for name, value in worst.items():
    print(f"    {name:22s} {value:.1e}")
for name, value in worst.items():  # each line of the proof, to float64 rounding
    assert value < 1e-12, f"{name}: expected 0 to float64 rounding, got {value:.1e}"

# %% [markdown]
# Samples fluctuate; the **exact law** does not. `verify_law(p_target, q_draft, drafts)`
# propagates probability through the same rule in float64 and returns
# {(accepted, token): probability}. Averaging over the draft x ~ q gives the law of the first
# emitted token, with zero variance. The oracle's exact-law tests do exactly this.

# %%
def first_token_law(p_row, q_judged, q_sampled):
    """Law of the first emitted token when x ~ q_sampled but verify is handed q_judged."""
    rows = np.stack([p_row, p_row])  # the bonus row is irrelevant to the first token
    law = np.zeros(len(p_row))
    for x in np.flatnonzero(q_sampled > 0):
        for (accepted, y), mass in verify_law(rows, q_judged[None, :], [x]).items():
            law[x if accepted == 1 else y] += q_sampled[x] * mass
    return law


print("exact law of the first token:", first_token_law(p, q, q), " target:", p)

# %% [markdown]
# ### From one token to the whole round
#
# The three lines above are about one position, the step both papers prove. A round emits
# up to k + 1 tokens, and the claim is about all of them together; this section writes that
# step out and then checks it exactly (the same step in the docs:
# ["Why the output follows p exactly"](../docs/algorithm.md#why-the-output-follows-p-exactly)).
# Write c for the context, x_1 … x_k for the drafts (x_i ~ q(· | c, x_<i)) and y_1, y_2, …
# for the tokens the round emits. The step from one position to the next rests on two facts
# about the loop:
#
# * **The rows of position i are computed on the prefix that was accepted.** The round only
#   reaches position i if y_1 … y_{i−1} were all accepted drafts, so y_<i = x_<i. The draft
#   x_i was drawn from q(· | c, y_<i), verification's row i is the target's p(· | c, y_<i),
#   and position i's accept test uses a fresh uniform. Given y_<i, position i is therefore
#   the single-token case again, with p and q replaced by these two rows: by the argument
#   above, P(y_i = y | y_<i, the round reached i) = p(y | c, y_<i).
# * **The round stops right after a token that is exact on its own.** After a rejection the
#   round emits the residual's token and ends: the drafts after it (and every row computed
#   on them) are thrown away. If all k drafts survive, y_{k+1} is drawn straight from the
#   bonus row p(· | c, x_1 … x_k). The next round starts from c, y_1 … y_M with fresh rows.
#
# So, given the tokens so far, the next token follows the target's row on them whichever way
# it comes out — an accepted draft, the residual, the bonus, or the first token of the next
# round — and multiplying those conditionals over positions (induction on n):
#
# P(the first n emitted tokens are y_1 … y_n) = Π_{i=1..n} p(y_i | c, y_<i),
#
# the target's own autoregressive law. Both facts matter: a draft row or a target row
# computed on another prefix breaks the conditional at that position, and so does any use of
# a thrown-away draft.
#
# **Checked exactly, on a whole round.** `specdec.oracle.laws` enumerates every outcome of a
# round: `round_law` runs through every draft sequence with its q probability and every
# verdict with `verify_law`'s probability, and returns {(accepted, emitted tokens):
# probability}. Its rows come from two "table models" over 4 tokens whose rows depend on the
# whole prefix (some tokens impossible, some rows one-hot, p = q at some prefixes). A round
# emits a variable number of tokens, so to compare with the target we let the target itself
# continue each outcome to k + 1 = 4 tokens (`target_law` from the round's last token); if
# the round is exact, that is the target's law of 4 tokens. Then the whole procedure
# (`speculative_law`, rounds chained as the loop chains them, k = 2, 6 tokens) against the
# target's law of 6 tokens. As a control, the same round with the bonus drawn from the row
# one position too early — a row on the wrong prefix — must fail.

# %%
V_TABLE, K_ROUND = 4, 3
p_table = TableRows(V_TABLE, seed=11)  # the target: one random row per prefix
q_table = TableRows(V_TABLE, seed=12, copy=p_table, copy_frac=0.2)  # the drafter
start = (1, 2)  # the context c


def round_then_target(law_fn=verify_law):
    # one round's exact law, each outcome continued by the target to K_ROUND + 1 tokens
    law = {}
    for (_, emitted), w in round_law(p_table, q_table, start, K_ROUND, law_fn=law_fn).items():
        rest = target_law(p_table, start + emitted, max_new_tokens=K_ROUND + 1 - len(emitted))
        for tail, w_tail in rest.items():
            law[emitted + tail] = law.get(emitted + tail, 0.0) + w * w_tail
    return law


def stale_bonus(p_target, q_draft, drafts):  # the control: bonus row = the last draft's row
    rows = np.vstack([p_target[:-1], p_target[-2:-1]]) if len(drafts) else p_target
    return verify_law(rows, q_draft, drafts)


one_round = round_law(p_table, q_table, start, K_ROUND)
tokens_law = marginal(one_round, lambda o: len(o[1]))
print(f"one round, k = {K_ROUND}: {len(one_round)} outcomes (accepted, emitted tokens), "
      f"total probability {sum(one_round.values()):.15f}")
print("P(round emits m tokens):", {m: round(float(w), 4) for m, w in sorted(tokens_law.items())})
target_4 = target_law(p_table, start, max_new_tokens=K_ROUND + 1)
diff_round = max_abs_difference(round_then_target(), target_4)
diff_stale = max_abs_difference(round_then_target(stale_bonus), target_4)
print(f"round + target vs target, {len(target_4)} sequences of {K_ROUND + 1} tokens: "
      f"max |difference| {diff_round:.1e}")
print(f"control, bonus row on the wrong prefix:            max |difference| {diff_stale:.1e}")
chained = marginal(speculative_law(p_table, q_table, start, k=2, max_new_tokens=6),
                   lambda o: o[0])  # {(tokens, accepted per round): w} -> {tokens: w}
target_6 = target_law(p_table, start, max_new_tokens=6)
diff_chained = max_abs_difference(chained, target_6)
print(f"rounds chained (k = 2) vs target, {len(target_6)} sequences of 6 tokens: "
      f"max |difference| {diff_chained:.1e}")
assert diff_round < 1e-12 and diff_chained < 1e-12, (
    f"expected the target's law to float64 rounding, got {diff_round:.1e}, {diff_chained:.1e}")
assert diff_stale > 1e-3, f"expected the wrong-prefix control to fail, got {diff_stale:.1e}"

# %% [markdown]
# ## 3. Greedy decoding is the same rule with one-hot rows
#
# At temperature 0, `probabilities` returns one-hot rows. Then min(1, p(x)/q(x)) is 1 when the
# target's argmax equals the draft and 0 otherwise, and the residual max(0, p − q) is the
# target's own argmax. The rule reads: *accept while the argmax agrees; at the first
# disagreement, take the target's choice.* No separate greedy code path exists — we check
# that on a real greedy run, round by round, and against plain greedy decoding.

# %%
prompt = encode("    for i, line in enumerate(lines):\n        if ")
spec = speculative_generate(target, ModelDrafter(draft), prompt, k=4, max_new_tokens=48,
                            rng=np.random.default_rng(0), sampling=GREEDY, eos_id=EOS,
                            trace=True)
for r in spec.trace:
    agree = r.p_rows[: len(r.draft_tokens)].argmax(axis=1) == r.draft_tokens
    leading = int(np.argmin(agree)) if not agree.all() else len(agree)
    assert r.accepted == leading and r.token == int(r.p_rows[r.accepted].argmax()), (
        f"expected {leading} accepted and argmax {int(r.p_rows[leading].argmax())}, "
        f"got {r.accepted} accepted and token {r.token}")
plain = generate(target, prompt, max_new_tokens=48, rng=np.random.default_rng(0),
                 sampling=GREEDY, eos_id=EOS)
print(f"{spec.stats.rounds} rounds: every verdict = 'accept while argmax(p) == draft', "
      "every new token = argmax of its row")
print("speculative greedy output == plain greedy output:", spec.tokens == plain)
assert spec.tokens == plain, "expected speculative greedy to write plain greedy's tokens"
print(repr(decode(prompt) + decode(spec.tokens)))

# %% [markdown]
# ## 4. A point-mass draft (n-gram, prompt lookup) against a sampling target
#
# A drafter that proposes without a distribution — copy the next token of an earlier match in
# the prompt, say, as [prompt lookup decoding](../docs/references.md#promptlookup2023)
# does — has q = one-hot(x). Then a(x) = min(1, p(x)/1) = p(x), and after a
# rejection the residual is p with x removed and renormalised. Still exactly p:

# %%
context = encode("    for i in range(len(")
p_row = probabilities(target.forward(context)[-1].astype(np.float64), SamplingParams(1.0))
x = int(np.argsort(-p_row)[1])  # a plausible guess, but not the target's favourite
q_point = one_hot(np.array(x), len(p_row), np.float64)
law = first_token_law(p_row, q_point, q_point)
print(f"point-mass draft {quoted(x)}: accepted with probability p(x) = {p_row[x]:.3f}")
print("max |output law - p| =", float(np.abs(law - p_row).max()))
assert np.abs(law - p_row).max() < 1e-12, (  # "still exactly p"
    f"expected the point-mass law to be p, max difference {np.abs(law - p_row).max():.1e}")

# %% [markdown]
# Judging such a draft with some *soft* q instead (say, a model's distribution that was not
# used to choose x) would be wrong — a real bug in more than one public project. The q handed
# to `verify` must be the distribution the draft token was actually drawn from.
#
# ## 5. Temperature, top-k, top-p: inside the rule, on both sides
#
# The target's "distribution" is whatever it would really sample from: after temperature,
# top-k and top-p. The same holds for the draft. `reference.sampling.probabilities` applies
# the transforms and is used for both models. What if one side skips them? We compute exact
# laws on a real position of the bundled pair, with T = 0.7, top-k = 12, top-p = 0.9:
#
# * **correct** — draft samples from processed q and reports it; target uses processed p;
# * **target skips the transforms** — `verify` gets the raw p;
# * **draft reports the raw q** — it sampled with the transforms but hands `verify` the raw row;
# * **draft skips them entirely** — samples from and reports the raw q.

# %%
sampling = SamplingParams(temperature=0.7, top_k=12, top_p=0.9)
raw = SamplingParams(temperature=1.0)
t_logits = target.forward(context)[-1].astype(np.float64)
d_logits = draft.forward(context)[-1].astype(np.float64)
p_s, q_s = probabilities(t_logits, sampling), probabilities(d_logits, sampling)
p_raw, q_raw = probabilities(t_logits, raw), probabilities(d_logits, raw)

laws = {
    "correct: processed p and q": first_token_law(p_s, q_s, q_s),
    "target skips the transforms": first_token_law(p_raw, q_s, q_s),
    "draft reports the raw q": first_token_law(p_s, q_raw, q_s),
    "draft skips them entirely": first_token_law(p_s, q_raw, q_raw),
}
outside = p_s == 0  # tokens that top-k / top-p removed: the target may never emit them
for name, law in laws.items():
    tv = 0.5 * np.abs(law - p_s).sum()
    print(f"{name:30} TV distance to the target {tv:.2e}   "
          f"mass on removed tokens {law[outside].sum():.2e}")
print(f"\nacceptance rate: correct {np.minimum(p_s, q_s).sum():.3f}, "
      f"draft skips entirely {np.minimum(p_s, q_raw).sum():.3f}")
print(f"the processed target can emit {np.count_nonzero(p_s)} tokens; "
      "the figure names those (at most 10) and pools every other token in one bar")

# what the reading below says, checked on these laws
tv = {name: 0.5 * np.abs(law - p_s).sum() for name, law in laws.items()}
assert tv["correct: processed p and q"] < 1e-12, (
    f"expected the correct rule to give p exactly, TV {tv['correct: processed p and q']:.1e}")
forbidden = laws["target skips the transforms"][outside].sum()
assert forbidden > 1e-3, f"expected removed tokens to come out, their mass is {forbidden:.1e}"
assert tv["draft reports the raw q"] > 1e-3, (
    f"expected a bent law, TV only {tv['draft reports the raw q']:.1e}")
assert tv["draft skips them entirely"] < 1e-12, (  # still exact ...
    f"expected a draft that skips the transforms to stay exact, TV "
    f"{tv['draft skips them entirely']:.1e}")
assert np.minimum(p_s, q_raw).sum() < np.minimum(p_s, q_s).sum(), (  # ... but accepted less
    f"expected less acceptance with the raw q: {np.minimum(p_s, q_raw).sum():.3f} vs "
    f"{np.minimum(p_s, q_s).sum():.3f}")

# %%
path = plot_law_comparison(p_s, laws, FIGURES / "sampling_transforms_law.png", top=10,
                           title="First-token law (exact, verify_law) with T = 0.7, top-k = 12, "
                                 "top-p = 0.9")
display(Image(filename=str(path)))

# %% [markdown]
# Reading the result:
#
# * If the **target** skips the transforms, the output follows the raw target — tokens that
#   top-k or top-p forbid come out. The rule did its job, but with the wrong p.
# * If the draft **samples** from one distribution and **reports** another, the ratio
#   p(x)/q(x) corrects for the wrong thing and the law is bent.
# * A draft that consistently skips the transforms is still exact — `verify` corrects any q,
#   as long as q is the real one — but it agrees with the target less often, so it is slower.
#
# Each mismatch is a zero-variance failure here; on samples the oracle's chi-square tests see
# the same thing (its catalogue of broken variants includes "a transform on one side only",
# notebook 09). Equal laws do not mean equal text: with the same seed, speculative and
# plain sampling consume random numbers differently and write different samples.

# %% [markdown]
# ## Exercise: logits to the distribution
#
# Temperature, top-k and top-p must turn logits into the *same* distribution on both sides,
# or min(1, p/q) is computed with the wrong p or q. Write that function yourself:
# [`notebooks/exercises/my_sampling.py`](exercises/my_sampling.py) gives the contract (the
# order of the steps, ties, the token that crosses top-p). Grade it in about a second:
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_sampling.py:sampling_distribution
# ```
#
#
# ## Exercise: the whole round's verify
#
# Now apply the proof: write `verify(p_target, q_draft, draft_tokens, rng)`, the rule that
# judges a whole round of drafts and draws its last token, in
# [`notebooks/exercises/my_verify.py`](exercises/my_verify.py). Its docstring gives the
# contract and what is graded (the law of what it returns, the rule, its randomness, and the
# rule inside a real loop), not the rule: that is this notebook's §1 and its proof. Grade it
# (about 15 s):
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_verify.py:verify
# ```
#
# Notebook 09 shows how the grader's statistical checks work, and runs the same oracle
# against broken rules.

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. Work the A/B example: q = (0.8, 0.2), p = (0.6, 0.4). With what probability is A
#    proposed and kept, what is the residual, and what is the law of the emitted token?
# 2. Show that a rejection happens with probability Z = Σ max(0, p − q), the sum that
#    normalises the residual.
# 3. At temperature 0, what do min(1, p/q) and the residual become? Does the code have a
#    separate greedy path?
# 4. A prompt-lookup draft has q = one-hot(x). What is its acceptance probability, what is
#    the residual after a rejection, and why must it not be judged with some soft q?
# 5. If the target skips temperature / top-k / top-p, what law comes out? And if the draft
#    skips them consistently but reports the q it really sampled from?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)
