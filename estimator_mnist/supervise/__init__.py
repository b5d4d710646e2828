"""Everything that starts, watches, signals, stops or restarts another process. No TensorFlow.

process_group: a process in its own group, stopped for sure, inspected (psutil); launch/: the `launch`
command's local cluster; task_parent and child_stderr: `train`'s thin parent of its TensorFlow process;
private_network and netns_holder: a local cluster's private network namespace; restart_budget and
manager_start: the one count of restarts, and a start under a cluster manager counted against it;
slurm_step and slurm_reruns: the Slurm batch script's watcher of its step and its reruns; run_summary: what a
supervised run leaves in run_summary.json, read back (`summary`).
"""
