"""The GCS test proxy (tests/gcs_proxy.py) reachable from inside a network namespace a test made (the simulated
pods of tests/e2e/simulated_pods.py, which have only their own loopback): a second listening socket, made inside
that namespace by setns(2) on this thread alone and then back, served by the same proxy state and handler in
this process. Connections a client makes to it arrive in the namespace; the proxy's own connections to the
emulator are made by threads in the machine's namespace, to its loopback. Nothing else is reachable from the
namespace, and nothing outside it reaches the listener."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Dict

from tests.gcs_proxy import QuietServer, _Handler  # pylint: disable=protected-access

CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


class NamespaceListener:
    """The proxy, also listening on 127.0.0.1 inside network namespace `namespace` (as `ip netns` names it)."""

    def __init__(self, proxy, namespace: str, port: int = 0):
        """`port`: 0 for any; a number to listen on the same port in several namespaces (Slurm's nodes, whose
        jobs all get the submitting environment)."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                self.server = QuietServer(("127.0.0.1", port), _Handler)
            finally:
                _setns(own)  # this thread, and every thread it starts, back in the machine's namespace
        finally:
            os.close(own)
            os.close(target)
        self.server.daemon_threads = True
        self.server.proxy = proxy
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name=f"gcs-proxy-{namespace}",
                                        daemon=True)
        self._thread.start()

    def env(self, machine_env: Dict[str, str]) -> Dict[str, str]:
        """The GCS server's environment (GcsServer.env()) for a process inside the namespace."""
        url = f"http://127.0.0.1:{self.port}"
        keys = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "STORAGE_EMULATOR_HOST")
        return {**machine_env, **{key: url for key in keys}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
