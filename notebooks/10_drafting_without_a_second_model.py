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
# # 10 · Drafting without a second model: prompt lookup, early exit, extra heads
#
# *Article §10.2-10.3. Code: `reference/lookup.py` (`LookupDrafter`, `HybridDrafter`,
# `lookup_continuation`, `match_end`), `reference/early_exit.py` (`EarlyExitDrafter`,
# `SharedLayers.continue_in`), `reference/heads.py` (`HeadsDrafter`), `specdec/drafting.py`
# (`make_drafter`), `specdec/measure/bench.py` (`run_bench`, `COPY_PROMPTS`),
# `specdec/measure/methods.py`. Tests: `tests/unit/test_lookup.py`,
# `tests/unit/test_self_drafting.py`, `tests/distribution/test_lookup_law.py`,
# `tests/distribution/test_self_drafting_law.py`. Text: `docs/algorithm.md`, "Drafts without a
# second model" and "Drafts from the target itself"; `docs/kv-cache.md`, "Early exit".*
#
# So far the drafts came from a second, smaller model (notebook 03). That model has to be
# trained, loaded and run k times per round. But text often repeats itself: code uses the
# same names again and again and re-emits whole lines, a table continues its pattern, an
# answer quotes its question. Where that happens, a draft can simply be **copied**:
#
# 1. take the last n tokens of the committed text (prompt + what was generated so far);
# 2. find an earlier place where the same n tokens occur;
# 3. propose the tokens that followed them there (at most k).
#
# This is *prompt lookup* (or n-gram drafting), as
# [Saxena's prompt lookup decoding](../docs/references.md#promptlookup2023) does it. There is
# no network at all: a draft costs a scan of the text. `LookupDrafter` tries n = 3 first and
# shorter n down to 1 (a longer match is better evidence), as that repository does, and
# copies from the most recent earlier occurrence, where the repository's code takes the first
# one it finds from the start of the text.
#
# Sections 1-3 are about copying. Sections 4 and 5 draft with **the target itself**: its
# first blocks with an exit head (early exit, after
# [Draft & Verify](../docs/references.md#draftverify2024) and
# [LayerSkip](../docs/references.md#layerskip2024)), and small extra heads on its last hidden
# state ([Medusa](../docs/references.md#medusa2024)-style). Section 6 puts every drafter in one
# table. One family is not built here:
# [lookahead decoding](../docs/references.md#lookahead2024) lets the target draft its own
# n-grams by Jacobi iteration ([Santilli et al., 2023](../docs/references.md#jacobi2023)),
# paying with extra positions in each pass, which this CPU does not get for free (notebook
# 01's v(T)).

# %%
import json
import os
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

import reference
from reference import (
    EarlyExitDrafter,
    HeadsDrafter,
    LookupDrafter,
    SamplingParams,
    SpeculativeStats,
    generate,
    probabilities,
    speculative_generate,
)
from reference.lookup import lookup_continuation, match_end
from reference.sampling import GREEDY
from reference.speculative import prefill, verification_pass
from reference.tokenizer import decode, encode
from reference.verification import verify_law
from specdec.bundled import (
    SELF_DRAFT_DIR,
    bundled_pair_available,
    load_bundled_pair,
    load_exit_head,
    load_heads,
)
from specdec.costs import measure_costs
from specdec.drafting import EXIT_LAYER, make_drafter
from specdec.fast_cpu import fast
from specdec.figures.style import FATE_COLOURS, box, display_token, legend_patches, save
from specdec.machine import describe_machine, use_blas_threads
from specdec.measure.bench import COPY_PROMPTS, held_out_code_prompts, run_bench
from specdec.standins import random_pair

use_blas_threads()  # one BLAS thread unless $SPECDEC_BLAS_THREADS says otherwise
print(describe_machine().line())  # the timings of section 6 are facts about this machine
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))
target, draft = load_bundled_pair() if bundled_pair_available() else random_pair(seed=0)
target, draft = fast(target), fast(draft)  # the CPU fast path, as `specdec bench` runs
K = 7  # the longest draft of this notebook (the bench below also tries 3)

# %% [markdown]
# ## 1. One real match
#
# A copy-heavy prompt from `specdec.measure.bench.COPY_PROMPTS`: a getter, a setter and another
# getter. We let the target continue it greedily, then ask the lookup, at every point of that
# continuation, what it would have proposed. Below is the point where the copy agreed longest with
# what the target really wrote next — a best case, chosen on purpose to show the mechanism (section
# 3 shows ordinary rounds).

