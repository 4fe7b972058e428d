"""The judge's HTTP client: a whole request ends within --judge-timeout, whatever pace the server sends at,
and a server's Retry-After is honoured. Real servers on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers.fake_judge import LoopbackServer

from videoqa.eval.judge_http import retry_after_seconds
from videoqa.eval.judges import GPTJudge

REPLY = json.dumps({"model": "m", "choices": [{"message": {"content": "{'pred': 'yes', 'score': 4}"}}]}).encode()
TRICKLE_S = 20.0  # how long the server takes to send its whole reply


class TrickleServer(LoopbackServer):
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

        super().__init__(Handler)


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


class Recorder:
    """A loopback server that answers every request with (code, headers, body) and records what it got."""

    def __init__(self, code: int, headers: dict[str, str], body: bytes = b""):
        self.requests: list[tuple[str, str, str]] = []  # (method, path, Authorization header)
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                if self.headers.get("Content-Length"):
                    self.rfile.read(int(self.headers["Content-Length"]))
                rec.requests.append((self.command, self.path, self.headers.get("Authorization", "")))
                self.send_response(code)
                for k, v in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_and_the_key_stays_home(code):
    from videoqa.errors import InputError

    other = Recorder(200, {"Content-Type": "application/json"}, REPLY)  # would judge "yes" if reached
    judge_srv = Recorder(code, {"Location": f"{other.url}/steal"})
    try:
        judge = GPTJudge(model="m", base_url=judge_srv.url + "/v1", api_key="sk-SECRET", timeout_s=5,
                         retries=2, backoff_s=0.01)
        with pytest.raises(InputError, match=f"HTTP {code}.*redirect.*not followed") as e:
            judge.judge("q", "a", "p")
        assert "sk-SECRET" not in str(e.value)
    finally:
        judge_srv.close()
        other.close()
    assert other.requests == []  # neither the key nor anything else went to the other server
    assert [(m, p) for m, p, _ in judge_srv.requests] == [("POST", "/v1/chat/completions")]  # asked once


@pytest.mark.parametrize("body", [b'{"choices": "none"}', b"[1, 2]", b'"text"', b'{"choices": [{"message": 1}]}'])
def test_a_reply_that_is_not_a_chat_completion_is_a_judge_failure(body):
    srv = Recorder(200, {"Content-Type": "application/json"}, body)
    try:
        j = GPTJudge(model="m", base_url=srv.url + "/v1", api_key="k", timeout_s=5, retries=1,
                     backoff_s=0.01).judge("q", "a", "p")
    finally:
        srv.close()
    assert j.failed and j.pred is None and "choices[0].message.content" in j.error, j
    assert len(srv.requests) == 2  # bounded: 1 + 1 retry
