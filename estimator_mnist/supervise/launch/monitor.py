"""The launcher's view of a run's progress, from the structured files the tasks write. No log parsing.

Trainers write progress records (progress.py) and the evaluator appends to
eval_results.jsonl (checkpoints.py). A record counts only while it belongs
to the process the launcher started for that task, so the figures start
afresh after a restart.
"""

from __future__ import annotations

from collections import deque
from typing import Dict, List, Optional

from estimator_mnist.model_files import checkpoints
from estimator_mnist.config import Config, TaskId
from estimator_mnist.model_files.progress import fresh_rate, read_progress

RATE_WINDOW_SECS = 30.0  # global steps per second over this window give the time left


class Monitor:
    def __init__(self, config: Config, now: float):
        self._config = config
        self._pids: Dict[str, int] = {}
        self._seen: Dict[str, float] = {}
        self.chief = config.cluster.chief_task
        self.step: Optional[int] = None
        self.loss: Optional[float] = None
        self.images_per_sec: Optional[float] = None
        self.first_step_time: Optional[float] = None
        self.last_step_time: Optional[float] = None
        self.chief_step_time: Optional[float] = None
        self.leader_done = False  # the chief's record says its training is over (it may wait for the evaluation)
        self.last_change = now
        self.evaluations: List[dict] = []
        self._steps_seen = deque()  # (time, global step) of the leader, for the time left

    def track(self, task: TaskId, pid: int) -> None:
        """Records of `task` count from now on only when written by `pid`."""
        self._pids[str(task)] = pid

    def restart_from(self, step: Optional[int], now: float) -> None:
        self.step, self.loss, self.images_per_sec, self.last_change = step, None, None, now
        self.leader_done = False
        self._steps_seen.clear()

    def note_change(self, now: float) -> None:
        self.last_change = now

    def _current_records(self) -> Dict[str, dict]:
        records = read_progress(self._config.records_dir)
        return {name: r for name, r in records.items()
                if self._pids.get(name) in (r.get("pid"), r.get("parent_pid")) and r.get("time")}

    def update(self, now: float) -> List[dict]:
        """Reads the records and evaluations; returns the evaluations that are new since the last call."""
        records = self._current_records()
        for name, record in records.items():
            if record["time"] > self._seen.get(name, 0.0):
                self._seen[name] = record["time"]
                self.last_change = now
            first = record.get("first_step_time")
            if first is not None and (self.first_step_time is None or first < self.first_step_time):
                self.first_step_time = first
            self.last_step_time = max(self.last_step_time or 0.0, record["time"])
        leader = records.get(str(self.chief))
        steps = [r["global_step"] for r in records.values() if r.get("global_step") is not None]
        if leader is not None:
            self.chief_step_time = leader["time"]
            self.leader_done = bool(leader.get("done"))
        if leader is not None and leader.get("global_step") is not None:
            self.step, self.loss = leader["global_step"], leader.get("loss")
        elif steps:
            self.step = max(steps)
        if self.step is not None and (not self._steps_seen or self._steps_seen[-1][1] != self.step):
            self._steps_seen.append((now, self.step))
        while self._steps_seen and now - self._steps_seen[0][0] > RATE_WINDOW_SECS:
            self._steps_seen.popleft()
        rates = [rate for rate in (fresh_rate(r, now) for r in records.values()) if rate]
        self.images_per_sec = sum(rates) if rates else None
        evaluations = checkpoints.read_eval_results(self._config.model_dir)
        new = evaluations[len(self.evaluations):]
        if new:
            self.evaluations = evaluations
            self.last_change = now
        return new

    def started_since(self, when: float) -> bool:
        """Whether the chief made a step since `when`: a group started then is past its start-up."""
        return self.chief_step_time is not None and self.chief_step_time >= when

    def latest_eval(self) -> Optional[dict]:
        return self.evaluations[-1] if self.evaluations else None

    def final_evaluation(self) -> Optional[dict]:
        """The evaluation of a checkpoint at or past max_steps, if any."""
        records = self.evaluations or checkpoints.read_eval_results(self._config.model_dir)
        return checkpoints.final_of(records, self._config.training.max_steps)

    def seconds_left(self, now: float) -> Optional[float]:
        """Time to max_steps at the global-step rate of the last RATE_WINDOW_SECS, once it is known."""
        if len(self._steps_seen) < 2:
            return None
        (t0, s0), (t1, s1) = self._steps_seen[0], self._steps_seen[-1]
        if s1 <= s0 or t1 <= t0:
            return None
        return max(0, self._config.training.max_steps - s1) / ((s1 - s0) / (t1 - t0)) - (now - t1)
