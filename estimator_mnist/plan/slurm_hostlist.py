"""Slurm's compressed lists, expanded in Slurm's own order: host lists (`n[1-3,5]`, `a1,b[01-02]`) and task
counts per node (`2(x3),1`).

Hand-written rather than python-hostlist: that package is GPL-2.0-or-later and this project is Apache-2.0.
The order matters: Slurm starts the first ranks on the first node of the list as written, so nothing here
sorts (TensorFlow 2.15's SlurmClusterResolver sorts names as strings and puts `n10` before `n9`).
No TensorFlow.
"""

from __future__ import annotations

import re
from typing import List

from estimator_mnist.errors import UsageError

ERR_HOSTLIST = ("{var} is {got!r}, not a Slurm host list such as 'n[1-3,5]' or 'a1,b[01-02]'; run train under srun, "
                "or pass --task TYPE:INDEX")
ERR_TASKS_PER_NODE = ("{var} is {got!r}, not Slurm's tasks per node such as '2(x3),1'; run train under srun, or "
                      "pass --task TYPE:INDEX")

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def _split_top_level(text: str) -> List[str]:
    """Splits at the commas outside brackets: 'a[1,2],b' -> ['a[1,2]', 'b']."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise ValueError(text)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(text)
    parts.append(text[start:])
    return parts


def _expand_ranges(ranges: str) -> List[str]:
    """'01-03,7' -> ['01', '02', '03', '7']: each range keeps the zero padding of its first number."""
    numbers = []
    for item in ranges.split(","):
        match = _RANGE.match(item)
        if not match:
            raise ValueError(item)
        low, high = match[1], match[2] or match[1]
        if int(high) < int(low):
            raise ValueError(item)
        numbers.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return numbers


def _expand_one(item: str) -> List[str]:
    """One host expression; brackets may appear more than once ('r[1-2]n[1-2]': the last varies fastest)."""
    match = re.match(r"^([^\[\]]*)\[([^\[\]]+)\](.*)$", item)
    if not match:
        if not item or "]" in item:
            raise ValueError(item)
        return [item]
    prefix, ranges, rest = match.groups()
    tails = _expand_one(rest) if rest else [""]
    return [prefix + number + tail for number in _expand_ranges(ranges) for tail in tails]


def expand_hostlist(text: str, var: str = "SLURM_STEP_NODELIST") -> List[str]:
    """The node names of a Slurm host list, in Slurm's order. UsageError (one line, naming `var`) if malformed."""
    try:
        if not text or not text.strip():
            raise ValueError(text)
        return [name for part in _split_top_level(text.strip()) for name in _expand_one(part)]
    except ValueError:
        raise UsageError(ERR_HOSTLIST.format(var=var, got=text)) from None


def expand_tasks_per_node(text: str, var: str = "SLURM_STEP_TASKS_PER_NODE") -> List[int]:
    """'2(x3),1' -> [2, 2, 2, 1]: the task count of each node, in the host list's order."""
    counts = []
    for item in (text or "").strip().split(","):
        match = _COUNT.match(item.strip())
        if not match or int(match[1]) < 1 or (match[2] is not None and int(match[2]) < 1):
            raise UsageError(ERR_TASKS_PER_NODE.format(var=var, got=text))
        counts.extend([int(match[1])] * int(match[2] or 1))
    return counts
