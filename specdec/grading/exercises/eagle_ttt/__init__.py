"""EAGLE-3's training-time test (notebooks/exercises/my_eagle_ttt.py, training_time_test_step).
model.py: the tiny drafter unrolled, its loss and its gradients by hand (the contract, and the
slips); cases.py: the shown and the fresh cases, the call and the reading of a reply;
checks.py: three families (inputs, loss, gradients); mistakes.py: the slips, named."""
