"""Measurements: each module times something on this machine and reports what it found.

    bench.py             autoregressive vs speculative, measured in one run (`specdec bench`)
    gpu_bench.py         the GPU twin's benchmark (`specdec bench --backend gpu`)
    summary.py           one row per bench run: machine types side by side
    methods.py           the method table: every drafter side by side, from one run
    roofline.py          where a verification pass spends its time, against its bytes and FLOPs
    choose_k.py          the demo's k, from this machine's measured alpha, c and v
    session_costs.py     one cost measurement per session, shared by the notebooks
    fast_path_report.py  what each trick of the CPU fast path buys here
    typical.py           typical acceptance against exact tree verification: speed and law

This file imports nothing: `import specdec.measure` costs neither numba nor the twin; each
module brings its own dependencies when it is imported.
"""
