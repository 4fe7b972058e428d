"""`videoqa serve`: the web chat on 127.0.0.1:7860 (share and auth are opt-in)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import sys
import tempfile

from ..errors import InputError
from .options import add_model_options, add_prune_options, load_qa, port_number, positive_int


def parse_auth(text: str | None) -> tuple[str, str] | None:
    """'user:pass' -> ('user', 'pass'); the password may contain ':'."""
    if text is None:
        return None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise InputError("--auth must be user:password")
    return user, password


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    """Fail at once, before the model is loaded, when `host:port` cannot be bound (taken, or not ours).

    The same test Gradio makes before it starts (bind with SO_REUSEADDR), so a port that passes here is
    one Gradio accepts."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, OverflowError) as e:
        raise InputError(f"--host {host} --port {port}: not an address to serve on ({e})") from None
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            raise InputError(f"cannot serve on {host}:{port}: {e.strerror} (another server is there? "
                             f"choose one with --port)") from None


def register(sub) -> None:
    p = sub.add_parser("serve", help="web chat: upload a clip, ask questions, see kept-token heatmaps",
                       description=__doc__)
    add_model_options(p)
    add_prune_options(p, initial_only=True)  # the page's first settings: all apply once the method is switched
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: 127.0.0.1, this machine only; 0.0.0.0 exposes it)")
    g.add_argument("--port", type=port_number, default=7860)
    g.add_argument("--share", action="store_true", help="also open a public gradio.live link")
    g.add_argument("--auth", default=None, metavar="USER:PASS", help="require this login")
    g.add_argument("--max-file-size", default="200mb", help="upload limit, e.g. 200mb (default: 200mb)")
    g.add_argument("--queue-size", type=positive_int, default=8,
                   help="questions that may wait behind the one being answered; more get 'busy' (default: 8)")
    g.add_argument("--samples", default=None,
                   help="folder of example clips (default: the sample clips shipped with videoqa)")
    p.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    auth = parse_auth(args.auth)
    check_port(args.host, args.port)  # before gradio's import and the model load, which take a while

    if (args.share or not _is_loopback(args.host)) and auth is None:
        print("videoqa serve: warning: reachable from other machines without --auth", file=sys.stderr)
    # Everything Gradio writes (uploads, previews, heatmaps, its own state) goes to a folder of this process
    # alone, removed when the server stops. Gradio reads GRADIO_TEMP_DIR once, when it is imported: so first.
    with tempfile.TemporaryDirectory(prefix="videoqa-serve-") as cache:
        os.environ["GRADIO_TEMP_DIR"] = cache
        from ..ui.app import DEFAULT_SAMPLES, build_app, launch  # gradio is heavy: import only when serving

        samples = args.samples or DEFAULT_SAMPLES
        qa = load_qa(args)  # loaded once, shared by every session
        # SIGTERM (service managers, docker stop) ends the server like Ctrl-C, so the cleanup below runs.
        signal.signal(signal.SIGTERM, _interrupt)
        app = build_app(qa, samples_dir=samples, cache_dir=cache)
        launch(app, host=args.host, port=args.port, share=args.share, auth=auth,
               max_file_size=args.max_file_size, queue_size=args.queue_size, samples_dir=samples)
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
