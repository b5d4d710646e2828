"""A model_dir and every record in it, on a disk or a bucket alike, through the storage layer. No TensorFlow.

Callers ask for what they need (the latest checkpoint, the newest export, the restart budget's record, a Slurm
step's port record, a preemption's mark, the checkpoint check's lock) and never join a name onto model_dir nor
ask which storage holds it: `layout` names every file and folder once, and each record has its module here.
TensorFlow writes its own files (checkpoints, events, exports) through its file systems, at the paths `layout`
gives it. tests/unit/test_model_dir_layout.py keeps the rule.
"""