# %%
prompt = encode(COPY_PROMPTS[3])
written = np.array(generate(target, prompt, max_new_tokens=32, rng=np.random.default_rng(0),
                            sampling=GREEDY))
text = np.concatenate([prompt, written])
lookup = LookupDrafter(target.n_vocab, target.config.n_ctx)  # n = 3 .. 1, "recent"


def agreement(t):
    # the lookup's drafts at text[:t] against what the target wrote next: (how many agree in
    # a row, how many of those are not spaces; a copy of indentation alone shows little)
    proposal = lookup_continuation(text[:t], K, lookup.max_ngram, lookup.min_ngram, "recent")
    nxt = text[t : t + len(proposal)]
    run = int(np.cumprod(proposal[: len(nxt)] == nxt).sum())
    return run, int((proposal[:run] != ord(" ")).sum())


cut = max(range(len(prompt), len(text)), key=lambda t: agreement(t)[::-1])  # the best point
context = text[:cut]
proposal = lookup.propose(context, K, GREEDY, np.random.default_rng(0))
# where that proposal came from: the longest n (3, 2, 1) whose last n tokens occurred before
n = next(n for n in range(lookup.max_ngram, lookup.min_ngram - 1, -1)
         if match_end(context, n, K, "recent") is not None)
e = match_end(context, n, K, "recent")  # the earlier occurrence is context[e-n:e]
assert np.array_equal(context[e : e + len(proposal.tokens)], proposal.tokens), (
    f"the proposal should be the tokens after the earlier occurrence: "
    f"{decode(context[e : e + K])!r}, got {decode(proposal.tokens)!r}")
print(f"context ends with {decode(context[-12:])!r}; the last n = {n} tokens "
      f"{decode(context[-n:])!r} occurred before at {e - n}..{e - 1}")
print(f"proposed: {decode(proposal.tokens)!r};  the target then wrote: "
      f"{decode(text[cut : cut + K])!r}")
print("q rows:", proposal.q.shape, " q_i(x_i):", proposal.q[np.arange(K), proposal.tokens])


# %%
def draw_lookup_match(context, n, e, drafts, truth, path):
    # the context as boxes, one line of code per row; the last n tokens and their earlier
    # occurrence, the tokens copied from there, and the proposal with the target's verdict
    row, col, where = 0, 0, []  # where[i] = (row, column) of context[i]
    for tok in context:
        where.append((row, col))
        row, col = (row + 1, 0) if tok == ord("\n") else (row, col + 1)
    n_rows = row + 2  # the context's rows and one for the target's verdicts
    width = max(max(c for _, c in where), where[-1][1] + len(drafts)) + 1
    fig, ax = plt.subplots(figsize=(0.24 * width, 0.27 * n_rows + 0.5))
    colours = {f"the last n = {n} tokens, and where they occurred before": "#f5c26b",
               "what followed them there": FATE_COLOURS["draft"],
               "the proposal (q = one-hot)": "#b9a6e8"}
    face = list(colours.values())
    T = len(context)
    for i, ((r, c), tok) in enumerate(zip(where, context, strict=True)):
        colour = (face[0] if T - n <= i or e - n <= i < e else
                  face[1] if e <= i < e + len(drafts) else FATE_COLOURS["context"])
        box(ax, c, -r, display_token(tok), colour, size=7)
    r, c = where[-1]
    for j, (tok, right) in enumerate(zip(drafts, truth, strict=False)):
        box(ax, c + 1 + j, -r, display_token(tok), face[2], ls="--", size=7, weight="bold")
        ax.text(c + 1 + j, -r - 0.85, "✓" if tok == right else "✗", ha="center", va="center",
                color="#2e7d32" if tok == right else "#c62828", fontsize=8)
    ax.text(c + 1, -r - 1.45, "✓ / ✗: what the target wrote next", fontsize=7, color="#555555")
    ax.set_xlim(-0.7, width - 0.3)
    ax.set_ylim(-n_rows - 0.2, 0.7)
    ax.axis("off")
    ax.legend(handles=legend_patches(colours), loc="lower center", bbox_to_anchor=(0.5, 1.0),
              ncol=3, fontsize=7, frameon=False)
    ax.set_title("Prompt lookup: copy what followed the last earlier occurrence", fontsize=9,
                 pad=22)
    return save(fig, path)


path = draw_lookup_match(context, n, e, proposal.tokens, text[cut : cut + K],
                         FIGURES / "lookup_match.png")
