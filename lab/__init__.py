"""specdec-lab's lab: the tools around the core (`reference/`, and later the `gpu/` twin).

    cli.py        the `specdec` command (demo, bench)
    bench.py      autoregressive vs speculative, measured in one run
    costs.py      what a forward pass costs here, and Leviathan's prediction from it
    timing.py     stage clocks the loops mark as they go
    report.py     text renderings of a run (the demo's account)
    figures/      every figure of the notebooks and docs
    bundled.py    the trained pair that ships in models/
    standins.py   untrained stand-in models (a random target, a noisy draft)
    fast_cpu.py   the opt-in CPU fast path of the model

The core never imports this package (tests/unit/test_layout.py says so).
"""
