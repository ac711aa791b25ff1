"""The verify exercise (notebooks/exercises/my_verify.py, verify). checks.py: the four
families (law, rule, randomness, in-loop) and the hints, over exact.py (inputs whose outcome
is certain), joint.py (fixed inputs: the A/B example, fixed rows with k = 3) and tables.py
(drafts drawn from tables, against the target's law)."""