display(Image(filename=str(path)))

# %% [markdown]
# The drafter hands back a `Draft` like any other: tokens, and the q rows they came from.
# Here those rows are **one-hot**. The tokens were not drawn from a distribution; they were
# chosen by a rule that reads only the committed text. The law they came from is a point
# mass, and that is exactly what the lookup reports.
#
# ## 2. Why copying is exact
#
# Nothing new is needed in `verify`. With q = one-hot(x), its rule becomes:
#
# * accept x with probability min(1, p(x) / q(x)) = min(1, p(x) / 1) = **p(x)**;
# * on a rejection, sample from norm(max(0, p − one-hot(x))): **p with x removed**,
#   renormalised, r(y) = p(y) / (1 − p(x)) for y ≠ x;
# * so P(emit y) = [y = x]·p(x) + (1 − p(x))·r(y) = p(y) for every y.
#
# We check it with `verify_law`, the exact law of `verify`'s output for given drafts, on the
# target's real rows for the proposal above, at temperature 0.8 (sampling, as in the bench
# below).

# %%
sampling = SamplingParams(temperature=0.8)
logits = target.forward(np.concatenate([context, proposal.tokens]))[-(K + 1):]  # [K+1, V]
p_rows = probabilities(logits.astype(np.float64), sampling)  # row i scores draft i; row K: bonus
law = verify_law(p_rows, proposal.q, proposal.tokens)  # {(accepted, token): probability}

x = int(proposal.tokens[0])
first = np.zeros(target.n_vocab)  # the law of the first emitted token
for (accepted, token), mass in law.items():
    first[x if accepted > 0 else token] += mass
print(f"x1 = {display_token(x)!r}: p1(x1) = {p_rows[0, x]:.4f}, "
      f"P(x1 accepted) = {sum(m for (a, _), m in law.items() if a > 0):.4f}")
print(f"max |law of the first emitted token - p1| = {np.abs(first - p_rows[0]).max():.1e}")
rejected = np.array([law.get((0, y), 0.0) for y in range(target.n_vocab)])
residual = rejected / rejected.sum()  # the law of the token emitted after a rejection of x1
expected = np.where(np.arange(target.n_vocab) == x, 0.0, p_rows[0]) / (1 - p_rows[0, x])
print(f"after a rejection: x1 has mass {residual[x]:.1e}; "
      f"max |residual - p1 without x1| = {np.abs(residual - expected).max():.1e}")

# %% [markdown]
# The same rows tell the price of a point mass. Draft i is examined only if drafts 1 … i−1
# were accepted, so P(at least i accepted) = p₁(x₁) · … · p_i(x_i): every copied token must
# be one the target itself would pick with high probability.

# %%
p_of_drafts = p_rows[np.arange(K), proposal.tokens]
at_least = [sum(m for (a, _), m in law.items() if a >= i) for i in range(1, K + 1)]
print("i                    ", "  ".join(f"{i:5d}" for i in range(1, K + 1)))
print("p_i(x_i) at T = 0.8  ", "  ".join(f"{v:5.3f}" for v in p_of_drafts))
print("P(>= i accepted)     ", "  ".join(f"{v:5.3f}" for v in at_least))
print("product p_1..p_i     ", "  ".join(f"{v:5.3f}" for v in np.cumprod(p_of_drafts)))

# %% [markdown]
# Does a soft q, like a draft model's, do better under sampling? Not in general. A token
# drawn from q is accepted with probability Σ_x q(x) · min(1, p(x)/q(x)) = Σ_x min(p(x),
# q(x)); a point mass on x is accepted with probability p(x). Which is larger depends on
# the rows. Two rows over a two-token vocabulary, computed with `verify_law`, the point
# mass naming p's argmax (as a good copy does):


# %%
def p_first_accepted(p, q):
    # P(the first draft is accepted) when x ~ q and the target's row is p: verify_law's
    # law for each x, weighted by q(x). A point mass q = one-hot(x) gives p(x).
    p_rows = np.stack([p, p])  # row 1 judges the draft; row 2, the bonus row, is not used
    return sum(q[x] * sum(m for (a, _), m in verify_law(p_rows, q[None], [x]).items() if a)
               for x in np.flatnonzero(q))


