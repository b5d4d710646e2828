"""`estimator-mnist sweep-status`: a sweep's state while it runs, from its shared records alone. No TensorFlow.

It reads sweep.json (each trial's state, written by whoever runs it: the
local scheduler or the trial's Slurm array task) and, for a running trial,
its step and latest evaluation from its own directory; it takes no lock and
changes nothing, so it can run on any node that sees the sweep directory (or
the bucket, for a gs:// one), as often as wanted.
"""

from __future__ import annotations

from collections import Counter

from estimator_mnist.sweep import layout, records, trials
from estimator_mnist.sweep.table import rows_text


def status_text(sweep_dir) -> str:
    """The table of the sweep in `sweep_dir`, a line of counts and the best trial so far."""
    sweep_dir = records.location(sweep_dir)
    record = records.read_sweep(sweep_dir)
    rows = []
    for row in record["trials"]:
        row = dict(row)
        if row["state"] == "running":
            live = trials.live(layout.trial_dir(sweep_dir, row["trial"]))
            row.update({k: v for k, v in live.items() if v is not None})
        rows.append(row)
    key = records.ranked_by(record)
    counts = Counter(r["state"] for r in rows)
    lines = rows_text(rows, key)
    lines.append(f"{len(rows)} trials: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    ranked = records.best_trials(record)
    if ranked:
        lines.append(f"best so far: {ranked[0]['trial']} ({' '.join(records.as_overrides(ranked[0]['values']))}) "
                     f"{records.figures_text(ranked[0], key)}")
    return "\n".join(lines)
