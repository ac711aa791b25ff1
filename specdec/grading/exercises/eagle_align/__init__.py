"""The EAGLE alignment exercise (notebooks/exercises/my_eagle_align.py, catch_up_pairs).
checks.py: two families, every check exact: the pairs on five groups of cases (cases.py: the
rule, the cases, the submission's call) with the usual slips named (mistakes.py), and the
pairs driving a real EAGLE drafter through the reference loop (round.py)."""