ROWS = {"p peaked": ([0.9, 0.1], [0.5, 0.5]), "p spread": ([0.55, 0.45], [0.5, 0.5])}
print("case       p             q             P(accept): x ~ q   point mass on argmax p")
for case, (p_row, q_row) in ROWS.items():
    p_row, q_row = np.array(p_row), np.array(q_row)
    soft = p_first_accepted(p_row, q_row)
    point = p_first_accepted(p_row, np.eye(len(p_row))[p_row.argmax()])
    want_soft, want_point = np.minimum(p_row, q_row).sum(), p_row.max()
    assert abs(soft - want_soft) < 1e-12 and abs(point - want_point) < 1e-12, (
        f"{case}: expected Σ min(p, q) = {want_soft:.2f} and p(x) = {want_point:.2f}, "
        f"verify_law gave {soft} and {point}")
    print(f"{case:9}  {str(p_row.tolist()):12}  {str(q_row.tolist()):12}  {soft:16.2f}  "
          f"{point:22.2f}")

# %% [markdown]
# A point mass wins where p is peaked on the token it names (greedy decoding is the
# extreme case: p is one-hot and its argmax is accepted with probability 1). A soft q wins
# where p is spread and q spreads its mass the same way, so that min(1, p/q) is often 1.
# Real rows mix both cases; which kind of drafter comes out ahead on this pair is a
# measurement, printed in section 6.

# %% [markdown]
# ## 3. Running it: lookup alone, and the hybrid
#
# `specdec.drafting.make_drafter(name, reference, target, draft)` builds the drafters the CLI
# and the bench run by name:
#
# * `"lookup"`: `LookupDrafter`, n = 3 … 1, copying from the occurrence followed by the
#   longest continuation (`prefer="longest"`, measured better than the most recent one on
#   copy-heavy text: docs/benchmarks.md). When nothing matches it proposes nothing, and the
#   round is a plain target step (k_round = 0: one pass, one token);
# * `"hybrid"`: `HybridDrafter`, the lookup when it matches, the draft model otherwise. Its
#   lookup only accepts matches of n = 4 or 3 tokens: at byte level nearly every single
#   byte has occurred before, so n = 1 would almost always "match" and the draft model
#   would never get a turn.
#
# Which drafter proposed a round is decided from the committed text alone, before the
# target sees anything, so every round is exact for whoever proposed it. The hybrid knows
# who proposed only *during* a round (`proposer`, which its `rollback` clears); afterwards
# we find out by re-running the lookup rule on each round's committed text from the trace,
# and check it against the draft model's cache, which a lookup round leaves untouched.

# %%
def who_drafted(r, committed, look):
    # "L" if the lookup rule, re-run on the round's committed text, gives the round's drafts;
    # "-" if the round drafted nothing (a plain target step); "M" otherwise (the draft model)
    if len(r.draft_tokens) == 0:
        return "-"
    again = lookup_continuation(committed[: r.context_len], len(r.draft_tokens),
                                look.max_ngram, look.min_ngram, look.prefer)
    return "L" if np.array_equal(again, r.draft_tokens) else "M"


held_out = held_out_code_prompts(1)[0]
PROMPTS = {"copy-heavy": prompt, "held-out": held_out}
print("held-out prompt (stdlib code the models never saw):", repr(decode(held_out[-60:])))
for label, tokens in PROMPTS.items():
    plain = generate(target, tokens, max_new_tokens=48, rng=np.random.default_rng(0),
                     sampling=GREEDY)
    print(f"\n{label} prompt, greedy, k = {K}, 48 tokens")
    for name in ("model", "lookup", "hybrid"):
        drafter = make_drafter(name, reference, target, draft)
        res = speculative_generate(target, drafter, tokens, k=K, max_new_tokens=48,
                                   rng=np.random.default_rng(0), sampling=GREEDY, trace=True)
        s = res.stats
        line = (f"  {name:6}  rounds {s.rounds:2d}  tokens/round {s.mean_tokens_per_round:4.2f}"
                f"  α {s.alpha:.3f}  == generate: {res.tokens == plain}")
        if name != "model":
            look = drafter.lookup if name == "hybrid" else drafter
            committed = np.concatenate([tokens, res.tokens])
            who = [who_drafted(r, committed, look) for r in res.trace]
            if name == "hybrid":  # a lookup round leaves the draft model's cache untouched
                moved = [r.draft_cache[1] > r.draft_cache[0] for r in res.trace]
                assert moved == [w == "M" for w in who], (
                    f"the draft model's cache should move in its own rounds only: rounds "
                    f"{''.join(who)}, cache moved {moved}")
                line += f"  lookup rounds {who.count('L')}, model rounds {who.count('M')}"
            else:
                assert "M" not in who, f"a lookup-only run had non-lookup rounds: {who}"
                line += f"  rounds without a match {who.count('-')}"
            line += "\n          " + " ".join(f"{w}{r.accepted}/{len(r.draft_tokens)}"
                                             for w, r in zip(who, res.trace, strict=True))
        print(line)

