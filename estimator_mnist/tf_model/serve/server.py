"""`estimator-mnist serve`: checks the model path and the ports without TensorFlow, then loads the newest export,
watches for newer ones, answers HTTP with waitress (a threaded WSGI server) and gRPC with grpcio, until SIGTERM
or Ctrl-C, which drain (lifecycle.py): exit 0 after SIGTERM, 130 after Ctrl-C, 143 when a second signal cut the
drain short.

Both ports are bound here, before TensorFlow is imported, so that a busy
port is one line and exit 2 within a second, and so that no request can
reach a half-started server. The process handles its own signals: only
flags are set in the handlers, the main thread's loop acts on them.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import resource
import signal
import socket
import sys
import time

from estimator_mnist.config import timeouts
from estimator_mnist import storage
from estimator_mnist.errors import UsageError
from estimator_mnist.storage.errors import StorageUnavailable
from estimator_mnist.storage.urls import check_url
from estimator_mnist.plan.hosts import LOOPBACK_HOSTS
from estimator_mnist.serve_settings import ServeSettings
from estimator_mnist.startup_noise import before_import

TRIM_SECS = 2.0  # how often freed memory is handed back (trim_memory): a rhythm, no bound
STOPPED_BY_SECOND_SIGNAL = 143  # 128 + SIGTERM: the drain was cut short
ERR_NO_MODEL = ("{path}: no such directory; give an export directory, a model_dir or a run directory, as for "
                "predict (a model_dir without an export yet is served from its first export on)")
ERR_UNREADABLE = "{path}: cannot be read ({reason}); give a directory this user can read"
ERR_PORT = "port {port} on {host} cannot be used ({reason}); give another with {flag}, or stop what holds it"
ERR_LOAD = "{path}: the export {export} cannot be loaded: {reason}"
WARN_EXPOSED = ("estimator-mnist: warning: serving on {host}:{port}, not on loopback: anyone who can reach this "
                "port can use the model (there is no authentication)")


def check_model_path(path: str) -> None:
    """One line (exit 2) for a model path serve cannot read, asked of the storage layer: a bucket's (gs://)
    existence and credentials (storage.check_bucket; its exports are looked for as serve polls them), a local
    directory's presence and listing. A storage that fails to serve past its bound stays exit 200."""
    if check_url(path, "serve", "--model"):  # another scheme (s3://...): refused, naming gs://
        storage.check_bucket(path)
        return
    try:
        if not storage.isdir(path):
            raise UsageError(ERR_NO_MODEL.format(path=path))
        storage.listdir(path)
    except PermissionError:
        raise UsageError(ERR_UNREADABLE.format(path=path, reason="permission denied")) from None
    except StorageUnavailable:
        raise
    except OSError as exc:
        raise UsageError(ERR_UNREADABLE.format(path=path, reason=exc.strerror or exc)) from None


def listen(host: str, port: int, flag: str = "--port") -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(ERR_PORT.format(port=port, host=host, reason=f"unknown host: {exc}", flag=flag)) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise UsageError(ERR_PORT.format(port=port, host=host, reason=reason, flag=flag)) from None
    return sock


def check_grpc_port(host: str, port: int) -> None:
    """A busy gRPC port or an unknown host, named as for REST before TensorFlow loads (grpc_server.py binds it
    once the model is loaded)."""
    listen(host, port, "--grpc-port").close()


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


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to do
        return None


