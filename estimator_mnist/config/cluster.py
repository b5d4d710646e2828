"""The `cluster:` section: who trains where, as host:port addresses checked one by one.

No TensorFlow. Every problem is a one-line `UsageError` naming the file and key.
"""

from __future__ import annotations

import re

from estimator_mnist.errors import UsageError
from estimator_mnist.config.schema import CLUSTER_KEYS, TRAINING_ROLES, Address, ClusterConfig
from estimator_mnist.config.values import ERR_MISSING_KEY, ERR_TYPE, as_mapping, check_keys

ERR_ADDRESS = "{file}: {key} is {got!r}, not a 'host:port' address; write it like 'localhost:2222' (IPv6: '[::1]:2222')"
ERR_PORT = "{file}: {key} has port {port}, outside 1-65535; pick a free port in that range"
ERR_DUPLICATE = "{file}: {key} repeats the address {address} already used by {other}; give every task its own host:port"
ERR_NO_TRAINER = "{file}: cluster has no chief and no worker; add 'chief: [host:port]' or 'worker: [host:port, ...]'"
ERR_MANY = "{file}: cluster.{role} lists {count} addresses but at most one {role} is allowed; keep one"
ERR_EMPTY_LIST = "{file}: {key} is an empty list; list at least one 'host:port' or remove the key"

_ADDRESS = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>\d+)$")
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")


def parse_address(file, key, text) -> Address:
    """An Address from 'host:port' or '[v6]:port'."""
    match = _ADDRESS.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise UsageError(ERR_ADDRESS.format(file=file, key=key, got=text))
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise UsageError(ERR_PORT.format(file=file, key=key, port=port))
    return Address(host=match["v6"] or match["host"], port=port)


def _role_addresses(file, role, entries, seen):
    if isinstance(entries, str):
        entries = [entries]
    if not isinstance(entries, list):
        raise UsageError(ERR_TYPE.format(file=file, key=f"cluster.{role}", expected="a list of 'host:port' strings",
                                         got=entries))
    if not entries:
        raise UsageError(ERR_EMPTY_LIST.format(file=file, key=f"cluster.{role}"))
    addresses = []
    for index, text in enumerate(entries):
        key = f"cluster.{role}[{index}]"
        address = parse_address(file, key, text)
        if address in seen:
            raise UsageError(ERR_DUPLICATE.format(file=file, key=key, address=address, other=seen[address]))
        seen[address] = key
        addresses.append(address)
    return tuple(addresses)


def _evaluator_host(file, evaluator):
    if evaluator is None:
        return None
    if isinstance(evaluator, list):
        if len(evaluator) != 1:
            raise UsageError(ERR_MANY.format(file=file, role="evaluator", count=len(evaluator)))
        evaluator = evaluator[0]
    if not isinstance(evaluator, str) or not _HOST.match(evaluator):
        raise UsageError(ERR_TYPE.format(file=file, key="cluster.evaluator", got=evaluator,
                                         expected="a host name such as 'localhost' (the evaluator runs no server, "
                                                  "so no port)"))
    # 'host:port' is accepted for symmetry with the other roles (and TF_CONFIG); the port is unused.
    return parse_address(file, "cluster.evaluator", evaluator).host if _ADDRESS.match(evaluator) else evaluator


def parse_cluster(file, raw) -> ClusterConfig:
    if raw is None:
        raise UsageError(ERR_MISSING_KEY.format(file=file, key="cluster",
                                                hint="e.g. cluster: {chief: ['localhost:2222'], worker: ['localhost:2223']}"))
    mapping = as_mapping(file, raw, "cluster")
    check_keys(file, mapping, CLUSTER_KEYS, "cluster")
    seen = {}
    roles = {role: _role_addresses(file, role, mapping[role], seen) if mapping.get(role) is not None else ()
             for role in TRAINING_ROLES}
    if len(roles["chief"]) > 1:
        raise UsageError(ERR_MANY.format(file=file, role="chief", count=len(roles["chief"])))
    if not roles["chief"] and not roles["worker"]:
        raise UsageError(ERR_NO_TRAINER.format(file=file))
    return ClusterConfig(evaluator=_evaluator_host(file, mapping.get("evaluator")), **roles)
