"""The sweep's console: a live table of the trials on a terminal, one line per event elsewhere. No TensorFlow."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Dict, List

from estimator_mnist.sweep.space import as_overrides

UP_AND_CLEAR = "\x1b[{n}F\x1b[J"  # cursor up n lines to their start, clear to the end of the screen
TABLE_EVERY_SECS = 2.0
LINE_EVERY_SECS = 30.0
CHOSE_NOTE = {"validation_accuracy": "* chooses: the validation accuracy stops and ranks the trials; the test "
                                     "accuracy is only reported",
              "accuracy": "* chooses: no validation split, so the TEST accuracy stops and ranks the trials"}


def _fmt(value, pattern: str = "{}") -> str:
    return "-" if value is None else pattern.format(value)


def rows_text(rows: List[dict], ranked_by: str = "validation_accuracy") -> List[str]:
    """The table: trial, values, device, step, latest validation and test accuracy, state; and which one chooses."""
    keys = list(dict.fromkeys(k for r in rows for k in r["values"]))
    by_validation = ranked_by == "validation_accuracy"
    header = ["trial", *keys, "device", "step", "val_acc*" if by_validation else "val_acc",
              "test_acc" if by_validation else "test_acc*", "state"]
    body = [[r["trial"], *[json.dumps(r["values"].get(k)) for k in keys], _fmt(r.get("device")),
             _fmt(r.get("global_step")), _fmt(r.get("validation_accuracy"), "{:.4f}"),
             _fmt(r.get("accuracy"), "{:.4f}"), r["state"]] for r in rows]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
            for line in [header, *body]] + [CHOSE_NOTE[ranked_by]]


class SweepConsole:
    def __init__(self, out=None, tty=None, clock=time.time):
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.clock = clock
        self._drawn = 0  # lines of the live table now on the terminal
        self._drawn_at = 0.0

    @staticmethod
    def values_text(values: Dict[str, object]) -> str:
        return " ".join(as_overrides(values))

    def _clear(self) -> None:
        if self._drawn:
            self.out.write(UP_AND_CLEAR.format(n=self._drawn))
            self._drawn = 0

    def event(self, text: str) -> None:
        self._clear()
        print(f"sweep: {text}", file=self.out, flush=True)

    def table(self, rows: List[dict], running, ranked_by: str = "validation_accuracy") -> None:
        """On a terminal, the table redrawn in place every TABLE_EVERY_SECS; elsewhere (a log, CI), one line on
        the running trials every LINE_EVERY_SECS."""
        every = TABLE_EVERY_SECS if self.tty else LINE_EVERY_SECS
        if self.clock() - self._drawn_at < every:
            return
        self._drawn_at = self.clock()
        if not self.tty:
            states = Counter(r["state"] for r in rows)
            busy = ", ".join(f"{r['trial']} step {_fmt(r.get('global_step'))} validation accuracy "
                             f"{_fmt(r.get('validation_accuracy'), '{:.4f}')} test accuracy "
                             f"{_fmt(r.get('accuracy'), '{:.4f}')}" for r in rows if r["trial"] in running)
            counts = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
            self.event(f"{busy or 'no trial running'} ({counts})")
            return
        self._clear()
        lines = rows_text(rows, ranked_by)
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()
        self._drawn = len(lines)

    def final(self, rows: List[dict], ranked_by: str = "validation_accuracy") -> None:
        self._clear()
        print("\n".join(rows_text(rows, ranked_by)), file=self.out, flush=True)
