"""specdec/measure/roofline.py: the bytes and FLOPs it charges a pass, and the timing it does
inside one."""

from __future__ import annotations

import numpy as np
import pytest

from reference import GPT, GPTConfig, init_params
from specdec.fast_cpu import fast
from specdec.measure import roofline

CFG = GPTConfig(n_vocab=40, n_ctx=64, n_embd=32, n_head=2, n_layer=2)


def tiny() -> GPT:
    return GPT(CFG, init_params(CFG, np.random.default_rng(0)))


def test_a_pass_reads_every_linear_weight_once_and_does_two_flops_per_weight_and_row():
    model = tiny()
    linear = {n: w for n, w in model.params.items() if n.startswith("h.") and ".ln_" not in n}
    n_weights = sum(w.size for n, w in linear.items() if n.endswith(".weight"))
    n_params = sum(w.size for w in linear.values())  # weights and biases
    for T in (1, 5):
        products = {p.name: p for p in roofline.pass_products(model, T, S=20)}
        names = roofline.LINEARS
        assert sum(products[n].bytes for n in names) == 4 * n_params
        assert sum(products[n].flops for n in names) == 2 * T * n_weights
        # attention: K and V of every layer over S keys; q k^T and p v over T rows
        assert products["attention"].bytes == 4 * 2 * CFG.n_layer * 20 * CFG.n_embd
        assert products["attention"].flops == 2 * 2 * CFG.n_layer * T * 20 * CFG.n_embd
        assert products["logits"].flops == 2 * T * CFG.n_vocab * CFG.n_embd


@pytest.mark.parametrize("T, S", [(0, 5), (6, 5), (2.0, 5)])
def test_a_pass_with_no_rows_or_more_rows_than_keys_is_refused(T, S):
    with pytest.raises(ValueError, match="1 <= T <= S"):
        roofline.pass_products(tiny(), T, S)


def test_the_floor_is_the_bytes_term_for_few_rows_and_the_flops_term_for_many():
    model = tiny()
    rates = roofline.Rates(bandwidth=1e9, flops=1e10, dram_bandwidth=1e9)
    one = roofline.floor_seconds(model, 1, 20, rates)
    assert roofline.floor_seconds(model, 2, 21, rates) < 1.01 * one  # still reading-bound
    many = roofline.floor_seconds(model, 1000, 1000, rates)
    flops = sum(p.flops for p in roofline.pass_products(model, 1000, 1000))
    assert many >= flops / rates.flops and many > 10 * one


def test_pass_breakdown_adds_up_and_leaves_the_model_as_it_was():
    for model in (tiny(), fast(tiny())):
        context = np.arange(30) % CFG.n_vocab
        parts = roofline.pass_breakdown(model, context, T=4, repeats=3)
        assert set(parts) == {*roofline.LINEARS, "attention", "logits", "other", "total"}
        assert all(parts[n] > 0 for n in (*roofline.LINEARS, "attention", "logits", "total"))
        assert np.isclose(sum(v for n, v in parts.items() if n != "total"), parts["total"])
        assert not {"linear", "attend", "logits"} & set(vars(model))  # the timers are gone


def test_the_breakdown_table_sets_each_measured_product_against_its_floor():
    model = tiny()
    rates = roofline.Rates(bandwidth=1e9, flops=1e10, dram_bandwidth=1e9)
    names = [*roofline.LINEARS, "attention", "logits", "other", "total"]
    measured = {T: dict.fromkeys(names, T * 1e-3) for T in (1, 4)}
    rows = roofline.breakdown_table(model, 20, rates, measured).splitlines()
    assert rows[0].startswith("| product (2 layers) | bytes (T = 1) | T=1:")
    assert [r.split(" | ")[0][2:] for r in rows[2:]] == names
    floor_4 = roofline.floor_seconds(model, 4, 24, rates)
    assert rows[-1].endswith(f"| 4000 / {floor_4 * 1e6:.0f} |")  # total at T = 4
    assert "| other |  | 1000 / - | 4000 / - |" in rows


def test_bad_options_are_refused_before_anything_is_measured(capsys):
    for argv in (["--threads", "0"], ["--repeats", "-1"]):
        with pytest.raises(SystemExit) as stop:
            roofline.main(argv)
        assert stop.value.code == 2
        assert "must be >= 1" in capsys.readouterr().err
