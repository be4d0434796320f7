"""Local peers for the API-key tests: a Secret Manager and an OpenAI-compatible chat server.

Both run on 127.0.0.1 in a thread of the test process and record what they
were sent, so a test can assert which credentials reached which server.

* `SecretManagerPeer` answers ``GET /v1/projects/P/secrets/S/versions/V:access``
  the way Secret Manager's REST API does (``payload.data`` base64,
  ``payload.dataCrc32c`` as an int64 string), or with a chosen error status.
* `ChatServer` answers ``POST /v1/chat/completions``; with ``status=401`` it
  echoes the request's ``Authorization`` header in its error body, as a
  careless gateway would, so a test can prove the key still stays out of
  every error message.
* `GeminiServer` answers the Gemini API's ``generateContent``.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from beam_agents._secrets import crc32c
from tests._http import LocalServer, send_json

__all__ = ["ChatServer", "GeminiServer", "SecretManagerPeer", "new_key"]

_STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                 503: "UNAVAILABLE"}


def new_key() -> str:
    """A fresh random key: no other byte string in a pickle or a log can match it by chance."""
    return f"sk-test-{secrets.token_hex(20)}"


@dataclass
class _Served:
    """What one request carried."""

    method: str
    path: str
    authorization: str | None
    api_key_header: str | None


class _Peer:
    """A `LocalServer` that records each request; `respond` builds each answer."""

    def __init__(self) -> None:
        self.requests: list[_Served] = []
        self._server = LocalServer(self._handle)
        self.url = self._server.url

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        authorization = handler.headers.get("Authorization")
        self.requests.append(_Served(handler.command, handler.path, authorization,
                                     handler.headers.get("x-goog-api-key")))
        status, document = self.respond(handler.command, handler.path, authorization, body)
        send_json(handler, json.dumps(document).encode(), status)

    def respond(self, method: str, path: str, authorization: str | None,
                body: bytes) -> tuple[int, Any]:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)


class SecretManagerPeer(_Peer):
    """Serves the secret versions in `versions` (name -> payload bytes).

    Args:
        versions: ``projects/P/secrets/S/versions/V`` -> the payload.
        status: Answer every request with this HTTP status instead (an error).
        crc: ``"right"`` sends the payload's CRC32C, ``"wrong"`` a wrong one,
            ``"none"`` leaves the optional field out.
    """

    def __init__(self, versions: Mapping[str, bytes], *, status: int = 200,
                 crc: str = "right") -> None:
        super().__init__()
        self.versions, self.status, self.crc = dict(versions), status, crc

    def respond(self, method: str, path: str, authorization: str | None,
                body: bytes) -> tuple[int, Any]:
        name = path.removeprefix("/v1/").split("?")[0].removesuffix(":access")
        if self.status != 200:
            return self.status, _error(self.status, f"refused {name}")
        if method != "GET" or not path.startswith("/v1/") or name not in self.versions:
            return 404, _error(404, f"Secret Version [{name}] not found.")
        data = self.versions[name]
        payload: dict[str, Any] = {"data": base64.b64encode(data).decode()}
        if self.crc != "none":
            payload["dataCrc32c"] = str(crc32c(data) ^ (1 if self.crc == "wrong" else 0))
        return 200, {"name": name, "payload": payload}


class ChatServer(_Peer):
    """An OpenAI-compatible ``/v1/chat/completions`` that records each Authorization header.

    Args:
        status: 200 answers ``"ok"``; any other status is an error whose body
            echoes the request's Authorization header.
    """

    def __init__(self, *, status: int = 200) -> None:
        super().__init__()
        self.status = status

    @property
    def authorizations(self) -> list[str | None]:
        """The Authorization header of every request, in order."""
        return [r.authorization for r in self.requests]

    def respond(self, method: str, path: str, authorization: str | None,
                body: bytes) -> tuple[int, Any]:
        if self.status != 200:
            return self.status, {"error": {"message": f"invalid credentials: {authorization}",
                                           "type": "invalid_request_error"}}
        return 200, {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "ok"}}]}


class GeminiServer(_Peer):
    """The Gemini API's ``POST /v1beta/models/M:generateContent``, answering ``"ok"``."""

    def respond(self, method: str, path: str, authorization: str | None,
                body: bytes) -> tuple[int, Any]:
        return 200, {"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
                                     "finishReason": "STOP"}]}


def _error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message,
                      "status": _STATUS_NAMES.get(status, "UNKNOWN")}}