# %% [markdown]
# Each round is written as *who* + accepted/drafted: `L` a lookup round, `M` a draft-model
# round, `-` a round that drafted nothing (a plain target step). At greedy all three give
# exactly `generate`'s tokens: only the number of target passes changes.
#
# What the rounds show. The lookup alone always finds *some* match (a single byte has
# nearly always occurred before), but a short match is weak evidence: on held-out code many
# of its copies are rejected at once (`L0/7`), and it needs about twice as many rounds as
# the draft model. (With `prefer="recent"` many copies would be short: the most recent
# occurrence often sits just before the end of the text, with a token or two after it.
# `"longest"` looks further back for a longer continuation.) On the copy-heavy prompt
# every round found a match of 3-4 tokens, so the hybrid *is* the lookup there; on held-out
# code it hands about half of the rounds to the draft model and gets most of the model's
# tokens per round back.
#
# ## 4. Early exit: the target's first blocks draft, and their work is not done twice
#
# `EarlyExitDrafter(target, L', head)` drafts with the target's own first L' blocks and an
# exit head (a LayerNorm and a small adapter trained on the frozen target by
# `specdec/training/train_heads.py`, shipped in `models/self_draft/`). It holds no weights of its
# own: its GPT is made of the target's arrays.
#
# The interesting part is the cache. While drafting, the drafter ran blocks 0..L'-1 over the
# catch-up token and x₁ … x_{k-1}; the target's verification pass would compute exactly the
# same K/V and the same residual stream for them. So the pass copies those K/V, runs blocks
# 0..L'-1 for x_k only, and starts every row at block L'. We watch the blocks at work by
# recording the rows each block of the target processes in one verification pass. This reuse
# is LayerSkip's ([Elhoushi et al., 2024](../docs/references.md#layerskip2024)); where
# LayerSkip retrains the whole model (layer dropout, an early-exit loss) so that its first
# layers predict well, the lab leaves the target untouched and trains only the exit head.

# %%
exit_drafter = EarlyExitDrafter(target, EXIT_LAYER, load_exit_head(EXIT_LAYER))
context = prompt.copy()
rows_seen = []
plain_block = type(target).block


def spying_block(self, x, i, cache, start):
    if self is target:
        rows_seen.append((i, x.shape[0]))
    return plain_block(self, x, i, cache, start)


type(target).block = spying_block
try:
    for shared in (True, False):
        cache = target.new_cache()
        prefill(target, cache, exit_drafter, context)
        draft_ = exit_drafter.propose(context, 4, GREEDY, np.random.default_rng(0))
        rows_seen.clear()
        p_rows, _, _ = verification_pass(target, cache, context, draft_.tokens, GREEDY,
                                         draft_.shared if shared else None)
        print(("sharing the drafter's rows" if shared else "plain pass            "),
              "rows per block:", [n for _, n in rows_seen])
        if shared:
            p_shared, k_shared = p_rows, cache.k[:, :, : cache.end].copy()
        else:
            print("max |p shared - p plain| =", float(np.abs(p_shared - p_rows).max()),
                  "  max |K shared - K plain| =",
                  float(np.abs(k_shared - cache.k[:, :, : cache.end]).max()))
finally:
    type(target).block = plain_block

# %% [markdown]
# With k = 4 drafts the pass covers 5 rows: the catch-up token and four drafts. Sharing,
# the first L' blocks run on **one** row (x₄, which the drafter sampled but never fed) and
# the rest on all five; the plain pass runs every block on five rows. The rows and the K/V
# agree to float32 rounding (`tests/unit/test_self_drafting.py` checks it, and that both
# caches equal a fresh prefill after every round). The copied slots are temporary entries
# of the target cache: `commit` keeps the accepted ones, `rollback` drops the rest, so a
# rejected draft's K/V never reaches a committed slot (docs/kv-cache.md draws it).
#
# What an exit head buys: agreement with the target's argmax on held-out code, after L'
# blocks, before and after training (from `models/self_draft/metadata.json`):

