"""A job's optional ``callback_url``: called once the job is done, so a caller need not poll.

- Allowed hosts only: the URL's host (and port, when the allowed entry names one) must be one
  an operator gave with ``--callback-host``; an address that is loopback, link-local or
  unspecified, named or resolved, is refused unless that very address (or ``localhost``) is
  allowed, so a job cannot make the server call into its own machine or a cloud metadata
  address through a name.
- Signed: ``POST`` of the job's JSON (``Job``, with ``sent``: the time, so a replay is told
  apart), with ``X-VQA-Signature: sha256=HEX``, HMAC-SHA256 of the body's bytes under the
  server's secret (``VQA_SERVE_CALLBACK_SECRET`` or ``--callback-secret``). A receiver checks
  it with ``hmac.compare_digest``.
- Retried with backoff (1, 2, 4, 8, 16 s) until an answer 2xx; redirects are not followed.
  Pending calls are kept in jobs.db and made again after a restart.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from vqa.errors import UsageError

from .guard import host_name
from .log import ServeLog, utc_iso

SECRET_ENV = "VQA_SERVE_CALLBACK_SECRET"
BACKOFF_S = (1, 2, 4, 8, 16)  # waits between the attempts: 6 attempts in all, over about 31 s
TIMEOUT_S = 10.0
SIGNATURE_HEADER = "X-VQA-Signature"


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _internal(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified


class CallbackRule:
    def __init__(self, allowed: Iterable[str], secret: str | None):
        self.allowed = {a.strip().lower() for a in allowed if a.strip()}
        self.secret = secret

    def url_pattern(self) -> str | None:
        """A regular expression of the URLs ``check`` takes (for the OpenAPI document), or
        None when this server takes no callback_url at all."""
        if not self.secret or not self.allowed:
            return None
        hosts = []
        for entry in sorted(self.allowed):
            host, sep, port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
            host = f"[{host}]" if ":" in host else host
            hosts.append(re.escape(host) + (f":{port}" if sep else "(?::[0-9]+)?"))
        return f"^https?://(?:{'|'.join(hosts)})(?:[/?#].*)?$"

    def _entry(self, host: str, port: int | None) -> str | None:
        for entry in (f"{host}:{port}" if port is not None else None, host):
            if entry is not None and entry in self.allowed:
                return entry
        return None

    def check(self, url: str) -> str:
        """``url`` when a job may name it; UsageError (400) saying why not."""
        if not self.secret:
            raise UsageError("this server takes no callback_url: it has no callback secret "
                             f"({SECRET_ENV} or --callback-secret)")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            raise UsageError(f"callback_url {url!r} must be an http or https URL with a host and no user")
        try:
            port = parts.port
        except ValueError:
            raise UsageError(f"callback_url {url!r} has a bad port") from None
        host = host_name(parts.hostname)
        if self._entry(host, port) is None:
            raise UsageError(f"callback_url's host {host!r} is not one this server calls (--callback-host)")
        return url

    def addresses_allowed(self, host: str, port: int) -> bool:
        """At call time: every address the host resolves to is allowed (see the module)."""
        try:  # an address (or localhost) that an operator named is called as named
            ipaddress.ip_address(host)
            named = True
        except ValueError:
            named = host == "localhost"
        if named:
            return True
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return True  # no address: the call itself fails and is retried
        for info in infos:
            address = str(info[4][0])
            if _internal(address) and address not in self.allowed:
                return False
        return True


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect is an answer that is not 2xx: retried, never followed


class Callbacks:
    """The thread that makes the calls; ``pending()`` from the store, ``add()`` when a job ends."""

    def __init__(self, rule: CallbackRule, log: ServeLog, delivered: Callable[[str], None],
                 backoff_s: tuple[float, ...] = BACKOFF_S):
        self.rule, self.log, self.delivered, self.backoff_s = rule, log, delivered, backoff_s
        self._opener = urllib.request.build_opener(_NoRedirect)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def add(self, url: str, job: dict) -> None:
        thread = threading.Thread(target=self._deliver, args=(url, job), name="vqa-serve-callback", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _deliver(self, url: str, job: dict) -> None:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        for attempt, wait_s in enumerate((0.0, *self.backoff_s)):
            if self._stop.wait(wait_s):
                return  # the server stops: the call stays pending in jobs.db, made after the restart
            problem = self._call(url, job, host_name(parts.hostname or ""), port)
            if problem is None:
                self.delivered(job["id"])
                self.log.event("callback", job=job["id"], state="delivered", attempt=attempt + 1)
                return
            self.log.event("callback", job=job["id"], state="failed", attempt=attempt + 1, problem=problem)
        self.delivered(job["id"])  # given up: not tried again at every start
        self.log.event("callback", job=job["id"], state="given-up", attempts=len(self.backoff_s) + 1)

    def _call(self, url: str, job: dict, host: str, port: int) -> str | None:
        if not self.rule.addresses_allowed(host, port):
            return f"{host} resolves to a loopback or link-local address that is not allowed"
        body = json.dumps({**job, "sent": utc_iso(time.time())}, ensure_ascii=True).encode()
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "vqa-serve",
            SIGNATURE_HEADER: signature(self.rule.secret or "", body)})
        try:
            with self._opener.open(request, timeout=TIMEOUT_S) as answer:
                return None if 200 <= answer.status < 300 else f"HTTP {answer.status}"
        except urllib.error.HTTPError as e:
            return f"HTTP {e.code}"
        except (OSError, ValueError) as e:
            return f"{type(e).__name__}: {e}"

    def close(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)
