"""specdec-lab's lab: the tools around the core (`reference/`, and its `gpu/` twin).

    cli/          the `specdec` command: one module per command (demo, bench, course)
    bench.py      autoregressive vs speculative, measured in one run
    methods.py    the method table: every drafter side by side, from one run
    drafting.py   the drafters the command and the bench run, by name
    costs.py      what a forward pass costs here, and Leviathan's prediction from it
    timing.py     stage clocks the loops mark as they go
    report.py     text renderings of a run (the demo's account)
    text.py       the tokenizer a checkpoint pair is read and written with
    figures/      every figure of the notebooks and docs
    bundled.py    the trained pair that ships in models/
    standins.py   untrained stand-in models (a random target, a noisy draft)
    fast_cpu.py   the opt-in CPU fast path of the model
    fast_cpu_plan.py  which of its tricks pay on this machine: whole passes measured, then chosen
    fast_cpu_compiled.py  the few-row product and LayerNorm as compiled loops (numba, optional)
    fast_cpu_report.py  what each trick buys here (`python -m specdec.fast_cpu_report`)
    roofline.py   where a verification pass spends its time, against its bytes and FLOPs
    typical.py    typical acceptance against exact tree verification: speed and law
    gpu_bench.py  the GPU twin's benchmark (`specdec bench --backend gpu`)
    machine.py    which machine a number came from; the BLAS threads a run chooses
    choose_k.py   the demo's k, from this machine's measured alpha, c and v
    session_costs.py  one cost measurement per session, shared by the notebooks
    bench_summary.py  one row per bench run: machine types side by side
    course.py     the notebooks and exercises unpacked for a student (`specdec course DIR`)
    grading/      the exercises' grader (`specdec grade`, `specdec grade-class`)
    oracle/       the statistical oracle's machinery (docs/oracle.md)
    training/     the corpus and the training of the bundled pair and its self-drafting parts

The core never imports this package (tests/unit/test_layout.py says so).
"""
