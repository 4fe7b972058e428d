"""Joining Ray: a new local Ray, or a cluster by address, with one clear line when that fails.

Address forms (`--ray-address`, else `$RAY_ADDRESS`):

    ray://HOST:10001   Ray Client, from a machine outside the cluster (needs `pip install "ray[client]"`)
    HOST:6379          the head's GCS port, from a machine that is part of the cluster (or can reach every node)
    auto               the cluster this machine already joined with `ray start`

Token authentication (Ray 2.60, checked): `ray start --head` turns it on only when a token already exists
(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) or RAY_AUTH_MODE=token is set; otherwise it says
"Token authentication is disabled". A driver joining a token cluster by address needs RAY_AUTH_MODE=token and
the cluster's token (`RAY_AUTH_TOKEN=<token>`, or `RAY_AUTH_TOKEN_PATH=<file>`; `ray get-auth-token` on the
head prints it).

A local Ray (no address) is token-protected with a token made for this run and passed to it through the
environment: left to itself, Ray would save a new token as ~/.ray/auth_token, after which every later
`ray start --head` of the user's would have token authentication on.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError

AUTH_HINT = (
    "if the cluster uses token authentication, set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN "
    "(`ray get-auth-token` on the head prints it)"
)
# Ray retries a refused connection to a cluster's GCS about 20 times (~30 s), logging each; this many is
# plenty for a head whose port answers (check_reachable) and bounds the wait for a wrong or missing token.
GCS_CONNECT_ATTEMPTS = 8
_AUTH_REFUSED = re.compile(r"InvalidAuthToken|UNAUTHENTICATED|AuthenticationError", re.I)


def resolve_address(address: str | None) -> str | None:
    """The cluster to join: the option, else $RAY_ADDRESS; None (or 'local') starts a local Ray."""
    address = (address or os.environ.get("RAY_ADDRESS") or "").strip()
    return None if address in ("", "local") else address


def _host_port(address: str) -> tuple[str, int] | None:
    hostport = address.removeprefix("ray://").split("/")[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a head that is not listening: `ray.init` would otherwise retry for minutes."""
    hp = _host_port(address)
    if hp is None:
        if address.startswith("ray://"):
            raise InputError(f"Ray address {address!r} has no port; Ray Client listens on ray://HOST:10001")
        return  # 'auto' and the like: Ray resolves them itself
    try:
        socket.create_connection(hp, timeout=timeout_s).close()
    except OSError as e:
        raise InputError(f"cannot reach Ray at {address}: {e.strerror or e} (is the head running, and is "
                         f"port {hp[1]} open to this machine?)") from None


def connect(address: str | None, num_cpus: int | None = None) -> tuple[str, float]:
    """Join Ray; returns (what was joined, seconds it took). Ray's own log lines while joining are held back
    (a refused token alone is ~20 of them); a failure is one InputError line."""
    import ray

    t0 = time.perf_counter()
    if ray.is_initialized():
        return "the Ray this process already joined", 0.0
    if address is None:
        with _run_token(), _quiet_stderr() as said:
            try:
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
            except Exception as e:  # noqa: BLE001 - any failure to start is the same to the user
                _forget_partial_connection(ray)
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise InputError(f"cannot start a local Ray: {first}") from None
            text = said()
        _pass_on(text)
        cpus = ray.cluster_resources().get("CPU", 0)
        return f"a local Ray ({cpus:g} CPUs)", time.perf_counter() - t0
    if num_cpus is not None:
        raise InputError("--num-cpus sizes a local Ray; a cluster given by --ray-address/RAY_ADDRESS has its own")
    client = address.startswith("ray://")
    if client:
        try:
            import grpc  # noqa: F401  (Ray Client's transport; not in ray[data])
        except ImportError:
            raise InputError(f"{address} is a Ray Client address, which needs Ray's client extra: "
                             'pip install "ray[client]" (or "videoqa[ray]")') from None
    check_reachable(address)
    if client:
        _check_client_auth(address)
    # Ray Client starts a server process per connection on the head; on a busy head that start can fail
    # once ("Initialization failure from server") and succeed when asked again.
    for attempt in range(2):
        joined = None  # Ray's output while joining, once joined
        with _quiet_stderr() as said, _env_default("RAY_gcs_server_port_wait_time_s", str(GCS_CONNECT_ATTEMPTS)):
            try:
                ray.init(address=address, log_to_driver=False)
            except Exception as e:  # ConnectionError, AuthenticationError, RuntimeError, ...: all mean "not joined"
                _forget_partial_connection(ray)
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                causes = " ".join(str(c) for c in _chain(e))
                refused = bool(_AUTH_REFUSED.search(said() + " " + causes))
            else:
                joined = said()
        if joined is not None:
            _pass_on(joined)
            return f"Ray at {address}", time.perf_counter() - t0
        if attempt or not (client and "Initialization failure" in first):
            break
    if refused:
        raise InputError(f"cannot join Ray at {address}: the cluster refused this driver's token{_token_advice()}")
    hint = "" if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" else f"; {AUTH_HINT}"
    raise InputError(f"cannot join Ray at {address}: {first}{hint}")


