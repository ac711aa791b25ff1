"""The EAGLE block exercise (notebooks/exercises/my_eagle_block.py, eagle_block_forward).
checks.py: two families: the block's rows against the grader's own forward (rule.py, float64,
to a float32 tolerance) on hand-made cases and on cases drawn from the grading's secret
(cases.py), the usual slips named (mistakes.py); and the rows at every step of a real EAGLE
drafter's run (round.py)."""
