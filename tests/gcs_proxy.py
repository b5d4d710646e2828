"""The GCS tests' own loopback proxy in front of the GCS API server (tests/gcs_server.py): threads and the standard
library, TLS from a throwaway CA (tests/gcs_certs.py). Nothing leaves the machine: it connects only to the
emulator on loopback, and refuses (403) every other target.

One port serves three forms of request:
- CONNECT www.googleapis.com:443 (and storage., oauth2.): TensorFlow's libcurl through https_proxy; TLS ends here;
- `GET http://host/...` (absolute form): anything sent through http_proxy to one of those names;
- `GET /storage/v1/...` (origin form): google-cloud-storage with STORAGE_EMULATOR_HOST pointing here, and the
  resumable-upload URLs the emulator hands out (its -external-url is this port).
Every request of both clients passes here: faults are injected (inject, stall) and requests recorded (seen, count);
both clients' token URLs are answered here (tests/gcs_answers.py: `tokens.require()` makes storage requests need one).
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Tuple

from tests.gcs_answers import UNAUTHENTICATED, TokenEndpoint, error_body, is_token_request, oauth_error
from tests.gcs_faults import PRODUCT_AGENT, TF_AGENT, Fault, SeenRequest  # noqa: F401  (the faults' API)

# The names TensorFlow 2.15's gs:// file system (compiled in) and Google's clients reach.
GOOGLE_HOSTS = ("www.googleapis.com", "storage.googleapis.com", "oauth2.googleapis.com", "iamcredentials.googleapis.com")
# Hop-by-hop headers (RFC 9110 7.6.1) and those the proxy recomputes. TF 2.15.1 sends `Transfer-Encoding:
# identity` on an empty-body upload (a checkpoint's empty marker object), which fake-gcs-server 1.54 answers with
# 501: dropping it here is what makes empty objects work (test_gcs_server.py, test_tf_gfile_through_the_proxy).
DROPPED_HEADERS = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
                   "transfer-encoding", "upgrade", "expect", "content-length"}
UPSTREAM_TIMEOUT_SECS = 60  # the emulator answers on loopback in milliseconds; a hung one fails the request



class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a client that left (a stall given up): no traceback
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class GcsProxy:
    """The proxy's state: the listening server, the faults armed, the requests seen. Thread safe."""

    def __init__(self, certificate_file, key_file):
        self._lock = threading.Lock()
        self._faults: List[Fault] = []
        self._seen: List[SeenRequest] = []
        self._connects: List[str] = []
        self._refused: List[str] = []
        self._wake = threading.Event()  # set by stop() and reset(): stalled requests end at once
        self.upstream: Optional[Tuple[str, int]] = None  # the emulator, set once it is started
        self.tokens = TokenEndpoint()  # both clients' token URLs (tests/gcs_answers.py)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(certificate_file, key_file)
        self.server = QuietServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.proxy = self
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="gcs-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._wake.set()
        self.server.shutdown()
        self.server.server_close()

    def inject(self, status: int, times: int = 1, method: Optional[str] = None, name: Optional[str] = None,
               agent: Optional[str] = None, seconds: Optional[float] = None, body: Optional[dict] = None) -> Fault:
        """The next `times` requests matching `method` (GET, POST, PUT, DELETE...; None: any), `name` (a
        substring of the object name, or of a token endpoint's path: "token"; None: any) and `agent` (a substring
        of the User-Agent, e.g. TF_AGENT: one client's requests only), within `seconds` from now if given, are
        answered `status` (503, 429, 403 for a denied object...) with `body` or GCS's JSON error body, without
        reaching the emulator. Returns the Fault; its `hits` counts them."""
        until = time.monotonic() + seconds if seconds is not None else float("inf")
        return self._arm(Fault(times=times, status=status, method=method, name=name, agent=agent, until=until,
                               body=body))

    def stall(self, seconds: float, times: int = 1, method: Optional[str] = None, name: Optional[str] = None) -> Fault:
        """The next `times` matching requests get no answer for `seconds`, then their connection is closed."""
        return self._arm(Fault(times=times, stall_secs=seconds, method=method, name=name))

    def _arm(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
            return fault

    def take_fault(self, request: SeenRequest) -> Optional[Fault]:
        with self._lock:
            self._seen.append(request)
            for fault in self._faults:
                if fault.matches(request):
                    fault.hits += 1
                    fault.hit_agents.append(request.agent)
                    return fault
        return None

    def reset(self) -> None:
        """Disarms every fault, ends stalls and forgets what was seen (a new test)."""
        self.tokens.reset()
        with self._lock:
            self._wake.set()
            self._wake = threading.Event()
            self._faults.clear()
            self._seen.clear()
            self._connects.clear()
            self._refused.clear()

    def seen(self) -> List[SeenRequest]:
        with self._lock:
            return list(self._seen)

    def count(self, method: Optional[str] = None, name: Optional[str] = None) -> int:
        """Requests seen (faulted ones included) matching `method` and `name` as in inject."""
        return sum(1 for r in self.seen() if (method is None or r.method == method) and (
            name is None or r.names(name)))

    @property
    def connect_targets(self) -> List[str]:  # every CONNECT target asked for (host:port), allowed or not
        with self._lock:
            return list(self._connects)

    @property
    def refused(self) -> List[str]:  # every target refused with 403: not in GOOGLE_HOSTS (a metadata server...)
        with self._lock:
            return list(self._refused)

    def note_connect(self, target: str, allowed: bool) -> None:
        with self._lock:
            self._connects.append(target)
            if not allowed:
                self._refused.append(target)

    def note_refused(self, target: str) -> None:
        with self._lock:
            self._refused.append(target)

    def wait_stalled(self, seconds: float) -> bool:  # sleeps up to `seconds`, less once reset or stopped
        with self._lock:
            wake = self._wake
        return wake.wait(seconds)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and `Expect: 100-continue` answered as libcurl waits for it
    tunnel_host: Optional[str] = None  # set on the handler serving the inside of a CONNECT tunnel
    # Headers and body leave in separate writes: with Nagle's algorithm on, each answer waited for the client's
    # delayed ACK (40 ms; a 5-step Estimator run took 24 s instead of 8).
    disable_nagle_algorithm = True

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin  # the tests read GcsProxy.seen
        pass

    proxy = property(lambda self: self.server.proxy)

    def do_CONNECT(self):
        host, _, port = self.path.rpartition(":")
        allowed = host in GOOGLE_HOSTS and port == "443"
        self.proxy.note_connect(self.path, allowed)
        if not allowed:
            self._answer(403, b"only " + ", ".join(GOOGLE_HOSTS).encode() + b" on port 443", close=True)
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        try:
            tls = self.proxy.tls.wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client gave up (or distrusts the CA): nothing more to serve
        tunnel = _Handler.__new__(_Handler)
        tunnel.tunnel_host = host
        try:
            tunnel.__init__(tls, self.client_address, self.server)  # serves requests until the tunnel closes
        except (ssl.SSLError, OSError):
            pass  # the client closed the tunnel mid-request (a timeout of its own)

    def _forward(self):
        host, target = self._destination()
        body = self._read_body()
        if host is None:
            self.proxy.note_refused(self.path)
            self._answer(403, b"this proxy reaches only the GCS emulator")
            return
        request = SeenRequest(self.command, host, urllib.parse.unquote(target), body[:4096].decode("latin-1"),
                              self.headers.get("User-Agent", ""))
        fault, token = self.proxy.take_fault(request), is_token_request(host, target)
        if fault is not None and fault.status is not None:
            self._answer(*(oauth_error(fault.status, fault.body) if token else (
                fault.status, error_body(fault.status, request.method, request.target))), content_type="application/json")
        elif fault is not None:
            self.proxy.wait_stalled(fault.stall_secs)
            self.close_connection = True
        elif token:  # a service account key's token exchange, google-auth's or TensorFlow's: any key gets one
            self._answer(200, self.proxy.tokens.issue(host), content_type="application/json")
        elif self.proxy.tokens.refuses(self.headers.get("Authorization")):
            self._answer(401, json.dumps(UNAUTHENTICATED).encode(), content_type="application/json")
        else:
            self._relay(host, target, body)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    def _destination(self) -> Tuple[Optional[str], str]:
        """(the host asked for, path and query), or (None, _) for a target this proxy refuses."""
        if self.tunnel_host:
            return self.tunnel_host, self.path
        if self.path.startswith("/"):  # origin form: a client pointed at this port (STORAGE_EMULATOR_HOST)
            return self.headers.get("Host", f"127.0.0.1:{self.proxy.port}"), self.path
        url = urllib.parse.urlsplit(self.path)
        target = url.path + (f"?{url.query}" if url.query else "")
        own = url.netloc in (f"127.0.0.1:{self.proxy.port}", f"localhost:{self.proxy.port}")
        return (url.netloc if url.hostname in GOOGLE_HOSTS or own else None), target

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _relay(self, host: str, target: str, body: bytes) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in DROPPED_HEADERS}
        headers["Host"] = host  # the emulator matches storage.googleapis.com (its -public-host) for downloads
        emulator = http.client.HTTPConnection(*self.proxy.upstream, timeout=UPSTREAM_TIMEOUT_SECS)
        try:
            emulator.request(self.command, target, body=body if body or self.command in ("POST", "PUT", "PATCH")
                             else None, headers=headers)
            response = emulator.getresponse()
            data = response.read()
        finally:
            emulator.close()
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() == "location" and self.tunnel_host and value.startswith(f"http://{host}/"):
                # fake-gcs-server 1.54 builds a resumable upload's URL from the request's Host with its own
                # scheme (http://www.googleapis.com/upload/...); real GCS answers https, so a client that sets
                # only https_proxy works here as it would there. http:// ones (origin form) stay as they are.
                value = "https://" + value[len("http://"):]
            if key.lower() not in DROPPED_HEADERS:
                self.send_header(key, value)
        # A HEAD's Content-Length is the object's, passed on above.
        self.send_header("Content-Length", response.getheader("Content-Length", "0") if self.command == "HEAD"
                         else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain", close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

