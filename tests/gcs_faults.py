"""What the GCS tests' proxy (tests/gcs_proxy.py) sees of a request, and a fault it answers some requests with."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Optional

# The User-Agent of each client, as the proxy sees them (test_gcs_run.py asserts who met its faults): TensorFlow 2.15's gs:// file system
# sends "TSL" (tsl/platform/cloud/curl_http_request.cc); google-cloud-storage, the product's storage layer,
# "gcloud-python/<version> ...". A fault meant for one client names its agent, so the other cannot consume it.
TF_AGENT, PRODUCT_AGENT = "TSL", "gcloud-python/"


@dataclass(frozen=True)
class SeenRequest:
    method: str
    host: str  # the name the client asked for (www.googleapis.com, storage.googleapis.com, 127.0.0.1:PORT)
    target: str  # path and query, percent-decoded
    body_head: str  # the first bytes of the body (latin-1), where a multipart upload names its object
    agent: str = ""  # the User-Agent header: which client sent it (TensorFlow's gs:// or google-cloud-storage)

    def names(self, fragment: str) -> bool:
        return fragment in self.target or fragment in self.body_head


@dataclass
class Fault:
    """Answer the next `times` requests that match with `status` (or stall `stall_secs`, then close)."""
    times: int
    status: Optional[int] = None
    stall_secs: float = 0.0
    method: Optional[str] = None
    name: Optional[str] = None  # a substring of the object name (or of the decoded path and query)
    agent: Optional[str] = None  # a substring of the User-Agent: only that client's requests
    hits: int = 0
    hit_agents: List[str] = field(default_factory=list)  # the User-Agent of each request it answered
    until: float = float("inf")  # a monotonic time: past it the fault matches nothing
    body: Optional[dict] = None  # the answer's JSON (a token endpoint's invalid_grant), else GCS's error

    def matches(self, request: SeenRequest) -> bool:
        return self.hits < self.times and time.monotonic() < self.until and (
            self.method is None or self.method == request.method) and (
            self.name is None or request.names(self.name)) and (self.agent is None or self.agent in request.agent)
