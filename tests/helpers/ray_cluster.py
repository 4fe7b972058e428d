"""A throwaway Ray cluster for tests: `ray start --head` on free ports, in a session (and temp dir) of its own,
stopped by killing exactly that session's processes (never `ray stop`, which stops every Ray on the machine)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from conftest import free_port


def session_pids(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`: the head's daemons and every worker it forked."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(d))
    return pids


def process_title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Cluster:
    """A head node with `num_cpus` CPUs, a GCS port (`address`) and a Ray Client port (`client_address`).

    Token authentication is off (RAY_AUTH_MODE=disabled), as for a cluster on a trusted network. Not started
    with --block: Ray then ties each Ray Client connection's server to a thread that exits at once. `cwd`: the
    folder `ray start` runs in, which is its workers' working directory (default: this process's)."""

    def __init__(self, num_cpus: int = 2, attempts: int = 2, cwd: str | None = None):
        self.cwd = cwd
        # Ray gives a new raylet 30 s to start (not configurable); a heavily loaded machine can miss that.
        for attempt in range(attempts):
            try:
                self._start(num_cpus)
                break
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
        self.address = f"127.0.0.1:{self.port}"
        self.client_address = f"ray://127.0.0.1:{self.client_port}"

    def _start(self, num_cpus: int) -> None:
        self.port, self.client_port = free_port(), free_port()
        self.temp_dir = tempfile.mkdtemp(prefix="vqa-ray-", dir="/tmp")  # short: Ray's socket paths are limited
        # A loaded CI machine can take more than Ray's 30 s to start a Ray Client connection's server.
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "180"}
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--node-ip-address", "127.0.0.1",
               "--port", str(self.port), "--ray-client-server-port", str(self.client_port),
               "--num-cpus", str(num_cpus), "--include-dashboard", "false", "--disable-usage-stats",
               "--temp-dir", self.temp_dir]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, cwd=self.cwd)
        self.sid = proc.pid  # a new session's id is its leader's pid; the head's daemons stay in it
        try:
            self.log = proc.communicate(timeout=300)[0]
        except subprocess.TimeoutExpired:
            self.stop()
            raise RuntimeError("ray start did not finish in 300 s") from None
        if proc.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start failed:\n{self.log[-2000:]}")

    def pids(self, title: str = "") -> list[int]:
        return [p for p in session_pids(self.sid) if title in process_title(p)]

    def stop(self) -> None:
        for _ in range(100):
            pids = session_pids(self.sid)
            if not pids:
                break
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