def _chain(e: BaseException) -> Iterator[BaseException]:
    while e is not None:
        yield e
        e = e.__cause__ or e.__context__


def _token_advice() -> str:
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return (" (none is sent: RAY_AUTH_MODE is not token); set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN "
                "(`ray get-auth-token` on the head prints it)")
    return (": the one set here (RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH) is not the cluster's "
            "(`ray get-auth-token` on the head prints it)")


def _check_client_auth(address: str, timeout_s: float = 10.0) -> None:
    """Ray Client takes a refused token for a server not ready yet and retries for ~35 s; one ping tells.
    Uses Ray's own channel (which adds the token when RAY_AUTH_MODE=token); skipped if Ray's internals moved."""
    try:
        import grpc
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc
    except ImportError:
        return
    channel = init_grpc_channel(address.removeprefix("ray://"), asynchronous=False)
    try:
        ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
        ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(ping, timeout=timeout_s)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNAUTHENTICATED:
            raise InputError(f"cannot join Ray at {address}: the cluster refused this driver's token"
                             f"{_token_advice()}") from None
    except Exception:  # noqa: BLE001 - a probe only: ray.init decides and reports
        pass
    finally:
        channel.close()


@contextmanager
def _quiet_stderr() -> Iterator:
    """Hold what is written to file descriptor 2 (Ray's C++ core logs there directly, Python's logging too)
    in a temporary file; yields a function returning it. Nothing is shown: on success the caller passes on
    what is worth it (`_pass_on`), on failure it makes its one line from it."""
    sys.stderr.flush()
    saved = os.dup(2)
    tmp = tempfile.TemporaryFile()

    def said() -> str:
        sys.stderr.flush()
        tmp.seek(0)
        return tmp.read().decode("utf-8", "replace")

    try:
        os.dup2(tmp.fileno(), 2)
        yield said
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        tmp.close()


def _pass_on(text: str) -> None:
    """Show Ray's warnings from a successful join, not its INFO lines ("Connecting to existing Ray cluster")
    nor its note that a local Ray has token authentication (it does, with the token `_run_token` made)."""
    kept = [line for line in text.splitlines()
            if line.strip() and not re.search(r"\bINFO\b|Token authentication is enabled for this Ray", line)]
    if kept:
        print("\n".join(kept), file=sys.stderr)


@contextmanager
def _env_default(name: str, value: str) -> Iterator[None]:
    """`name=value` in the environment for the duration, unless the user set it."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


@contextmanager
def _run_token() -> Iterator[None]:
    """A local Ray with token authentication but no token saved: when the user has no token and no auth mode
    of their own, one made for this run is passed through the environment (Ray's processes inherit it)
    instead of Ray writing ~/.ray/auth_token. Kept in this process's environment while Ray runs."""
    mine = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    if any(os.environ.get(k) for k in mine) or (Path.home() / ".ray" / "auth_token").exists():
        yield  # the user's own setup decides
        return
    # Only the token: Ray turns the mode on itself (and refreshes its cached config, which setting
    # RAY_AUTH_MODE here would not), with a warning that the caller drops.
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    try:
        yield
    except BaseException:
        os.environ.pop("RAY_AUTH_TOKEN", None)
        raise


def _forget_partial_connection(ray) -> None:
    """A failed `ray.init` (a Ray Client one especially) can leave half a connection behind, which breaks
    the next `ray.init` in this process."""
    try:
        ray.shutdown()
    except Exception:
        pass
