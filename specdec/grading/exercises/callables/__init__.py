"""The callables exercise (notebooks/exercises/my_callables_loop.py,
speculative_sample). checks.py: a loop written against another library, graded through two
next-token callables (on loop/'s tiny pair and cases)."""
