"""Forks children the way the product's task parent does (subprocess.Popen with preexec_fn=die_with_parent:
fork, then exec) from a process whose gRPC client has run, as a pytest worker's has after a serve test, and
prints how many of them gRPC killed before their exec.

    python tests/process/grpc_fork_probe.py COUNT
"""

import signal
import subprocess
import sys
from concurrent import futures

import grpc

from estimator_mnist.supervise.process_group import die_with_parent


def main(count: str) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        channel.unary_unary("/probe/Call")(b"", timeout=5)  # UNIMPLEMENTED: what matters is that gRPC's pollers run
    except grpc.RpcError:
        pass
    aborted = 0
    for _ in range(int(count)):
        child = subprocess.Popen(["/bin/true"], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 preexec_fn=die_with_parent)
        aborted += child.wait(timeout=30) == -signal.SIGABRT
    channel.close()
    server.stop(None)
    print(aborted, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
