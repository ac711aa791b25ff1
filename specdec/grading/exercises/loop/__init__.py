"""The loop exercise (notebooks/exercises/my_loop.py, speculative_generate). checks.py:
the tiny GPT pair, greedy runs (exact) and sampled runs held to the target's own law; also
the verify exercise's in-loop family (the reference loop around a submitted verify)."""
