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
    fast_cpu_plan.py  which of its tricks pay on this machine: measured, then chosen
    machine.py    which machine a number came from; the BLAS threads a run chooses
    choose_k.py   the demo's k, from this machine's measured alpha, c and v
    session_costs.py  one cost measurement per session, shared by the notebooks
    bench_summary.py  one row per bench run: machine types side by side

The core never imports this package (tests/unit/test_layout.py says so).
"""
