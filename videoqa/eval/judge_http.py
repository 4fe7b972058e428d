"""One JSON POST whose whole exchange (connect, send, headers, body) ends within a deadline.

A socket timeout only bounds the wait for the next byte, so a server that trickles its reply byte by byte
holds a plain `urlopen(timeout=...)` for as long as it likes; so does the `openai` client's timeout (httpx's
read timeout is per chunk too). Here a timer shuts the request's socket down when the time is up, which
wakes the blocked read at once. urllib stays underneath, so proxies from the environment still apply.

Bounded by bytes as well as time (the rule for every network read of videoqa): the body is read in chunks and
given up once it passes `max_bytes` (or its Content-Length says it would), so a server streaming without end
costs at most that much memory per request, not what it can send before the deadline (~1.5 GB/s locally).
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request

from ..jsonio import JSONProblem, dumps, parse_json

MAX_REPLY_BYTES = 4 << 20  # a chat completion of a one-line verdict is ~1 KB; 4 MiB is room for any real one
CHUNK = 64 << 10

class HTTPFailure(Exception):
    """A request that did not give a JSON reply; `retryable` tells whether asking again may help."""

    def __init__(self, message: str, status: int | None = None, retryable: bool = True,
                 retry_after: float | None = None):
        super().__init__(message)
        self.status, self.retryable, self.retry_after = status, retryable, retry_after


class _Deadline:
    """Shuts down every socket of one request once `expire()` is called (by a timer)."""

    def __init__(self):
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.expired:  # connected just after the deadline: stop right away
                _shutdown(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    try:  # the plain socket's shutdown, also for TLS sockets: it only wakes the reader, the owner closes
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Watched:
    """A connection whose socket (TLS-wrapped for HTTPS) the deadline can shut."""

    def __init__(self, *args, deadline: _Deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self):
        super().connect()
        self._deadline.watch(self.sock)


class _WatchedHTTP(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def http_open(self, req):
        return self.do_open(functools.partial(_WatchedHTTP, deadline=self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline, context: ssl.SSLContext | None):
        self._ctx = context  # None: http.client makes the default one, per connection
        super().__init__(context=context)
        self._deadline = deadline

    def https_open(self, req):
        return self.do_open(functools.partial(_WatchedHTTPS, deadline=self._deadline), req, context=self._ctx)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: urllib would resend the request, Authorization header included, to wherever
    `Location` points (another host too), and turn the POST into a GET. The 3xx reply becomes an HTTPError."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def retry_after_seconds(headers) -> float | None:
    """Seconds a 429/503 reply asks us to wait (`retry-after-ms`, or `retry-after` in seconds or as a date)."""
    if headers is None:
        return None
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _read_capped(resp, max_bytes: int) -> bytes:
    """The body, or HTTPFailure as soon as it is known to be longer than `max_bytes`."""
    too_long = HTTPFailure(f"the reply is larger than {max_bytes} bytes (--judge-max-bytes); not read")
    declared = resp.headers.get("Content-Length") if resp.headers is not None else None
    if declared and declared.strip().isdigit() and int(declared) > max_bytes:
        raise too_long
    chunks, size = [], 0
    while chunk := resp.read(min(CHUNK, max_bytes + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise too_long
    return b"".join(chunks)


def post_json(url: str, payload: dict, headers: dict[str, str], timeout_s: float,
              context: ssl.SSLContext | None = None, max_bytes: int = MAX_REPLY_BYTES) -> dict:
    """POST `payload` as JSON and return the decoded JSON reply, all within `timeout_s` seconds and `max_bytes`
    bytes of body. Pass one `context` for many HTTPS requests: making one loads the CA store (~0.1 s)."""
    deadline = _Deadline()
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline, context), _NoRedirect())
    req = urllib.request.Request(
        url, data=dumps(payload).encode(), headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    timer = threading.Timer(timeout_s, deadline.expire)
    timer.daemon = True
    timer.start()
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            data = _read_capped(resp, max_bytes)
    except urllib.error.HTTPError as e:
        e.close()
        if 300 <= e.code < 400:  # a wrong base URL (http for https, a moved API): the user must fix it
            where = e.headers.get("Location", "") if e.headers is not None else ""
            raise HTTPFailure(f"HTTP {e.code} {e.reason}: a redirect to {where or 'elsewhere'}, not followed",
                              e.code, retryable=False) from None
        raise HTTPFailure(f"HTTP {e.code} {e.reason}", e.code, e.code == 429 or e.code >= 500,
                          retry_after_seconds(e.headers)) from None
    except (OSError, http.client.HTTPException) as e:
        if deadline.expired:
            raise HTTPFailure(f"no complete reply within {timeout_s:g} s (timed out)") from None
        raise HTTPFailure(f"cannot reach {url}: {getattr(e, 'reason', e)}") from None
    finally:
        timer.cancel()
    if deadline.expired:
        raise HTTPFailure(f"no complete reply within {timeout_s:g} s (timed out)")
    try:
        return parse_json(data)
    except JSONProblem as e:  # deep nesting, huge numbers, NaN: a judge failure, never a traceback
        raise HTTPFailure(f"the endpoint did not return usable JSON ({e})") from None