# %%
meta = json.loads((SELF_DRAFT_DIR / "metadata.json").read_text())
for layer, m in meta["exit_heads"].items():
    print(f"exit after {layer} of {target.config.n_layer} blocks: greedy agreement "
          f"{m['untrained_greedy_agreement']:.2f} -> {m['held_out_greedy_agreement']:.2f} "
          f"trained, alpha at T = 1 {m['untrained_alpha_T1']:.2f} -> {m['held_out_alpha_T1']:.2f}")

# %% [markdown]
# **A slip in the article.** §10.3 says that self-speculation needs a special structure
# *and training*. The structure, yes (an exit after some block); the training, no. An exit
# that was never trained is already a drafter: the target's first L' blocks, then the
# target's own final LayerNorm and its tied output layer. That is what
# `EarlyExitDrafter(target, L')` builds when it is given no head.
# [Draft & Verify](../docs/references.md#draftverify2024) makes the same point: it drafts by
# skipping some of the target's layers and trains nothing. Training raises its α; it
# is not what makes self-drafting work. The numbers above come from the training script; we
# measure both exits again here, in the loop itself, on three held-out prompts at T = 1
# (k = 3, 48 new tokens each, α pooled over the three runs).

# %%
T1 = SamplingParams(temperature=1.0)
exit_prompts = held_out_code_prompts(3)
exit_alpha = {}
for name, head in (("untrained", None), ("trained", load_exit_head(EXIT_LAYER))):
    runs = [speculative_generate(target, EarlyExitDrafter(target, EXIT_LAYER, head), tokens,
                                 k=3, max_new_tokens=48, rng=np.random.default_rng(i),
                                 sampling=T1).stats
            for i, tokens in enumerate(exit_prompts)]
    exit_alpha[name] = SpeculativeStats.pooled(runs)
    print(f"{name:9} exit after {EXIT_LAYER} of {target.config.n_layer} blocks, T = 1: "
          f"α = {exit_alpha[name].alpha:.3f} ({exit_alpha[name].accepted} of "
          f"{exit_alpha[name].accepted + exit_alpha[name].rejections} examined drafts accepted)")

# %% [markdown]
# ## 5. Extra heads: drafts read off the target's last hidden state
#
# `HeadsDrafter(target, heads)` keeps no cache and runs no forward pass. After each round
# the round hands it the target's final hidden state h at the row that scored the token it
# just emitted (`observe`); head i maps h to a guess of the token i + 1 places further on.
# Its q rows are the heads' distributions, so `verify` stays exact whatever the heads
# learned. These are [Medusa](../docs/references.md#medusa2024)'s heads (one residual block
# each, trained on the frozen target, Medusa-1), descended from the proposal heads of
# [Stern et al., 2018](../docs/references.md#stern2018). Two departures: here they draft a
# chain (their trees are notebook 11), and they are judged by the exact rule, not by Medusa's
# typical acceptance, which changes the output law (notebook 11 measures how much). How often
# is each position accepted, once it is examined?

# %%
heads = load_heads()
n_heads = len(heads) // 2
per_position = {}
for label, tokens in PROMPTS.items():
    res = speculative_generate(target, HeadsDrafter(target, heads), tokens, k=n_heads,
                               max_new_tokens=96, rng=np.random.default_rng(0),
                               sampling=GREEDY)
    per_position[label] = res.stats.per_position_acceptance
    print(f"{label:10} tokens/round {res.stats.mean_tokens_per_round:.2f}  "
          f"P(accept | examined) by position: "
          + "  ".join(f"{a:.2f}" for a in res.stats.per_position_acceptance))

fig, ax = plt.subplots(figsize=(6.0, 3.2))
width = 0.38
for j, (label, rates) in enumerate(per_position.items()):
    ax.bar(np.arange(1, n_heads + 1) + (j - 0.5) * width, rates, width, label=label)
ax.set_xlabel("draft position i (head i - 1: i + 1 tokens after h)")
ax.set_ylabel("P(accepted | examined)")
ax.set_ylim(0, 1)
ax.set_xticks(np.arange(1, n_heads + 1))
ax.legend(frameon=False)
ax.set_title("extra heads on the bundled target, greedy")
display(Image(save(fig, FIGURES / "heads_per_position.png")))

