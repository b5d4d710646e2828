"""Before TensorFlow: where each task is, on what machine, and the TaskPlan and TaskSpec it runs with.

The cluster's topology and TF_CONFIG, the hosts and ports, the CPU facts,
`plan_task`, and every source of `train`'s task: --task with the YAML
(task_source.py, which resolves), TF_CONFIG (tf_config_source.py), Slurm's
step (slurm_source.py, slurm_hostlist.py) and one process
(single_process_source.py), each a TaskSource (resolved_task.py). No TensorFlow.
"""
