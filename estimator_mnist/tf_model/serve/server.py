"""`estimator-mnist serve`: checks the model path and the port without TensorFlow, then loads the newest export,
watches for newer ones and answers HTTP with waitress (a threaded WSGI server) until Ctrl-C.

The listening socket is bound here, before TensorFlow is imported, so that
a busy port is one line and exit 2 within a second, and so that no request
can reach a half-started server.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys

from estimator_mnist.errors import UsageError
from estimator_mnist.plan.hosts import LOOPBACK_HOSTS
from estimator_mnist.startup_noise import before_import

THREADS = 32  # waitress' request threads: each waits on the batcher, so they bound the concurrent requests
ERR_NO_MODEL = ("{path}: no such directory; give an export directory, a model_dir or a run directory, as for "
                "predict (a model_dir without an export yet is served from its first export on)")
ERR_UNREADABLE = "{path}: cannot be read ({reason}); give a directory this user can read"
ERR_PORT = "port {port} on {host} cannot be used ({reason}); give another with --port, or stop what holds it"
ERR_LOAD = "{path}: the export {export} cannot be loaded: {reason}"
WARN_EXPOSED = ("estimator-mnist: warning: serving on {host}:{port}, not on loopback: anyone who can reach this "
                "port can use the model (there is no authentication)")


def check_model_path(path: str) -> None:
    if not os.path.isdir(path):
        raise UsageError(ERR_NO_MODEL.format(path=path))
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(ERR_UNREADABLE.format(path=path, reason="permission denied"))
    try:
        os.listdir(path)
    except OSError as exc:
        raise UsageError(ERR_UNREADABLE.format(path=path, reason=exc.strerror or exc)) from None


def listen(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(ERR_PORT.format(port=port, host=host, reason=f"unknown host: {exc}")) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise UsageError(ERR_PORT.format(port=port, host=host, reason=reason)) from None
    return sock


def exposure_warning(host: str, port: int) -> str:
    """The one warning for an address other than loopback, or ''."""
    return "" if host in LOOPBACK_HOSTS or host.startswith("127.") else WARN_EXPOSED.format(host=host, port=port)


def _log(message: str) -> None:
    print(f"estimator-mnist serve: {message}", flush=True)


def _load_first(versions, path: str) -> None:
    """The export there is now, loaded before the port answers; one that cannot be loaded is bad input."""
    versions.poll()
    served = versions.acquire()
    if served is not None:
        served.release()
        return
    failed = [s for s in versions.states() if s[1] == "END" and s[2] != "OK"]
    if failed:
        raise UsageError(ERR_LOAD.format(path=path, export=failed[0][0], reason=failed[0][3]))
    _log(f"no export in {path} yet: serving its first export as soon as it appears")


def run(args) -> int:
    check_model_path(args.model)
    sock = listen(args.host, args.port)
    try:
        warning = exposure_warning(args.host, args.port)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        before_import()  # TensorFlow's start-up notices say nothing about serving (startup_noise.py)
        from estimator_mnist.tf_model.serve.model import LoadedModel  # pylint: disable=import-outside-toplevel  # TensorFlow, after the checks
        from estimator_mnist.tf_model.serve.versions import Versions  # pylint: disable=import-outside-toplevel

        versions = Versions(args.model, LoadedModel, log=_log, poll_secs=args.poll_secs)
        _load_first(versions, args.model)
        return _serve(args, sock, versions)
    finally:
        sock.close()


def _serve(args, sock: socket.socket, versions) -> int:
    # pylint: disable=import-outside-toplevel  # Flask and waitress only once the input is known to be good
    from waitress.server import create_server

    from estimator_mnist.tf_model.serve.app import create_app, INFO_PATH, ServingApi
    from estimator_mnist.tf_model.serve.batcher import Batcher

    logging.getLogger("waitress").setLevel(logging.ERROR)  # its queue-depth notices are no news under load
    batcher = Batcher(args.max_batch_size, args.batch_timeout_ms / 1000.0).start()
    versions.start()
    app = create_app(ServingApi(args.name, versions, batcher))
    server = create_server(app, sockets=[sock], threads=THREADS, clear_untrusted_proxy_headers=True)
    host = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{host}:{args.port}"
    _log(f"the page: {base}/  TF Serving's REST API: {base}/v1/models/{args.name}  "
         f"the served version: {base}{INFO_PATH}  (Ctrl-C stops)")
    interrupted = []

    def on_ctrl_c(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt  # waitress' loop takes it as the end of serving, and returns

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        server.run()
    finally:  # Ctrl-C or any failure: nothing is left running
        signal.signal(signal.SIGINT, previous)
        server.close()
        batcher.stop()
        versions.stop()
    if interrupted:
        raise KeyboardInterrupt  # exit 130 (cli.py)
    return 0
