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
# # 09 · The oracle: proving the output follows the target
#
# *Article §4 ("the accepted drafts plus the corrections together make up the target's
# distribution"). Code: `specdec/oracle/` (`laws.py`, `cases.py`, `broken.py`: shipped with
# the package), the checks in `tests/distribution/`, `tests/conftest.py` (the plug-in
# options). Text: `docs/oracle.md`.*
#
# A speculative sampler can look perfectly healthy — fluent text, a good acceptance rate —
# and still sample from the wrong distribution. The only way to know is to test the law
# itself. `pytest -m distribution` does that in three ways:
#
# 1. **exact laws** (zero variance): on tiny vocabularies, enumerate every draft, every
#    verdict and every residual or bonus token, with their probabilities, through the real
#    `verify_law`, EOS and length rules; compare with the target's own autoregressive law to
#    float64 precision;
# 2. **sampled laws of the real code**: run `verify`, or the whole `speculative_generate` on
#    tiny context-dependent transformers, many times with fixed seeds; compare the counts with
#    the exact law by a chi-square test (cells merged until every expected count is ≥ 20), with
#    Holm's correction across each family of checks at a false-alarm rate of 10⁻³;
# 3. **power, shown**: a catalogue of realistic broken samplers, each of which the same checks
#    must reject.
#
# And a **plug-in point**: `--verify=file.py:function` or `--speculative=…` grades another
# implementation with the same tests. This notebook runs small versions of each part.
#
# The law being tested is the theorem of
# [Leviathan et al., 2023](../docs/references.md#leviathan2023) and
# [Chen et al., 2023](../docs/references.md#chen2023): the output of speculative sampling
# follows the target's distribution. The papers prove it on paper; the oracle checks that a
# given piece of code keeps it, which a proof of the algorithm cannot. The same tests cover
# every drafter of the course, the trees of
# [SpecInfer](../docs/references.md#specinfer2024) and the EAGLE drafters included.

# %%
import os
import tempfile
from pathlib import Path

from IPython.display import Image, display

from reference import speculative_generate, verify
from specdec.figures import plot_oracle_power
from specdec.machine import describe_machine, use_blas_threads
from specdec.oracle.broken import VARIANTS
from specdec.oracle.cases import LOOP_SETUPS, VERIFY_SETUPS, run_loop_setup
from specdec.oracle.laws import ALPHA, loop_laws, max_abs_difference

use_blas_threads()  # one BLAS thread unless $SPECDEC_BLAS_THREADS says otherwise
print("machine:", describe_machine().line())
FIGURES = Path(os.environ.get("SPECDEC_FIGURES") or tempfile.mkdtemp(prefix="specdec-"))

# %% [markdown]
# ## 1. An exact law
#
# `t1_k2` is one of the oracle's loop set-ups: a one-layer GPT target over 5 tokens with large
# random weights (so every row depends strongly on the context), a draft that is a noisy copy
# of it, k = 2 and 5 new tokens. `loop_laws` enumerates the whole speculative procedure —
# every draft path, every verdict, every residual and bonus sample, round after round — and
# the target's own autoregressive law. They must agree to float64 precision.

# %%
setup = LOOP_SETUPS["t1_k2"]
laws = loop_laws(setup)
speculative_tokens = {}
for (tokens, _accepted_per_round), prob in laws.joint.items():
    speculative_tokens[tokens] = speculative_tokens.get(tokens, 0.0) + prob
print(f"{len(laws.tokens)} possible outputs of 5 tokens; "
      f"{len(laws.joint)} (output, accepted-per-round) paths of the speculative procedure")
print("max |P_speculative(output) - P_target(output)| =",
      max_abs_difference(speculative_tokens, laws.tokens))
print("law of the number of drafts accepted in round 1:",
      {a: round(float(p), 4) for a, p in sorted(laws.round1.items())})

# %% [markdown]
# ## 2. Sampled laws of the real code
#
# Exact laws prove the *rule*; they do not run the code paths that carry the numbers — the
# KV caches, the row indexing, the random-number use. So the oracle also samples. Here, with
# fewer samples than the real suite, we run the A/B example through `verify`, and the whole
# loop through `speculative_generate` on the `t1_k2` set-up. Each check prints its p-value;
# under a correct implementation p-values are spread uniformly on [0, 1].

# %%
ab = VERIFY_SETUPS["ab"].run(verify, n=4000)
loop = run_loop_setup(speculative_generate, setup, n=1500)
for result in list(ab.values()) + list(loop.values()):
    print(result.describe()[:150])

# %% [markdown]
# ## 3. Power: broken samplers must fail
#
# A test that never fails proves nothing. `specdec/oracle/broken.py` holds realistic
# mistakes; `test_power.py` asserts that each one is rejected with a p-value below 10⁻⁶. We run
# a few of them through the very same checks and sample sizes:

