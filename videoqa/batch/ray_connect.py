"""Joining Ray: a new local Ray, or a cluster by address, with one clear line when that fails.

Address forms (`--ray-address`, else `$RAY_ADDRESS`):

    ray://HOST:10001   Ray Client, from a machine outside the cluster (needs `pip install "ray[client]"`)
    HOST:6379          the head's GCS port, from a machine that is part of the cluster (or can reach every node)
    auto               the cluster this machine already joined with `ray start`

Ray >= 2.59 starts clusters with token authentication on. A driver then needs the cluster's token: on the
head, `ray get-auth-token` prints it; on the machine running videoqa set `RAY_AUTH_MODE=token` and
`RAY_AUTH_TOKEN=<token>` (or `RAY_AUTH_TOKEN_PATH=<file>`, or copy it to `~/.ray/auth_token`). A cluster
started with `RAY_AUTH_MODE=disabled` needs none of that.
"""

from __future__ import annotations

import os
import socket
import time

from ..errors import InputError

AUTH_HINT = (
    "if the cluster uses token authentication (the default since Ray 2.59), set RAY_AUTH_MODE=token and "
    "RAY_AUTH_TOKEN (`ray get-auth-token` on the head prints it)"
)


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
    """Join Ray; returns (what was joined, seconds it took)."""
    import ray

    t0 = time.perf_counter()
    if ray.is_initialized():
        return "the Ray this process already joined", 0.0
    if address is None:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        cpus = ray.cluster_resources().get("CPU", 0)
        return f"a local Ray ({cpus:g} CPUs)", time.perf_counter() - t0
    if num_cpus is not None:
        raise InputError("--num-cpus sizes a local Ray; a cluster given by --ray-address/RAY_ADDRESS has its own")
    if address.startswith("ray://"):
        try:
            import grpc  # noqa: F401  (Ray Client's transport; not in ray[data])
        except ImportError:
            raise InputError(f"{address} is a Ray Client address, which needs Ray's client extra: "
                             'pip install "ray[client]" (or "videoqa[ray]")') from None
    check_reachable(address)
    # Ray Client starts a server process per connection on the head; on a busy head that start can fail
    # once ("Initialization failure from server") and succeed when asked again.
    attempts = 2 if address.startswith("ray://") else 1
    for _ in range(attempts):
        try:
            ray.init(address=address, log_to_driver=False)
            return f"Ray at {address}", time.perf_counter() - t0
        except Exception as e:  # ConnectionError, AuthenticationError, RuntimeError, ...: all mean "not joined"
            _forget_partial_connection(ray)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    hint = "" if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" else f"; {AUTH_HINT}"
    raise InputError(f"cannot join Ray at {address}: {first}{hint}")


def _forget_partial_connection(ray) -> None:
    """A failed `ray.init` (a Ray Client one especially) can leave half a connection behind, which breaks
    the next `ray.init` in this process."""
    try:
        ray.shutdown()
    except Exception:
        pass
