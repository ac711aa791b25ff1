"""The prompt-lookup exercise (notebooks/exercises/my_lookup.py, propose_lookup).
checks.py: one family, exact: the contract's proposals and q rows, then greedy runs of the
reference loop with the submission as its drafter (on loop/'s tiny pair)."""