# %%
chosen = ["swapped_ratio", "abs_residual", "residual_from_wrong_row", "one_uniform_reused",
          "temperature_on_draft_side_only", "target_cache_commits_one_more",
          "draft_skips_catch_up"]
p_values = {"reference verify (A/B)": ab["ab:output"].p_value,
            "reference loop (t1_k2)": loop["t1_k2:tokens"].p_value}
for name in chosen:
    variant = VARIANTS[name]
    if variant.kind == "verify":
        results = VERIFY_SETUPS[variant.setup].run(variant.implementation, n=variant.n)
    else:
        results = run_loop_setup(variant.implementation, LOOP_SETUPS[variant.setup],
                                 n=variant.n, record_errors=True)
    p_values[name] = results[variant.check].p_value
    print(f"{name:31} caught by {variant.check:18} p = {p_values[name]:.1e}   "
          f"{' '.join(variant.doc.split())[:70]}")

# %%
path = plot_oracle_power(p_values, FIGURES / "oracle_power.png", level=ALPHA,
                         title="Goodness of fit to the exact law: correct vs broken samplers")
display(Image(filename=str(path)))

# %% [markdown]
# Two of these deserve a second look:
#
# * **`draft_skips_catch_up`** breaks the *draft* cache. The output law stays exact — the
#   draft's q is still the law its tokens came from, and `verify` corrects any q — so only the
#   law of the number of accepted drafts in round 2 reveals it. The oracle checks that law too.
# * **`temperature_on_draft_side_only`** is notebook 05's mismatch, caught on samples.
#
# ## 4. The `verify` exercise, graded
#
# The exercise was handed out with notebook 05, right after the proof it applies:
# `exercises/my_verify.py` (beside this notebook: `notebooks/exercises/` in a checkout,
# `exercises/` in a copy unpacked by `specdec course`). It holds the contract, what is graded
# and a worked example, not the rule, and a `verify` that raises `NotImplementedError` until
# you fill it in (numpy and scipy only). Grade it:
#
# ```bash
# specdec grade exercises/my_verify.py:verify     # from this notebook's folder
# # in a checkout, from the repository root: make grade
# ```
#
# `specdec grade` is the oracle as a grader (`specdec/grading/`). It runs only the checks that
# exercise *your* code, in four families scored apart: the **law** (does the output follow
# the target's law? exact cases whose outcome is certain, zero drafts, the A/B example, the
# joint law of (accepted, token) for k = 3, drafts from context-dependent tables), the
# **rule** (is it min(1, p/q) with the residual, the optimal acceptance? an exact rule that
# keeps fewer drafts is reported as exact, with its acceptance against the optimum), the
# **randomness** (is every draw taken from `rng`?) and your `verify` **inside the loop**.
# Every family runs whatever another found; inside one, checks stop at the first failure, so
# a wrong `verify` is rejected faster than a correct one passes (both in seconds: the
# measured times are in exercises/README.md's table, from docs/oracle.md). Each failure is
# explained on the smallest case that shows it, with a hint chosen from the pattern of
# passed and failed checks. Exit code
# 0 / 1, `--json`, and `--gradescope` (a `results.json` for course autograders; `python -m
# specdec.grading.delivery.gradescope build` makes the zip an instructor uploads);
# `--kind loop` (or a loop's signature) grades a whole `speculative_generate`.
#
# Here is what a failure reads like: the catalogue's `abs_residual`, which resamples from
# norm(|p − q|) instead of norm(max(0, p − q)):

# %%
from specdec.grading import grade, text_report  # noqa: E402

print(text_report(grade("specdec.oracle.broken:abs_residual")))  # the catalogue, by module

# %% [markdown]
# And your file, as it stands. Until `verify` is written the grader reports the
# `NotImplementedError` once, at your line, with the inputs it was called with; once it is
# written, this cell grades it (its grading time: exercises/README.md). Teachers: the
# exhaustive mode is still `pytest -m distribution --verify=…` (every family, Holm tables,
# ~1.5 min); `specdec grade`
# is the one to hand to students. A worked solution lives in
# `notebooks/exercises/solutions/verify_solution.py`, out of this notebook's way.

# %%
my_file = Path("exercises") / "my_verify.py"  # beside this notebook, in a checkout or a course
mine = grade(f"{my_file}:verify")
print(text_report(mine))

# %% [markdown]
# ## Check yourself
#
# Answer from this notebook alone, then compare with a neighbour:
#
# 1. Name the oracle's three ways of testing a sampler and what each one proves.
# 2. Exact laws already prove the rule. What do sampled laws add?
# 3. Under a correct implementation, how are the sampled checks' p-values spread? Why does
#    the oracle fix its seeds and correct for the number of tests?
# 4. `draft_skips_catch_up` breaks the draft's cache, yet the output law stays exact. Why,
#    and which law reveals it?
#
# (The answers are kept apart, for instructors: `specdec course DIR --instructor BUNDLE`
# writes them beside the students' copy; docs/teaching.md.)
