"""`serve`'s settings: one frozen object built from its flags once, as training has its Config. Every part of the
server takes what it needs from it; nothing reads the argparse Namespace after this. No TensorFlow."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Tuple

from estimator_mnist.errors import UsageError

ERR_PROXY = "--trusted-proxy {value!r} is not an IP address; give the load balancer's address, e.g. 10.0.0.5"
ERR_CLIENT_CAP = ("--max-client-images {client} is below --max-images-per-request {request}: a client could never "
                  "send its largest request; raise --max-client-images")


@dataclass(frozen=True)
class ServeSettings:
    model: str
    host: str = "127.0.0.1"
    port: int = 8501
    grpc_port: int = 8500
    name: str = "mnist"
    max_batch_size: int = 64
    batch_timeout_secs: float = 0.002
    poll_secs: float = 1.0
    request_timeout_secs: float = 30.0
    max_queued_images: int = 20000
    max_client_images: int = 10000
    max_images_per_request: int = 10000
    max_body_bytes: int = 10 * 1024 * 1024
    grpc_max_message_bytes: int = 32 * 1024 * 1024
    drain_delay_secs: float = 5.0
    drain_secs: float = 15.0
    enable_cors: bool = False
    trusted_proxies: Tuple[str, ...] = ()
    switch_interval_secs: float = 0.001

    @classmethod
    def from_args(cls, args) -> "ServeSettings":
        """The one reading of serve's flags (serve_flags.py); a bad combination is one line (UsageError)."""
        proxies = tuple(_address(value) for value in (args.trusted_proxy or ()))
        if args.max_client_images < args.max_images_per_request:
            raise UsageError(ERR_CLIENT_CAP.format(client=args.max_client_images,
                                                   request=args.max_images_per_request))
        return cls(model=args.model, host=args.host, port=args.port, grpc_port=args.grpc_port, name=args.name,
                   max_batch_size=args.max_batch_size, batch_timeout_secs=args.batch_timeout_ms / 1000.0,
                   poll_secs=args.poll_secs, request_timeout_secs=args.request_timeout_ms / 1000.0,
                   max_queued_images=args.max_queued_images, max_client_images=args.max_client_images,
                   max_images_per_request=args.max_images_per_request, max_body_bytes=args.max_body_bytes,
                   grpc_max_message_bytes=args.grpc_max_message_bytes, drain_delay_secs=args.drain_delay_secs,
                   drain_secs=args.drain_secs, enable_cors=args.enable_cors, trusted_proxies=proxies,
                   switch_interval_secs=max(args.switch_interval_ms, 0.001) / 1000.0)


def _address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        raise UsageError(ERR_PROXY.format(value=value)) from None
