"""A Slurm sweep's records read while array tasks update them: 4 real processes rewrite sweep.json, sweep.csv and
best.yaml under the sweep's lock (as array tasks on 4 nodes do), and a reader that takes no lock (sweep-status,
ensemble, a user's `cat`) never sees one of them empty or cut short (issue 54, check 3)."""

import multiprocessing
import time
from pathlib import Path

import yaml

from estimator_mnist.slurm import sweep_script
from estimator_mnist.sweep import records, shared
from estimator_mnist.sweep.run import array_script, build_plan

BASE = """
cluster: {{chief: ["localhost:1"]}}
training: {{max_steps: 20, save_checkpoints_steps: 10}}
data_dir: {data_dir}
"""
UPDATES = 40


def _writer(plan, index: int) -> None:
    """One array task: its trial's row finished again and again with a new figure, results rewritten each time."""
    name = plan.trials[index].name
    batches = {t.name: t.batch for t in plan.trials}
    for step in range(UPDATES):
        figure = 0.9 + (step * 4 + index) / 10000

        def results(record):
            return records.write_results(plan.sweep_dir, record, plan.thresholds, plan.base_data, plan.base_file,
                                         batches)

        shared.update_row(plan.sweep_dir, name, lambda row, f=figure: row.update(
            state="finished", validation_accuracy=f, accuracy=f), results)


def test_best_yaml_and_sweep_csv_are_never_seen_empty_or_cut_short_while_4_processes_update_them(tmp_path):
    (tmp_path / "data").mkdir()
    base = tmp_path / "base.yaml"
    base.write_text(BASE.format(data_dir=tmp_path / "data"))
    plan = build_plan(str(base), ["model.dropout=0.0,0.1,0.2,0.3"], sweep_dir=str(tmp_path / "s"), slurm=True)
    array_script(plan, [], sweep_script.ArrayOptions())
    shared.update_row(plan.sweep_dir, "trial-000", lambda row: row.update(state="finished", validation_accuracy=0.5,
                                                                          accuracy=0.5),
                      lambda record: records.write_results(plan.sweep_dir, record, plan.thresholds, plan.base_data,
                                                           plan.base_file, {t.name: t.batch for t in plan.trials}))
    best, table = Path(plan.sweep_dir) / records.BEST_FILE, Path(plan.sweep_dir) / records.CSV_FILE
    writers = [multiprocessing.Process(target=_writer, args=(plan, i)) for i in range(4)]
    for writer in writers:
        writer.start()
    reads, bad = 0, []
    while any(w.is_alive() for w in writers) or reads < 50:
        text, rows = best.read_text(), table.read_text().splitlines()
        reads += 1
        data = yaml.safe_load(text) if text.endswith("\n") else None
        if not text.startswith("# ") or not isinstance(data, dict) or "model" not in data or len(rows) != 5:
            bad.append((text[-80:], len(rows)))
        time.sleep(0.001)
    for writer in writers:
        writer.join(30)
    assert [w.exitcode for w in writers] == [0] * 4
    assert not bad, f"{len(bad)} of {reads} reads saw a file empty or cut short: {bad[:3]}"
    final = records.read_sweep(plan.sweep_dir)
    assert [t["validation_accuracy"] for t in final["trials"]] == [0.9 + ((UPDATES - 1) * 4 + i) / 10000
                                                                   for i in range(4)]
    assert final["best"] == "trial-003" and "trial-003" in best.read_text()
