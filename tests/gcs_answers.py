"""What the GCS tests' proxy (tests/gcs_proxy.py) answers in place of the emulator: GCS's error for an injected
status, and both clients' token endpoints with a service account key to use them (their real token paths, with
no credentials of Google's).

- google-auth posts a signed JWT to the key file's token_uri (oauth2.googleapis.com/token); TensorFlow 2.15's
  C++ client posts to its own hard-coded www.googleapis.com/oauth2/v4/token (tsl/platform/cloud/
  google_auth_provider.cc, kOAuthV4Url). The proxy answers both here.
- Once `require()`d, a storage request without a token the endpoint issued is answered 401, as GCS answers an
  anonymous caller of a private bucket; tokens are short-lived (60 s by default), so that both clients ask
  for a new one before every request (google-auth refreshes within 3 min 45 s of the expiry, TensorFlow within
  60 s) and a fault of the token endpoint meets them mid-run.
A test sets these up with tokens_env(); STORAGE_EMULATOR_HOST is left out there, since it makes
google-cloud-storage anonymous.
"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Dict, Optional, Tuple

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

GOOGLE_AUTH_TOKEN_URI = "https://oauth2.googleapis.com/token"
TF_TOKEN_PATH = "/oauth2/v4/token"  # on www.googleapis.com
INVALID_GRANT = {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
UNAUTHENTICATED = {"error": {"code": 401, "message": "Anonymous caller does not have storage.objects.get access "
                             "to the Google Cloud Storage object.",
                             "errors": [{"message": "Anonymous caller", "domain": "global", "reason": "required"}]}}


# What real GCS answers for each injected status (reason codes from its JSON API's error format).
REASONS = {401: "authError", 403: "forbidden", 404: "notFound", 429: "rateLimitExceeded", 500: "backendError",
           502: "badGateway", 503: "backendError"}


def error_body(status: int, method: str, target: str) -> bytes:
    message = f"injected by the test proxy: {status} for {method} {target}"
    return json.dumps({"error": {"code": status, "message": message, "errors": [
        {"message": message, "domain": "global", "reason": REASONS.get(status, "injected")}]}}).encode()


def is_token_request(host: str, target: str) -> bool:
    """Both token URLs, and google-auth 2.62's background look-up of a service account's Regional Access Boundary
    (iamcredentials.googleapis.com/.../allowedLocations), answered "no boundary" (it tolerates a failure, with
    warnings on stderr)."""
    return host.startswith(("oauth2.googleapis.com", "iamcredentials.googleapis.com")) or (
        host.startswith("www.googleapis.com") and target.startswith("/oauth2/"))


class TokenEndpoint:
    """Issues tokens; once required, tells a storage request with an issued token from one without."""

    def __init__(self):
        self._lock = threading.Lock()
        self._issued = set()
        self._numbers = itertools.count(1)
        self.required = False
        self.expires_in = 60

    def require(self, expires_in: int = 60) -> None:
        with self._lock:
            self.required, self.expires_in = True, expires_in

    def reset(self) -> None:
        with self._lock:
            self.required, self.expires_in = False, 60
            self._issued.clear()

    def issue(self, host: str = "oauth2.googleapis.com") -> bytes:
        if host.startswith("iamcredentials."):
            return json.dumps({"locations": [], "encodedLocations": ""}).encode()
        with self._lock:
            token = f"tok-{next(self._numbers)}"
            self._issued.add(token)
            expires = self.expires_in
        return json.dumps({"access_token": token, "expires_in": expires, "token_type": "Bearer"}).encode()

    def refuses(self, authorization: Optional[str]) -> bool:
        """A storage request this endpoint's tokens must authorise, without one of them."""
        with self._lock:
            if not self.required:
                return False
            return not (authorization or "").startswith("Bearer ") or authorization[7:] not in self._issued


def write_service_account_key(directory: Path) -> Path:
    """A service account key file as the console makes one (an RSA key nobody else has)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = directory / "service-account.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "estimator-mnist-tests", "private_key_id": "test-key-1",
        "private_key": pem, "client_email": "trainer@estimator-mnist-tests.iam.gserviceaccount.com",
        "client_id": "1234567890", "token_uri": GOOGLE_AUTH_TOKEN_URI,
        "auth_uri": "https://accounts.google.com/o/oauth2/auth"}))
    return path


def tokens_env(env: Dict[str, str], key_file: Path) -> Dict[str, str]:
    """A GCS server's env() for a job with a service account key: no emulator variable (which makes
    google-cloud-storage anonymous), no test token for TensorFlow (which would skip its token path)."""
    kept = {k: v for k, v in env.items() if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_AUTH_TOKEN_FOR_TESTING")}
    return {**kept, "GOOGLE_APPLICATION_CREDENTIALS": str(key_file), "GOOGLE_CLOUD_PROJECT": "estimator-mnist-tests"}


def oauth_error(status: int, body: Optional[dict]) -> Tuple[int, bytes]:
    """A token endpoint's error answer: the body given (invalid_grant...), else OAuth's server_error."""
    return status, json.dumps(body or {"error": "server_error" if status >= 500 else "invalid_request"}).encode()
