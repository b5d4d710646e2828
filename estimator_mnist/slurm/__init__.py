"""Slurm's batch script that starts the YAML's cluster as one srun step (batch_script.py, script_body.py). A task
of that step finds itself in plan/slurm_source.py; the script's watcher and reruns are supervise/slurm_step.py and
supervise/slurm_reruns.py. Nothing here imports TensorFlow or contacts Slurm's daemons."""
