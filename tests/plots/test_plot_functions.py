"""Every figure function of specdec.figures, run on a real small run: a PNG must come out, and
what the figure draws (bar heights, line points, the numbers printed in it) must be the data
it was given.

The figures are drawn from objects real code produced (a trace, statistics, a CostProfile, a
BenchReport, exact laws), on small random byte-level models so that this runs in seconds. The
`drawn` fixture keeps every figure saved during a test, to be read back.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle

from reference import GPT, GPTConfig, ModelDrafter, SamplingParams, init_params
from reference.speculative import ACCEPTED, speculative_generate
from reference.tokenizer import VOCAB_SIZE, encode
from reference.verification import verify_law
from specdec import figures
from specdec.costs import CostProfile, measure_costs
from specdec.figures.style import CACHE_COLOURS, FATE_COLOURS, probability_text
from specdec.measure.bench import run_bench
from specdec.standins import noisy_copy

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def pair():
    """A byte-level target and its noisy copy (specdec.standins): drafts accepted often, not
    always."""
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


@pytest.fixture
def drawn(monkeypatch) -> list[Figure]:
    """Every matplotlib figure saved during the test, in order (closed, still readable)."""
    saved = []
    real = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return real(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def bar_heights(ax) -> np.ndarray:
    return np.array([r.get_height() for r in ax.patches if isinstance(r, Rectangle)])


def line_points(ax) -> list[np.ndarray]:
    return [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]


def drew_line(ax, y) -> bool:
    y = np.asarray(y, dtype=float)
    return any(
        pts.shape == y.shape and np.allclose(pts, y, equal_nan=True) for pts in line_points(ax)
    )


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_bench_figures(report, tmp_path, drawn):
    check_png(figures.plot_speedup_vs_k(report, tmp_path / "speedup.png"))
    ax = drawn[-1].axes[0]
    for t in (0.0, 0.8):
        pts = [p for p in report.points if p.temperature == t]
        assert drew_line(ax, [p.speedup for p in pts]), f"median speedups at T={t}"
        assert drew_line(ax, [p.predicted_loop for p in pts]), f"predictions at T={t}"

    check_png(figures.plot_measured_vs_predicted(report, tmp_path / "mvp.png"))
    points = {tuple(xy) for c in drawn[-1].axes[0].collections for xy in c.get_offsets()}
    for p in report.points:
        for predicted in (p.predicted, p.predicted_corrected, p.predicted_loop):
            assert any(np.allclose(xy, (predicted, p.speedup)) for xy in points)

    best = report.best(0.0)
    check_png(figures.plot_accepted_histogram(best.histogram, tmp_path / "hist.png"))
    np.testing.assert_allclose(
        bar_heights(drawn[-1].axes[0]), best.histogram / best.histogram.sum()
    )

    check_png(figures.plot_acceptance_vs_k(report, tmp_path / "alpha_k.png"))
    left, right = drawn[-1].axes
    for t in (0.0, 0.8):
        pts = [p for p in report.points if p.temperature == t]
        assert drew_line(left, [p.alpha for p in pts])
        assert drew_line(right, [p.tokens_per_round for p in pts])


def test_cost_figures(costs, tmp_path, drawn):
    check_png(figures.plot_forward_costs(costs, tmp_path / "costs.png"))
    Ts = sorted(costs.target_append)
    ms = np.array([costs.target_append[T] for T in Ts]) * 1e3
    left, right = drawn[-1].axes
    assert drew_line(left, ms)
    assert drew_line(left, [costs.draft_step * 1e3] * 2)
    np.testing.assert_allclose(bar_heights(right), ms / np.array(Ts))

    # a profile with known costs: v(T) = (3 + T) / 4, c = 0.1
    known = CostProfile(4e-3, 4e-4, {T: (3 + T) * 1e-3 for T in range(1, 6)})
    check_png(figures.plot_speedup_theory(known, [0.6, 0.8], tmp_path / "theory.png"))
    flat, measured = drawn[-1].axes
    ks = np.arange(1, 5)
    for a in (0.6, 0.8):
        E = (1 - a ** (ks + 1)) / (1 - a)
        assert drew_line(flat, E / (0.1 * ks + 1))
        assert drew_line(measured, E / (0.1 * ks + (4 + ks) / 4))

    curves = {"plain": {1: 3e-3, 2: 8e-3, 4: 12e-3}, "fast path": {1: 2.5e-3, 2: 2.7e-3, 4: 3e-3}}
    floors = {1: 2e-3, 2: 2e-3, 4: 2.2e-3}
    check_png(figures.plot_roofline(curves, floors, tmp_path / "roofline.png", mark_v=1.4))
    ms_panel, v_panel = drawn[-1].axes
    for per_T in (*curves.values(), floors):
        ms = np.array([per_T[T] for T in (1, 2, 4)]) * 1e3
        assert drew_line(ms_panel, ms) and drew_line(v_panel, ms / ms[0])
    assert drew_line(v_panel, [1.4, 1.4])

    times = {32: {1: 1e-6, 4: 2e-6}, 64: {1: 3e-6, 4: 8e-6}}  # seconds per product
    blocked = {64: {2: 4e-6, 4: 5e-6}}
    check_png(figures.plot_matmul_times(times, tmp_path / "matmul.png", blocked=blocked))
    per_call, per_row = drawn[-1].axes
    for table in (times, blocked):
        for by_k in table.values():
            ks = sorted(by_k)
            assert drew_line(per_call, [by_k[k] * 1e6 for k in ks])
            assert drew_line(per_row, [by_k[k] / k * 1e6 for k in ks])
    assert len(per_call.get_lines()) == 3


def test_model_figures(tmp_path, drawn):
    check_png(figures.plot_causal_mask(3, 8, tmp_path / "mask.png"))
    image = drawn[-1].axes[0].get_images()[0].get_array()
    # new row i (position 5 + i) sees slots 0 .. 5 + i
    np.testing.assert_array_equal(image, np.arange(8)[None, :] <= 5 + np.arange(3)[:, None])


def boxes_by_row(ax) -> dict[float, list[tuple[float, tuple]]]:
    """Token/slot boxes of a figure, by row centre: [(x centre, face colour)], left to right."""
    rows = {}
    for patch in ax.patches:
        if isinstance(patch, FancyBboxPatch):
            x, y = patch.get_x() + patch.get_width() / 2, patch.get_y() + patch.get_height() / 2
            rows.setdefault(round(y, 3), []).append((x, patch.get_facecolor()))
    return {y: sorted(row) for y, row in rows.items()}


def test_round_figures(run, tmp_path, drawn):
    prompt, result = run
    trace = result.trace
    r = trace[1]
    check_png(
        figures.plot_draft_rows(
            r.draft_tokens, r.q_rows, tmp_path / "draft.png", context_text="def f"
        )
    )
    titles = [ax.get_title() for ax in drawn[-1].axes]
    assert titles[0].startswith("q₁(· | context)") and titles[1].startswith("q₂(· | context, x₁)")
    for i, ax in enumerate(drawn[-1].axes):  # each panel: the top of q_i, x_i among them
        heights = [p.get_width() for p in ax.patches]
        assert max(heights) == pytest.approx(r.q_rows[i].max())
        assert f"q = {probability_text(r.q_rows[i, r.draft_tokens[i]])}" in ax.get_title()
    seq = np.concatenate([prompt, result.tokens])
    check_png(
        figures.plot_verification(
            r, tmp_path / "verify.png", last_context_token=int(seq[r.context_len - 1])
        )
    )
    printed = " ".join(texts(drawn[-1]))
    for j in range(len(r.draft_tokens)):
        assert f"p={probability_text(r.p_of_drafts[j])}" in printed
        assert f"q={probability_text(r.q_of_drafts[j])}" in printed

    check_png(figures.plot_cache_rounds(trace, prompt, tmp_path / "cache.png", n_rounds=5))
    # per round, the target panel colours exactly the trace's kept and rolled-back slots
    rows = boxes_by_row(drawn[-1].axes[0])
    for row, rnd in enumerate(trace[1:6]):
        before, end, after = rnd.target_cache
        faces = [face for _, face in rows[-row]]
        assert faces.count(to_rgba(CACHE_COLOURS["kept"])) == after - before
        assert faces.count(to_rgba(CACHE_COLOURS["rolled back"])) == end - after

    check_png(figures.plot_pipeline(trace, prompt, tmp_path / "pipeline.png", rounds=[1, 2, 3]))
    printed = texts(drawn[-1])
    for n in (1, 2, 3):
        rnd = trace[n]
        before, end, after = rnd.target_cache
        assert f"slots {before}–{end - 1}: {after - before} kept, {end - after} rolled back" in (
            printed
        )
        for q in rnd.q_of_drafts:
            assert probability_text(q) in printed
            assert probability_text(q) != "0.00"  # a drafted token had q > 0

    check_png(figures.plot_token_fates(trace, prompt, tmp_path / "fates.png"))
    # one box per token, prompt first, each coloured by its fate in the trace
    from specdec.report import fates

    faces = [
        face
        for row in sorted(boxes_by_row(drawn[-1].axes[0]).items(), reverse=True)
        for _, face in row[1]
    ]
    kinds = ["context"] * len(prompt) + [fate for _, fate in fates(trace)]
    colour = {**FATE_COLOURS, "accepted": FATE_COLOURS[ACCEPTED]}
    assert faces == [to_rgba(colour[kind]) for kind in kinds][: len(faces)]
    assert len(faces) >= len(prompt) + 10
    check_png(
        figures.plot_per_position_acceptance(
            {"run": result.stats, "again": [result.stats]}, tmp_path / "positions.png"
        )
    )
    lines = line_points(drawn[-1].axes[0])
    assert len(lines) == 2
    for y in lines:
        np.testing.assert_allclose(y, result.stats.per_position_acceptance, equal_nan=True)


def test_a_tiny_q_is_not_printed_as_zero():
    assert probability_text(0.0034) == "3e-3"
    assert probability_text(0.25) == "0.25"


def test_law_figures(run, tmp_path, drawn):
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
    # q; accepted mass min(p, q) with the corrected mass stacked on it; p; the samples
    np.testing.assert_allclose(
        bar_heights(drawn[-1].axes[0]), [0.8, 0.2, 0.6, 0.2, 0.0, 0.2, 0.6, 0.4, 0.59, 0.41]
    )
    r = result.trace[1]
    p, q = r.p_rows[0].astype(np.float64), r.q_rows[0].astype(np.float64)
    # the output law of one verified position, x drawn from q: verify_law given each x,
    # weighted by q(x). Speculative sampling's promise is that this is p itself.
    law = np.zeros_like(p)
    for x in np.flatnonzero(q):
        for (accepted, y), mass in verify_law(r.p_rows[:2], r.q_rows[:1], [x]).items():
            law[x if accepted == 1 else y] += q[x] * mass
    np.testing.assert_allclose(law, p, atol=1e-6)
    check_png(figures.plot_law_comparison(p, {"verify": law, "q": q}, tmp_path / "law.png"))
    ax = drawn[-1].axes[0]
    top = np.argsort(-p, kind="stable")[:10]
    shown = [np.append(d[top], 1 - d[top].sum()) for d in (p, law, q)]
    np.testing.assert_allclose(bar_heights(ax), np.concatenate(shown), atol=1e-6)

    # a target that can emit only three tokens: three named bars, the rest pooled as p = 0
    p3 = np.zeros(8)
    p3[[5, 2, 7]] = [0.5, 0.3, 0.2]
    check_png(figures.plot_law_comparison(p3, {"p": p3}, tmp_path / "law3.png", top=5))
    ax = drawn[-1].axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["'\\x05'", "'\\x02'", "'\\x07'", "others (p = 0)"], labels
    np.testing.assert_allclose(bar_heights(ax), [0.5, 0.3, 0.2, 0.0] * 2)
    check_png(
        figures.plot_oracle_power(
            {"reference": 0.4, "broken": 1e-30, "crash": 0.0}, tmp_path / "power.png"
        )
    )
    bars = [r for r in drawn[-1].axes[0].patches if isinstance(r, Rectangle)]
    np.testing.assert_allclose([b.get_width() for b in bars], [-np.log10(0.4), 30, 300])
    red, green = to_rgba("#d62728"), to_rgba("#2ca02c")
    assert [b.get_facecolor() for b in bars] == [green, red, red]  # alarm below 1e-3


def plot_functions_defined() -> list[str]:
    """Every plot_* function defined in a module of specdec.figures."""
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
    """A new plot_* function must be re-exported by specdec.figures and get a line in a test of
    tests/plots."""
    names = plot_functions_defined()
    not_exported = sorted(set(names) - set(figures.__all__))
    assert not not_exported, f"plot functions specdec.figures does not re-export: {not_exported}"
    source = "".join(f.read_text() for f in Path(__file__).parent.glob("test_*.py"))
    missing = [n for n in names if f"figures.{n}(" not in source]
    assert not missing, f"plot functions without a test: {missing}"


def test_cache_figure_refuses_a_trace_too_short(run, tmp_path):
    prompt, result = run
    with pytest.raises(ValueError, match="nothing from round"):
        figures.plot_cache_rounds(
            result.trace, prompt, tmp_path / "x.png", first_round=len(result.trace)
        )
