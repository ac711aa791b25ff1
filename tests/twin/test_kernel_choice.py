"""The preflight's choice between each fused kernel and its body (gpu/device/kernel_choice.py),
with made-up timings: the faster half is kept per (kernel, shapes), and the fused operations
obey it.

On a device the timer waits for the device; here a made-up timer says which half is faster,
the emulator (tests/twin/cuda_emulator.py) runs the kernels, and a spy on the launches shows
which shapes still launch their kernel after the choice.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import gpu
from gpu.device import fused, kernels
from gpu.device.backend import ON_DEVICE
from gpu.device.kernel_choice import Measured, describe, measure_choices
from gpu.device.kernels import KernelMode, Plan
from reference.config import GPTConfig
from reference.model import GPT, causal_placement, init_params
from tests.twin.cuda_emulator import compiler

pytestmark = pytest.mark.skipif(
    compiler() is None or ON_DEVICE, reason="no C++ compiler (g++), or on a device"
)


@pytest.fixture
def launched(emulator, monkeypatch):
    """Every fused call goes to the emulator; -> the list of (kernel, rows) launched."""
    names = []

    class Module:
        def get_function(self, name):
            def launch(grid, block, args):
                names.append((name, args[0].shape[0] if hasattr(args[0], "shape") else None))
                emulator.launch(Plan(name, grid, block, args, None))

            return launch

    monkeypatch.setattr(kernels, "mode", KernelMode(on=True, why_off=""))
    monkeypatch.setattr(kernels, "compiled_module", lambda: Module())
    monkeypatch.setattr(kernels.Choices, "body_faster", set())
    return names


def forward(model, rows: list[int]):
    # passes of these many new rows, one after another on one cache -> their logits, joined
    cache, out = model.new_cache(), []
    for T in rows:
        out.append(model.forward(np.arange(T) % model.n_vocab, cache))
        cache.commit(T)
    return np.concatenate(out)


def made_up(shape, half: str, run) -> float:
    # the body wins a linear of 4 rows, the kernel everything else (nothing is run: made up)
    name, shapes = shape
    body_wins = name.startswith("fused_linear") and shapes[0][0] == 4
    return {"kernel": 2.0, "body": 1.0}[half] if body_wins else {"kernel": 1.0, "body": 2.0}[half]


def test_the_faster_half_is_kept_per_kernel_and_shape_and_the_operations_obey(launched):
    cfg = GPTConfig(n_vocab=40, n_ctx=32, n_embd=32, n_head=2, n_layer=2)
    model = gpu.GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.3))
    want = forward(model, [4, 1])
    measured = measure_choices(lambda: forward(model, [4, 1]), timer=made_up, repeats=2)
    body = {m.shape for m in measured if m.choice == "body"}
    assert body and all(name.startswith("fused_linear") and s[0][0] == 4 for name, s in body)
    assert kernels.Choices.body_faster == body
    assert {m.shape[0] for m in measured} >= {"embed_rows", "fused_linear_8", "cached_attention"}
    launched.clear()
    np.testing.assert_allclose(forward(model, [4, 1]), want, atol=1e-5)
    linears = [rows for name, rows in launched if name.startswith("fused_linear")]
    assert linears and all(rows == 1 for rows in linears)  # 4 rows: the body ran
    assert ("embed_rows", 4) in launched  # the kernel still runs where it won


def test_a_measure_reports_both_halves_and_the_choice():
    m = Measured(("fused_linear", ((1, 384), (384, 1152))), kernel_s=20e-6, body_s=35e-6)
    assert m.choice == "kernel" and Measured(m.shape, 3e-5, 1e-5).choice == "body"
    line = describe(m)
    assert "fused_linear" in line and "1x384 384x1152" in line and line.endswith("-> kernel")


def test_the_preflight_prints_the_choices_and_checks_a_graph_replay(launched, capsys):
    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu_preflight.py"
    spec = importlib.util.spec_from_file_location("preflight", script)
    preflight = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(preflight)

    def model(n_layer, n_embd, seed):  # byte-level prompts: 128 ids
        cfg = GPTConfig(n_vocab=128, n_ctx=64, n_embd=n_embd, n_head=2, n_layer=n_layer)
        return GPT(cfg, init_params(cfg, np.random.default_rng(seed), std=0.3))

    pair = (model(2, 32, 0), model(1, 16, 1))
    preflight.kernel_choices(preflight.twin_loops(pair, new_tokens=6), made_up)
    preflight.graph_replay(pair, new_tokens=8)
    out = capsys.readouterr().out
    assert "ok    kernel choices:" in out and "-> body" in out and "-> kernel" in out
    assert "ok    graph capture: the draft's steps replayed" in out, out


def test_an_operation_fetches_its_kernel_from_the_compiled_module_once(emulator, monkeypatch):
    fetched = []

    class Module:
        def get_function(self, name):
            fetched.append(name)
            return lambda grid, block, args: emulator.launch(Plan(name, grid, block, args, None))

    module = Module()  # one module, as the device's compiled_module (functools.cache) gives
    monkeypatch.setattr(kernels, "mode", KernelMode(on=True, why_off=""))
    monkeypatch.setattr(kernels, "compiled_module", lambda: module)
    monkeypatch.setattr(kernels.Choices, "body_faster", set())
    monkeypatch.setattr(fused.layer_norm_rows, "launches_in", None)  # as a fresh process
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    g, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    first = fused.layer_norm_rows(x, g, b, 1e-5)
    np.testing.assert_allclose(fused.layer_norm_rows(x, g, b, 1e-5), first)
    np.testing.assert_allclose(first, fused.layer_norm_rows.body(x, g, b, 1e-5), atol=1e-5)
    assert fetched == ["layer_norm_rows"]  # two launches, one look-up


@pytest.fixture
def tiny_target():
    cfg = GPTConfig(n_vocab=40, n_ctx=1024, n_embd=32, n_head=2, n_layer=1)
    model = gpu.GPT(cfg, init_params(cfg, np.random.default_rng(0), std=0.3))
    return model, model.new_cache()


def test_an_attentions_choice_is_keyed_by_its_span_bucket(tiny_target):
    """The kernel's cost grows with the span it reads, the body's too but differently: a
    choice measured at a 20-position span is not applied at 900."""
    model, cache = tiny_target
    qkv = np.zeros((1, 3 * model.config.n_embd), np.float32)

    def key(span):
        cache.length = span - 1
        at = causal_placement(span - 1, 1)
        return kernels.plan_shape(fused.attention_plan(model, qkv, 0, cache, at))

    assert key(20) == key(30) != key(900)
    assert key(900) == key(1000)


def test_the_kernels_run_everywhere_inside_kernels_everywhere(monkeypatch):
    """The preflight's graph check compares a replay (kernels only: a body's cuBLAS cannot be
    captured) with the steps one by one: those too must run the kernels, not a body measured
    faster, or a near tie flips a token and graphs go off for nothing."""
    monkeypatch.setattr(kernels.Choices, "body_faster", {("fused_linear", ((4, 8),))})
    with kernels.kernels_everywhere():
        assert kernels.Choices.body_faster == set()
    assert kernels.Choices.body_faster == {("fused_linear", ((4, 8),))}
