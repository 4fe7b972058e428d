"""A stand-in for the GPT judge: an OpenAI-compatible `/v1/chat/completions` server on this machine that
answers the Video-ChatGPT judge prompt in the official reply format, `{'pred': 'yes', 'score': 4}`.

It is not a language model: it reads the question, correct answer and predicted answer out of the prompt
and compares them by normalized words (as `--judge exact` does). Its replies have the shapes real judges
give, fractional scores included, so the whole gpt-judge path (HTTP, parsing, official scoring, exported
files) can be run and checked offline:

    python scripts/judge_standin.py --port 8011 &
    VIDEOQA_JUDGE_API_KEY=none videoqa eval ... --judge gpt --judge-base-url http://127.0.0.1:8011/v1
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from videoqa.eval.judges import normalize
from videoqa.jsonio import parse_json

MODEL = "standin-judge-1"
MAX_REQUEST_BYTES = 1 << 20  # a judge prompt is a few KB; a larger body is refused unread
_FIELDS = re.compile(r"Question: (.*)\nCorrect Answer: (.*)\nPredicted Answer: (.*)\n\n", re.S)


def standin_reply(answer: str, pred: str) -> str:
    """yes/5 for the bare answer, yes/4.8 for the answer inside a longer reply, no/1 when some words are
    shared, no/0 otherwise."""
    a, p = normalize(answer), normalize(pred)
    if a and p == a:
        return "{'pred': 'yes', 'score': 5}"
    if a and any(p[i : i + len(a)] == a for i in range(len(p) - len(a) + 1)):
        return "{'pred': 'yes', 'score': 4.8}"
    return "{'pred': 'no', 'score': 1}" if set(a) & set(p) else "{'pred': 'no', 'score': 0}"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet: the eval run prints what matters
        pass

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length", 0))
            if not 0 <= length <= MAX_REQUEST_BYTES:
                return self._send(413, {"error": {"message": f"request body over {MAX_REQUEST_BYTES} bytes"}})
            body = parse_json(self.rfile.read(length))  # hostile-safe: JSONProblem is a ValueError
            user = next(m["content"] for m in body["messages"] if m["role"] == "user")
            _question, answer, pred = _FIELDS.search(user).groups()
        except (ValueError, KeyError, TypeError, StopIteration, AttributeError):
            return self._send(400, {"error": {"message": "not a judge request"}})
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        reply = standin_reply(answer, pred)
        self._send(200, {"model": MODEL, "choices": [{"index": 0, "message": {"role": "assistant",
                                                                             "content": reply}}]})

    def _send(self, code: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def start(host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """Serve in a background thread; returns the server and its base URL (…/v1)."""
    server = ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/v1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8011)
    args = ap.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), _Handler)
    print(f"stand-in judge at http://{args.host}:{server.server_address[1]}/v1 (model {MODEL})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