def return_freed_memory() -> None:
    """Large blocks always mmap'd, so that freeing them returns them to the system: glibc otherwise raises its
    mmap threshold after the first large free (up to 32 MiB), and a burst of requests' inputs stays in the
    heap as resident memory for ever. M_MMAP_THRESHOLD (-3) set to its default, 128 KiB, keeps it there."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(-3, 128 * 1024)


def raise_file_limit(wanted: int = 4096) -> None:
    """Room for http_server.CONNECTION_LIMIT connections and gRPC's beside them: the soft limit of open files
    raised towards `wanted`, within the hard limit (often 1024 soft by default)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def trim_memory() -> None:
    """The free pages of every malloc arena back to the system: gRPC reads a message into many small blocks,
    spread over its threads' arenas, which a burst of large messages leaves resident (malloc_trim(3))."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def run(args) -> int:
    settings = ServeSettings.from_args(args)
    check_model_path(settings.model)
    sock = listen(settings.host, settings.port)
    try:
        if settings.grpc_port:
            check_grpc_port(settings.host, settings.grpc_port)
        warning = exposure_warning(settings.host, settings.port)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        return_freed_memory()
        raise_file_limit()
        # A thread that needs the GIL for a 1-image request waits at most this long for another's bytecode
        # (docs/serving.md "The GIL": measured with benchmarks/serve_abuse.py).
        sys.setswitchinterval(settings.switch_interval_secs)
        before_import()  # TensorFlow's start-up notices say nothing about serving (startup_noise.py)
        # pylint: disable=import-outside-toplevel  # TensorFlow, after the checks
        from estimator_mnist.tf_model.serve.batcher import Batcher
        from estimator_mnist.tf_model.serve.model import LoadedModel
        from estimator_mnist.tf_model.serve.versions import Versions

        batcher = Batcher(settings.max_batch_size, settings.batch_timeout_secs,
                          max_queued_images=settings.max_queued_images, max_client_images=settings.max_client_images)
        versions = Versions(settings.model, LoadedModel, log=_log, poll_secs=settings.poll_secs,
                            unload_wait_secs=settings.request_timeout_secs, retire=batcher.retire)
        _load_first(versions, settings.model)
        return _serve(settings, sock, versions, batcher)
    finally:
        sock.close()


def _serve(settings: ServeSettings, sock: socket.socket, versions, batcher) -> int:
    # pylint: disable=import-outside-toplevel  # Flask, waitress and the gRPC services once the input is known good
    from estimator_mnist.tf_model.serve.app import create_app, INFO_PATH, READY_PATH
    from estimator_mnist.tf_model.serve.grpc_server import GrpcServer
    from estimator_mnist.tf_model.serve.http_server import HttpServer
    from estimator_mnist.tf_model.serve.lifecycle import Lifecycle
    from estimator_mnist.tf_model.serve.serving_api import ServingApi

    logging.getLogger("waitress").setLevel(logging.ERROR)  # its queue-depth notices are no news under load
    lifecycle = Lifecycle(settings.drain_delay_secs, settings.drain_secs)
    api = ServingApi(settings.name, versions, batcher, deadline_secs=settings.request_timeout_secs,
                     lifecycle=lifecycle, max_images=settings.max_images_per_request,
                     trusted_proxies=settings.trusted_proxies)
    http = HttpServer(create_app(api, settings.max_body_bytes, settings.enable_cors), sock, lifecycle,
                      settings.max_body_bytes)
    grpc_server = GrpcServer(api, settings.host, settings.grpc_port, settings.grpc_max_message_bytes) \
        if settings.grpc_port else None
    versions.start()
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    base = f"http://{host}:{settings.port}"
    grpc_text = f"  TF Serving's gRPC API: {host}:{settings.grpc_port}" if grpc_server is not None else ""
    _log(f"the page: {base}/  TF Serving's REST API: {base}/v1/models/{settings.name}{grpc_text}  "
         f"the served version: {base}{INFO_PATH}  ready: {base}{READY_PATH}  (SIGTERM or Ctrl-C drains)")
    signals: list = []
    previous = {number: signal.signal(number, lambda signum, frame: signals.append(signum))
                for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        _run_until_drained(http, grpc_server, lifecycle, signals, api)
    finally:  # a signal or any failure: nothing is left running, within SERVE_CLOSE_SECS in all
        for number, handler in previous.items():
            signal.signal(number, handler)
        closed = _close(http, grpc_server, batcher, versions, time.monotonic() + timeouts.SERVE_CLOSE_SECS)
    code = 0
    if len(signals) > 1:
        code = STOPPED_BY_SECOND_SIGNAL if signals[0] != signal.SIGINT else 130
    elif signals[0] == signal.SIGINT:
        code = 130
    if not closed:
        # A load or a model call still runs in a daemon thread: TensorFlow's exit handlers must not race it.
        _log(f"an export still loading or a model call still running after {timeouts.SERVE_CLOSE_SECS:g} s: "
             "exiting without it")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # pylint: disable=protected-access
    return _interrupted() if code == 130 else code


def _close(http, grpc_server, batcher, versions, end: float) -> bool:
    """HTTP, gRPC, the batcher and the versions, each given what is left until `end`; False if a thread of
    theirs still runs then."""
    def left() -> float:
        return max(end - time.monotonic(), 0.0)

    http.close(left())
    if grpc_server is not None:
        grpc_server.close(left())
    batcher.stop(timeout=left())
    return versions.stop(wait_secs=left())


def _interrupted() -> int:
    raise KeyboardInterrupt  # exit 130 (cli.py)


def _run_until_drained(http, grpc_server, lifecycle, signals: list, api) -> None:
    """Serves until a signal, then drains: not ready at once, new requests answered for the delay, then refused
    while those in flight finish (at most drain_secs); those still waiting for the model then are answered
    UNAVAILABLE (SERVE_ANSWER_SECS to write it), never reset. A second signal ends the drain at once."""
    trimmed = time.monotonic()
    while not signals:
        http.poll(0.2)
        if time.monotonic() - trimmed > TRIM_SECS:
            trim_memory()
            trimmed = time.monotonic()
    lifecycle.begin_drain()
    name = signal.Signals(signals[0]).name
    _log(f"{name}: draining: not ready; new requests answered for {lifecycle.delay_secs:g} s more, then refused; "
         f"those in flight given {lifecycle.drain_secs:g} s (a second signal stops at once)")
    refuse_at = time.monotonic() + lifecycle.delay_secs
    while len(signals) < 2 and time.monotonic() < refuse_at:
        http.poll(min(0.2, max(refuse_at - time.monotonic(), 0.0)))
    lifecycle.refuse()
    http.stop_accepting()
    stopped = grpc_server.stop(lifecycle.drain_secs) if grpc_server is not None else None
    end = time.monotonic() + lifecycle.drain_secs
    while len(signals) < 2 and time.monotonic() < end:
        if lifecycle.in_flight == 0 and http.idle() and (stopped is None or stopped.done()):
            _log("drained: every request accepted was answered")
            return
        http.poll(0.05)
    if len(signals) > 1:
        _log(f"{signal.Signals(signals[1]).name} again: stopping at once, {lifecycle.in_flight} requests cut off")
        return
    _log(f"{lifecycle.in_flight} requests still in flight after {lifecycle.drain_secs:g} s: answered UNAVAILABLE")
    api.abandon()
    end = time.monotonic() + timeouts.SERVE_ANSWER_SECS
    while len(signals) < 2 and time.monotonic() < end:
        if lifecycle.in_flight == 0 and http.idle() and (stopped is None or stopped.done()):
            return
        http.poll(0.05)
