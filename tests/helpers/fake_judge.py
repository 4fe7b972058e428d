"""An OpenAI-compatible judge server on 127.0.0.1 that answers from a script, for the judge tests."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeJudge:
    """An OpenAI-compatible /chat/completions server; counts requests per predicted answer."""

    def __init__(self, replies: dict[str, list[str | None]], served_model: str = "judge-served"):
        self.counts: Counter = Counter()
        self.bodies: list[dict] = []  # every request, as sent
        self.auth: set[str] = set()
        self.models: set[str] = set()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.startswith("/denied"):
                    return self._send(401, b'{"error": {"message": "Incorrect API key"}}')
                assert self.path == "/v1/chat/completions", self.path
                user = body["messages"][1]["content"]
                pred = re.search(r"Predicted Answer: (.*)\n", user).group(1)
                with fake.lock:
                    n = fake.counts[pred]
                    fake.counts[pred] += 1
                    fake.auth.add(self.headers.get("Authorization", ""))
                    fake.models.add(body["model"])
                    fake.bodies.append(body)
                script = replies.get(pred, ["{'pred': 'no', 'score': 0}"])
                reply = script[min(n, len(script) - 1)]
                if reply is None:
                    return self._send(500, b"internal error")
                msg = {
                    "model": served_model,
                    "choices": [{"message": {"role": "assistant", "content": reply}}],
                }
                self._send(200, json.dumps(msg).encode())

            def _send(self, code: int, data: bytes):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 for one test, answering with `handler`; `url` ends in /v1."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
