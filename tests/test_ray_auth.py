"""Ray and token authentication: joining a token cluster without (or with the wrong) token is one line, soon,
without Ray's own log lines; a local Ray leaves no token file behind in the user's home. Real Ray processes,
each driver in a process of its own (a fresh HOME, no RAY_AUTH_* of the test runner's)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import free_port
from helpers.ray_cluster import Cluster

pytestmark = pytest.mark.slow  # seconds each: `make test-fast` leaves them out
pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[1]
TOKEN = secrets.token_hex(16)


class TokenCluster(Cluster):
    """A head with token authentication on (RAY_AUTH_MODE=token, the token in its environment only)."""

    def _start(self, num_cpus: int) -> None:
        self.port, self.client_port = free_port(), free_port()
        self.temp_dir = tempfile.mkdtemp(prefix="vqa-ray-", dir="/tmp")
        env = {**os.environ, "HOME": self.temp_dir, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN,
               "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "180"}
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--node-ip-address", "127.0.0.1",
               "--port", str(self.port), "--ray-client-server-port", str(self.client_port),
               "--num-cpus", str(num_cpus), "--include-dashboard", "false", "--disable-usage-stats",
               "--temp-dir", self.temp_dir]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        self.sid = proc.pid
        self.log = proc.communicate(timeout=300)[0]
        if proc.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start failed:\n{self.log[-2000:]}")


@pytest.fixture(scope="module")
def token_cluster():
    c = TokenCluster(num_cpus=1)
    yield c
    c.stop()


def driver(code: str, home: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**clean, "HOME": str(home), "OMP_NUM_THREADS": "1", **env})
    return p, time.monotonic() - t0


JOIN = """import sys
from videoqa.cli import main
sys.exit(main(["batch", "samples/clips", "--question", "q", "--out", {out!r},
               "--backend", "ray", "--ray-address", {address!r}, "--no-progress"]))"""

BOUND_S = 40  # Ray alone took 32 s (GCS) and 72 s (Ray Client) to give up on a missing token


@pytest.mark.parametrize("form", ["gcs", "client"])
@pytest.mark.parametrize("token", [None, "wrong"])
def test_a_refused_token_is_one_line_soon_and_quiet(token_cluster, tmp_path, form, token):
    address = token_cluster.address if form == "gcs" else token_cluster.client_address
    env = {} if token is None else {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    p, took = driver(JOIN.format(out=str(tmp_path / "o.jsonl"), address=address), tmp_path, **env)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (took, p.stderr[-3000:])
    assert "InvalidAuthToken" not in p.stderr and "Traceback" not in p.stderr
    assert f"cannot join Ray at {address}: the cluster refused this driver's token" in lines[0], lines
    assert ("RAY_AUTH_MODE=token and RAY_AUTH_TOKEN" if token is None else "is not the cluster's") in lines[0]
    assert took < BOUND_S, (took, lines)
    assert not (tmp_path / ".ray").exists() and not (tmp_path / "o.jsonl").exists()  # nothing left behind


def test_the_right_token_joins(token_cluster, tmp_path):
    code = (f"import ray\nfrom videoqa.batch.ray_connect import connect\nprint(connect({token_cluster.address!r})[0])\n"
            "print(ray.cluster_resources().get('CPU'))\nray.shutdown()")
    p, _ = driver(code, tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    assert p.returncode == 0 and p.stdout.split() == ["Ray", "at", token_cluster.address, "1.0"], p.stderr[-3000:]
    assert "InvalidAuthToken" not in p.stderr and " INFO " not in p.stderr, p.stderr[-3000:]


def test_a_local_ray_leaves_the_users_ray_configuration_alone(tmp_path):
    code = ("import os, ray\nfrom videoqa.batch.ray_connect import connect\nprint(connect(None, num_cpus=1)[0])\n"
            "print(os.environ.get('RAY_AUTH_MODE'))\nray.shutdown()")
    p, _ = driver(code, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["a", "local", "Ray", "(1", "CPUs)", "token"]  # still token-protected...
    assert not (tmp_path / ".ray" / "auth_token").exists()  # ...without saving a token for later `ray start`s
