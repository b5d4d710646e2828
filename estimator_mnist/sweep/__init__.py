"""`estimator-mnist sweep`: hyperparameter trials in parallel, one network per device. No TensorFlow.

space: --param to the trials' values; devices: a GPU or a disjoint set of
cores per trial; trials: one trial's YAML, process and records; stopping:
the median rule; scheduler: runs them; records: sweep.json, sweep.csv,
best.yaml; table: the console. The ensemble of the best trials is
ensemble.py (TensorFlow).

run: `build_plan` and `run_sweep`. The package itself imports nothing:
every task's parent imports the CLI, which needs only stopping.RULES.
"""
