"""The ASGI layer in front of every route: what a request must be before any route sees it,
and what every answer carries.

In order: a request with both ``Content-Length`` and ``Transfer-Encoding`` is refused and its
connection closed (RFC 9112 6.3: the framing is ambiguous, the way request smuggling starts);
a server without a token answers only requests whose ``Host`` (and ``Origin``, when a browser
sends one) is this machine or a name ``--allow-host`` adds, which stops DNS rebinding and
cross-site posts from any web page the user visits; then the bearer token. HEAD is answered on
every GET route as GET without the body; every answer gets ``Cache-Control: no-store`` (the data
is behind the token, and a shared cache must not keep it); each answer is counted for /metrics
and written to the access log (method, path without its query, status, bytes, milliseconds:
never a header, so never the token).
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import time
from collections.abc import Iterable
from urllib.parse import urlsplit

from vqa.codes import ErrorCode

OPEN_PATHS = frozenset({"/healthz", "/docs", "/redoc", "/openapi.json"})  # answered without the token
OPEN_PREFIX = "/docs-assets/"  # the docs pages' own files (vqa.serve.schema says why they are open)


def host_name(value: str) -> str:
    """The name or address of a ``Host`` header or an origin's authority, lower case, without
    its port or IPv6 brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def is_loopback_name(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):  # RFC 6761: always this machine
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostRule:
    """Which ``Host`` and ``Origin`` a server without a token answers: loopback names and
    addresses, the address it listens on (unless a wildcard), and ``allowed`` (``*``: any)."""

    def __init__(self, listen_host: str, allowed: Iterable[str]):
        self.any = "*" in allowed
        self.names = {host_name(a) for a in allowed if a != "*"}
        listen = host_name(listen_host)
        if listen not in ("0.0.0.0", "::", ""):
            self.names.add(listen)

    def allows(self, name: str) -> bool:
        return self.any or is_loopback_name(name) or name in self.names

    def refusal(self, headers: dict[bytes, bytes]) -> str | None:
        """Why a request with these headers is refused, or None."""
        host = headers.get(b"host", b"").decode("latin-1")
        if not host or not self.allows(host_name(host)):
            return (f"Host {host!r} is not a name of this server: it answers loopback names and the ones "
                    "--allow-host adds (a web page cannot rebind a name to it)")
        origin = headers.get(b"origin")
        if origin is not None:
            text = origin.decode("latin-1")
            parts = urlsplit(text)
            if parts.scheme not in ("http", "https") or not parts.hostname or not self.allows(parts.hostname):
                return (f"Origin {text!r} is another site: a page elsewhere may not call this server "
                        "(--allow-host adds a site, or give the server a --token)")
        return None


class Guard:
    """The ASGI middleware described in the module docstring, around the FastAPI app."""

    def __init__(self, app, *, token: str | None, hosts: HostRule, metrics, log, error):
        self.app, self.metrics, self.log, self.error = app, metrics, log, error
        self.expected = token.encode() if token else None
        self.hosts = hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        headers = dict(scope["headers"])
        method = scope["method"]
        head = method == "HEAD"
        answer = {"status": 500, "bytes": 0}
        sent_start = asyncio.Event()

        async def sending(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                extra = [(b"cache-control", b"no-store")]
                if not any(k.lower() == b"cache-control" for k, _v in message.get("headers", ())):
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
                await send(message)
                if head:  # the whole answer to HEAD: the route's body is counted, never sent
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                sent_start.set()
                return
            if message["type"] == "http.response.body":
                answer["bytes"] += len(message.get("body", b""))
                if head:
                    return
            await send(message)

        async def receiving_head():
            """HEAD has no body; once the headers are out, the route is told the client left,
            so a records stream that would follow a job stops there."""
            if not sent_start.is_set() and not answered_once:
                answered_once.append(True)
                return {"type": "http.request", "body": b"", "more_body": False}
            await sent_start.wait()
            return {"type": "http.disconnect"}

        answered_once: list[bool] = []
        try:
            refusal = self._refusal(scope, headers)
            if refusal is not None:
                await refusal(scope, receive, sending)
                return
            if head:  # every GET route answers HEAD the same, without the body
                scope = {**scope, "method": "GET"}
                receive = receiving_head
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            self.metrics.request(getattr(route, "path", "other"), answer["status"])
            self.log.access(method=method, path=scope["path"],
                            status=answer["status"], bytes=answer["bytes"],
                            ms=round((time.perf_counter() - started) * 1e3, 1),
                            client=(scope.get("client") or ("", 0))[0])

    def _refusal(self, scope, headers: dict[bytes, bytes]):
        """The error response that refuses this request, or None to let it through."""
        if b"transfer-encoding" in headers and b"content-length" in headers:
            return self.error(400, ErrorCode.E_USAGE, "a request with both Content-Length and Transfer-Encoding "
                              "is ambiguous (RFC 9112 6.3); send one", {"Connection": "close"})
        if self.expected is None:
            problem = self.hosts.refusal(headers)
            if problem is not None:
                return self.error(403, ErrorCode.E_ORIGIN, problem)
        elif not _open(scope["path"]) and not _authorized(headers.get(b"authorization", b""), self.expected):
            return self.error(401, ErrorCode.E_AUTH, "this server needs a bearer token: Authorization: Bearer TOKEN",
                              {"WWW-Authenticate": 'Bearer realm="vqa"'})
        return None


def _open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIX)


def _authorized(header: bytes, token: bytes) -> bool:
    """``Bearer TOKEN``, the scheme in any case (RFC 7235: schemes are case-insensitive)."""
    scheme, _, given = header.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(b" "), token)