# %% [markdown]
# Unconditionally, each head is right less often the further ahead it looks (held-out α
# per head 0.52, 0.42, 0.38, 0.35: docs/training.md). The rates above are conditional: a
# position is only examined when every draft before it was accepted, which happens in the
# stretches the heads find easy (a repeated line), so they need not fall with the position.
# What the plot does show is the difference between the prompts: on the copy-heavy prompt
# most examined drafts are accepted, on held-out code most rounds end at the first or
# second head. Drafting costs two small products per round instead of k forward passes;
# the verification pass is still a full k + 1-row target pass.
#
# ## 6. The method table
#
# One small `run_bench` per prompt set (2 prompts of each kind, 32 new tokens, one repeat,
# to keep the notebook quick): the autoregressive run of each prompt, then every drafter at
# its k values, back to back, so each speedup is a ratio of runs timed close together. c is
# the drafting time per drafted token and v the verification pass per round, both in units
# of one autoregressive step, as the runs themselves spent them.

# %%
copy_prompts = [encode(t) for t in COPY_PROMPTS[:2]]
held_out_prompts = held_out_code_prompts(2)
# the isolated cost profile run_bench needs for its predictions (not printed here)
costs = measure_costs(target, draft, np.concatenate([copy_prompts[0]] * 8)[: 256],
                      max_T=K + 1, repeats=3)
# k = 3 for everyone (α compares at equal k), and k = 7 where drafts are cheap; the two
# self-drafters, whose rounds are short, run at k = 3 only to keep the notebook quick
PLAN = {"model": [3, K], "lookup": [3, K], "hybrid": [3, K], "early-exit": [3], "heads": [3],
        "lookup+heads": [3, K]}
rows = []
for kind, prompts in (("copy-heavy", copy_prompts), ("held-out", held_out_prompts)):
    report = run_bench(target, draft, prompts, [], temperatures=[0.0, 0.8],
                       max_new_tokens=32, repeats=1, costs=costs, seed=0, ks_by_drafter=PLAN,
                       shared_baseline=True)  # one autoregressive run per prompt and repeat
    rows += [(kind, pt) for pt in report.points]
print("prompts     drafter        T    k   speedup  alpha  tokens/round      c      v")
for kind, pt in rows:
    print(f"{kind:10}  {pt.drafter:12} {pt.temperature:4g} {pt.k:4d}  {pt.speedup:6.2f}x  "
          f"{pt.alpha:.3f}  {pt.tokens_per_round:11.2f}  {pt.c_loop:6.3f}  {pt.v_loop:5.2f}")

# %%
best = {}  # (prompts, drafter, T) -> its best speedup over the k values it ran
for kind, pt in rows:
    key = (kind, pt.drafter, pt.temperature)
    best[key] = max(best.get(key, 0.0), pt.speedup)
for kind in ("copy-heavy", "held-out"):
    for t in (0.0, 0.8):
        ranked = sorted(PLAN, key=lambda name, kind=kind, t=t: -best[kind, name, t])
        print(f"{kind:10} T = {t:g}: best speedup, fastest first:  "
              + "  ".join(f"{name} {best[kind, name, t]:.2f}x" for name in ranked))

# %% [markdown]
# **How to read it.** α and tokens per round are fixed by the seeds (up to float rounding,
# which differs a little between BLAS kernels). The speedups are timings: one repeat of two
# short prompts on the machine named at the top of this notebook, so single entries move by
# 0.2x or more between runs, and on another CPU, another BLAS kernel or another thread
# count the ranking itself can change. The full measurement, with more prompts, longer
# generations and more repeats, is in `docs/benchmarks.md` ("Drafting without a second
# model"; `specdec bench --drafter all`). What follows holds on any machine, as a statement
# about the work each drafter does; the cell after it prints what this run measured.
#
# * **Lookup does no forward pass.** A draft is a scan of a few hundred bytes, so its c is
#   small next to a drafter that runs a network. At greedy a copied token that names the
#   target's argmax is accepted with probability 1; under sampling it is a point mass,
#   accepted with probability p(x) (section 2), so where p is not peaked a copy passes
#   less often. The run's α under sampling also comes from other contexts (the sampled text
#   differs), so the two α printed below need not be ordered the same way on every run.
# * **Early exit pays for its drafts with the target's own blocks.** Each drafted token
#   runs 2 of the target's 6 blocks, at the target's width, plus the output layer: many
#   more weights than the small draft model reads per token (counted below). The shared
#   rows take blocks 0-1 off all but one row of the verification pass, which trims v a
#   little. Whether its α is higher or lower than the separately trained draft model's is
#   a property of the two models, compared below at the same k.
# * **Heads draft with no forward pass** (two small products per round), but each head
#   guesses further ahead from the same state without seeing the drafts before it, so
#   their rounds are short (tokens per round printed below), and each round still pays a
#   full verification pass over k + 1 rows. Behind a lookup (`lookup+heads`) they only fill
#   the rounds the text does not repeat.
# * **Which drafter is fastest** is a measurement of this machine, not a property of the
#   method: the draft model was trained for this target (docs/training.md), and the
#   others trade α for cheaper drafts. The cell prints the winner of each row of the
#   table, and the entries within 0.2x of it, which a rerun may reorder.


