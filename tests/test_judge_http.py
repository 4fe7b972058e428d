"""The judge's HTTP client: a whole request ends within --judge-timeout, whatever pace the server sends at,
and a server's Retry-After is honoured. Real servers on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from videoqa.eval.judge_http import retry_after_seconds
from videoqa.eval.judges import GPTJudge

REPLY = json.dumps({"model": "m", "choices": [{"message": {"content": "{'pred': 'yes', 'score': 4}"}}]}).encode()
TRICKLE_S = 20.0  # how long the server takes to send its whole reply


class TrickleServer:
    """Sends a valid reply one byte at a time, spread over TRICKLE_S seconds: the status line and headers
    (`part="headers"`) or the body after prompt headers (`part="body"`). Records whether it got to the end
    and whether the client hung up on it."""

    def __init__(self, part: str):
        self.finished, self.dropped = threading.Event(), threading.Event()
        srv = self
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(REPLY)}\r\n\r\n"
                .encode())

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                slow, fast = (head + REPLY, b"") if part == "headers" else (REPLY, head)
                try:
                    self.wfile.write(fast)
                    self.wfile.flush()
                    for b in slow:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(TRICKLE_S / len(slow))
                except OSError:
                    srv.dropped.set()
                    return
                srv.finished.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("part", ["headers", "body"])
def test_timeout_bounds_the_whole_request_not_each_byte(part):
    srv = TrickleServer(part)
    try:
        judge = GPTJudge(model="m", base_url=srv.url, api_key="k", timeout_s=0.5, retries=0)
        j = judge.judge("q", "a", "p")
        # The judgment failed on the deadline while the server was still sending (a per-byte timeout would
        # have waited for all TRICKLE_S seconds and judged it yes).
        assert not srv.finished.is_set()
        assert j.failed and "no complete reply within 0.5 s (timed out)" in j.error, j
        # The socket was shut, not abandoned: the server's next writes fail.
        assert srv.dropped.wait(TRICKLE_S / 2) and not srv.finished.is_set()
    finally:
        srv.close()


def test_retry_after_is_honoured():
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date passed
    assert retry_after_seconds({"retry-after": "soon"}) is None and retry_after_seconds({}) is None

    statuses = iter([(429, {"Retry-After": "7"}), (503, {}), (200, {})])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            code, headers = next(statuses)
            data = REPLY if code == 200 else b"busy"
            self.send_response(code)
            for k, v in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    waits: list[float] = []

    class Recording(GPTJudge):
        _sleep = staticmethod(waits.append)

    try:
        j = Recording(model="m", base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", retries=2,
                      backoff_s=0.5).judge("q", "a", "p")
    finally:
        server.shutdown()
        server.server_close()
    assert (j.pred, j.score, j.attempts) == ("yes", 4.0, 3)
    assert waits == [7.0, 1.0]  # the server's 7 s, then (no header) the backoff 0.5 * 2
