"""Every figure function of lab.figures, run on a real small run: a PNG must come out.

The figures are drawn from objects real code produced (a trace, statistics, a CostProfile, a
BenchReport, exact laws), on small random byte-level models so that this runs in seconds.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import numpy as np
import pytest

from lab import figures
from lab.bench import run_bench
from lab.costs import measure_costs
from lab.standins import noisy_copy
from reference import GPT, GPTConfig, ModelDrafter, SamplingParams, init_params
from reference.speculative import speculative_generate
from reference.tokenizer import VOCAB_SIZE, encode
from reference.verification import verify_law

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def pair():
    """A byte-level target and its noisy copy (lab.standins): drafts accepted often, not always."""
    cfg = GPTConfig(n_vocab=VOCAB_SIZE, n_ctx=96, n_embd=32, n_head=2, n_layer=2)
    target = GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.1))
    return target, noisy_copy(target, noise=0.02, seed=1)


@pytest.fixture(scope="module")
def run(pair):
    target, draft = pair
    prompt = encode("def f(x):\n    ")
    result = speculative_generate(
        target,
        ModelDrafter(draft),
        prompt,
        k=4,
        max_new_tokens=40,
        rng=np.random.default_rng(0),
        sampling=SamplingParams(0.8),
        trace=True,
    )
    assert len(result.trace) >= 4
    return prompt, result


@pytest.fixture(scope="module")
def costs(pair):
    target, draft = pair
    return measure_costs(target, draft, encode("def f(x):\n    return x\n"), max_T=4, repeats=2)


@pytest.fixture(scope="module")
def report(pair, costs):
    target, draft = pair
    return run_bench(
        target,
        draft,
        [encode("def f(x):\n")],
        ks=[1, 2, 3],
        temperatures=[0.0, 0.8],
        max_new_tokens=8,
        repeats=2,
        costs=costs,
    )


def check_png(path) -> None:
    path = Path(path)
    assert path.is_file(), f"{path} was not written"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), f"{path} is not a PNG"
    assert len(data) > 2000, f"{path} is suspiciously small ({len(data)} bytes)"


def test_bench_figures(report, tmp_path):
    check_png(figures.plot_speedup_vs_k(report, tmp_path / "speedup.png"))
    check_png(figures.plot_measured_vs_predicted(report, tmp_path / "mvp.png"))
    best = report.best(0.0)
    check_png(figures.plot_accepted_histogram(best.histogram, tmp_path / "hist.png"))
    check_png(figures.plot_acceptance_vs_k(report, tmp_path / "alpha_k.png"))


def test_cost_figures(costs, tmp_path):
    check_png(figures.plot_forward_costs(costs, tmp_path / "costs.png"))
    check_png(figures.plot_speedup_theory(costs, [0.6, 0.8], tmp_path / "theory.png"))
    rng = np.random.default_rng(0)
    times = {}
    for H in (32, 64):
        W = rng.standard_normal((H, H), dtype=np.float32)
        times[H] = {}
        for k in (1, 4):
            x = rng.standard_normal((k, H), dtype=np.float32)
            times[H][k] = min(_seconds(lambda x=x, W=W: x @ W) for _ in range(3))
    check_png(figures.plot_matmul_times(times, tmp_path / "matmul.png"))


def _seconds(fn) -> float:
    import time

    start = time.perf_counter()
    fn()
    return time.perf_counter() - start + 1e-9


def test_model_figures(tmp_path):
    check_png(figures.plot_causal_mask(3, 8, tmp_path / "mask.png"))


def test_round_figures(run, tmp_path):
    prompt, result = run
    trace = result.trace
    r = trace[1]
    check_png(
        figures.plot_draft_rows(
            r.draft_tokens, r.q_rows, tmp_path / "draft.png", context_text="def f"
        )
    )
    seq = np.concatenate([prompt, result.tokens])
    check_png(
        figures.plot_verification(
            r, tmp_path / "verify.png", last_context_token=int(seq[r.context_len - 1])
        )
    )
    check_png(figures.plot_cache_rounds(trace, prompt, tmp_path / "cache.png", n_rounds=5))
    check_png(figures.plot_pipeline(trace, prompt, tmp_path / "pipeline.png", rounds=[1, 2, 3]))
    check_png(figures.plot_token_fates(trace, prompt, tmp_path / "fates.png"))
    check_png(
        figures.plot_per_position_acceptance(
            {"run": result.stats, "again": [result.stats]}, tmp_path / "positions.png"
        )
    )


def test_law_figures(run, tmp_path):
    _, result = run
    check_png(
        figures.plot_acceptance_example(
            [0.6, 0.4],
            [0.8, 0.2],
            tmp_path / "ab.png",
            labels=["A", "B"],
            sampled=[0.59, 0.41],
            n_samples=1000,
        )
    )
    r = result.trace[1]
    p, q = r.p_rows[0].astype(np.float64), r.q_rows[0].astype(np.float64)
    law = np.zeros_like(p)
    x = int(r.draft_tokens[0])
    for (accepted, y), mass in verify_law(r.p_rows[:2], r.q_rows[:1], [x]).items():
        law[x if accepted == 1 else y] += mass
    check_png(figures.plot_law_comparison(p, {"given x": law, "q": q}, tmp_path / "law.png"))
    check_png(
        figures.plot_oracle_power(
            {"reference": 0.4, "broken": 1e-30, "crash": 0.0}, tmp_path / "power.png"
        )
    )


def plot_functions_defined() -> list[str]:
    """Every plot_* function defined in a module of lab.figures."""
    names = []
    for info in pkgutil.iter_modules(figures.__path__):
        module = importlib.import_module(f"{figures.__name__}.{info.name}")
        names += [
            n
            for n, f in inspect.getmembers(module, inspect.isfunction)
            if n.startswith("plot_") and f.__module__ == module.__name__
        ]
    return names


def test_every_plot_function_is_exported_and_exercised():
    """A new plot_* function must be re-exported by lab.figures and get a line in this file."""
    names = plot_functions_defined()
    not_exported = sorted(set(names) - set(figures.__all__))
    assert not not_exported, f"plot functions lab.figures does not re-export: {not_exported}"
    source = Path(__file__).read_text()
    missing = [n for n in names if f"figures.{n}(" not in source]
    assert not missing, f"plot functions without a test: {missing}"


def test_cache_figure_refuses_a_trace_too_short(run, tmp_path):
    prompt, result = run
    with pytest.raises(ValueError, match="nothing from round"):
        figures.plot_cache_rounds(
            result.trace, prompt, tmp_path / "x.png", first_round=len(result.trace)
        )