# %%
def weights_per_token(model, n_blocks):
    # the weight entries one drafted token multiplies: blocks 0..n_blocks-1 and the tied
    # output layer (the embedding lookup reads one row only)
    return model.params["wte.weight"].size + sum(
        w.size for name, w in model.params.items()
        if name.startswith("h.") and int(name.split(".")[1]) < n_blocks)


by = {(kind, pt.drafter, pt.temperature, pt.k): pt for kind, pt in rows}
for kind, pt in rows:  # laws of any run: a round emits 1 .. k + 1 tokens; 0 <= α <= 1
    assert 1.0 <= pt.tokens_per_round <= pt.k + 1 and 0.0 <= pt.alpha <= 1.0, (
        f"{kind} {pt.drafter} T={pt.temperature:g} k={pt.k}: expected 1 <= tokens/round <= "
        f"{pt.k + 1} and 0 <= α <= 1, got {pt.tokens_per_round:.2f} and {pt.alpha:.3f}")

mean_c = {name: np.mean([pt.c_loop for _, pt in rows if pt.drafter == name]) for name in PLAN}
print("drafting cost c per drafted token (target steps), mean over the table:  "
      + "  ".join(f"{name} {mean_c[name]:.3f}" for name in PLAN))
ratio = weights_per_token(target, EXIT_LAYER) / weights_per_token(draft, draft.config.n_layer)
print(f"weights per drafted token: early exit {weights_per_token(target, EXIT_LAYER):,}, "
      f"draft model {weights_per_token(draft, draft.config.n_layer):,} ({ratio:.1f}x); "
      f"measured c: early exit / draft model = {mean_c['early-exit'] / mean_c['model']:.1f}x")
for kind in ("copy-heavy", "held-out"):
    print(f"\n{kind} prompts")
    print("  α at k = 3, early exit vs draft model:  " + "   ".join(
        f"T = {t:g}: {by[kind, 'early-exit', t, 3].alpha:.3f} vs "
        f"{by[kind, 'model', t, 3].alpha:.3f}" for t in (0.0, 0.8)))
    print("  lookup α, greedy vs T = 0.8:           " + "   ".join(
        f"k = {k}: {by[kind, 'lookup', 0.0, k].alpha:.3f} vs {by[kind, 'lookup', 0.8, k].alpha:.3f}"
        for k in (3, K)))
    print("  heads tokens per round at k = 3:        " + "   ".join(
        f"T = {t:g}: {by[kind, 'heads', t, 3].tokens_per_round:.2f}" for t in (0.0, 0.8)))
    for t in (0.0, 0.8):
        ranked = sorted(PLAN, key=lambda name, kind=kind, t=t: -best[kind, name, t])
        close = [f"{name} {best[kind, name, t]:.2f}x" for name in ranked[1:]
                 if best[kind, name, t] >= best[kind, ranked[0], t] - 0.2]
        print(f"  T = {t:g}: on this machine the best drafter was {ranked[0]} at "
              f"{best[kind, ranked[0], t]:.2f}x" + (f"; within 0.2x of it: {', '.join(close)}"
                                                    if close else "; no other within 0.2x"))

# %% [markdown]
# ## Exercise: a prompt-lookup drafter
#
# [`notebooks/exercises/my_lookup.py`](exercises/my_lookup.py) asks for the proposal of
# prompt lookup: the most recent earlier occurrence of the last n tokens, what followed it,
# and the point-mass q that keeps the output exact. Grade it in about a second:
#
# ```bash
# .venv/bin/specdec grade notebooks/exercises/my_lookup.py:propose_lookup
# ```

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. A lookup drafter's q rows are one-hot. Why is that the correct q, and what does
#    `verify` then do?
# 2. With point-mass drafts, what is the probability that at least i drafts are accepted?
# 3. When does a point mass beat a soft q under sampling, and when does a soft q win?
# 4. The article says self-speculation needs a special structure and training. Which part
#    is a slip, and why?
# 5. `HeadsDrafter` keeps no cache and runs no forward pass. Where do its guesses come
#    from, and why need its per-position acceptance not fall with the position?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)
