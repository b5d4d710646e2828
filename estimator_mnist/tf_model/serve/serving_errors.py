"""TensorFlow Serving's errors over REST: a status code (absl's names), the HTTP status it maps to, the body.

The map is Serving's `ToHTTPStatusCode` (model_servers/http_server.cc); the
body is `MakeJsonFromStatus` (util/json_tensor.cc): `{"error": message}`.
"""

from __future__ import annotations

import json

HTTP_STATUS = {
    "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504, "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429, "FAILED_PRECONDITION": 400,
    "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501, "INTERNAL": 500, "UNAVAILABLE": 503,
    "DATA_LOSS": 500, "UNAUTHENTICATED": 401,
}
# absl's numeric codes (TensorFlow's error_code), for errors that come out of a TensorFlow session.
CODE_NAMES = {1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
              6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
              10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
              15: "DATA_LOSS", 16: "UNAUTHENTICATED"}


class ServingError(Exception):
    """What Serving's handler returns as a non-OK status: `code` is absl's name of it."""

    def __init__(self, code: str, message: str, http_status: int = 0):
        super().__init__(message)
        self.code, self.message = code, message
        self.http_status = http_status or HTTP_STATUS.get(code, 500)

    def status_string(self) -> str:
        """absl::Status::ToString(), which Serving nests inside some of its messages."""
        return f"{self.code}: {self.message}"


def invalid(message: str) -> ServingError:
    return ServingError("INVALID_ARGUMENT", message)


def error_body(message: str) -> str:
    # rapidjson's PrettyWriter, as MakeJsonFromStatus writes it.
    return json.dumps({"error": message}, indent=4, ensure_ascii=False)
