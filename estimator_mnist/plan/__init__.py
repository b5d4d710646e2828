"""Before TensorFlow: where each task is, on what machine, and the TaskPlan and TaskSpec it runs with.

The cluster's topology and TF_CONFIG, the hosts and ports, the CPU facts,
where `train` gets its task from (YAML, TF_CONFIG, Slurm), and `plan_task`.
No TensorFlow.
"""
