"""Slurm: `train` as one task of an srun step (environment.py, hostlist.py) and the batch script that starts
the YAML's cluster as one (batch_script.py). Nothing here imports TensorFlow or contacts Slurm's daemons."""
