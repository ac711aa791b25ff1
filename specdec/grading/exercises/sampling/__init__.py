"""The sampling exercise (notebooks/exercises/my_sampling.py, sampling_distribution).
checks.py: one family, each row held against reference.sampling.probabilities, and the rows
of the known mistakes, for the hints."""
