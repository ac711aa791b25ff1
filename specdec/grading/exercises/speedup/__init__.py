"""The speedup exercise (notebooks/exercises/my_speedup.py, plan_k). checks.py: one family,
each answer held against the grader's, with a rate per draft position (one rate: specdec.costs'
formula) and plain decoding as the unit of cost; the random cases drawn from each grading's
secret."""
