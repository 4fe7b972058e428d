"""The built wheel works outside the repository: `videoqa ask --model demo` answers and `videoqa serve` starts.

The wheel is built offline from a copy of the sources (setuptools from this environment, no build
isolation) and installed without dependencies into a fresh virtual environment that borrows torch,
transformers, gradio, ... from this one: a .pth file lists this environment's site-packages folders, and
.pth files inside those folders are not processed, so this environment's editable `videoqa` stays out.
Every command runs from a folder outside the repository.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow  # a wheel build and two fresh processes: ~30 s on 2 cores

SOURCES = ("videoqa", "ui", "samples")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                            "--no-index", "-q", "-w", str(tmp / "dist")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    (path,) = (tmp / "dist").glob("videoqa-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed; returns its bin folder."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    bin_dir = root / "bin"
    purelib = subprocess.run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    borrowed = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (Path(purelib) / "_borrowed.pth").write_text("\n".join(borrowed) + "\n")
    install = subprocess.run([bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                             capture_output=True, text=True, cwd=root, env=_env())
    assert install.returncode == 0, install.stderr[-3000:]
    return bin_dir


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}


def test_wheel_holds_every_package_and_the_demo_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not any(n.startswith(("ui/", "samples/", "tests/")) for n in names)  # nothing generic at the top level
    expected = {_installed_name(p.relative_to(REPO)) for src in SOURCES for p in (REPO / src).rglob("*.py")
                if "__pycache__" not in p.parts}
    assert expected <= names, expected - names
    for model in ("demo-model",) + (("demo-long-model",) if (REPO / "samples" / "demo-long-model").is_dir() else ()):
        shipped = {f.name for f in (REPO / "samples" / model).iterdir() if f.is_file()}
        assert {f"videoqa/samples/{model}/{f}" for f in shipped} <= names
    assert {f"videoqa/samples/clips/{p.name}" for p in (REPO / "samples" / "clips").iterdir()} <= names


def _installed_name(path: Path) -> str:
    """Where a repository file lands in the wheel: ui/ and samples/ move inside the videoqa namespace."""
    return path.as_posix() if path.parts[0] == "videoqa" else f"videoqa/{path.as_posix()}"


def test_installed_wheel_answers_and_serves_outside_the_repo(venv, tmp_path):
    port = _free_port()
    serve = subprocess.Popen([venv / "videoqa", "serve", "--model", "demo", "--device", "cpu", "--port", str(port)],
                             cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        where = subprocess.run([venv / "python", "-c", "import videoqa.samples as s, videoqa.ui as u; "
                                "print(s.__file__); print(u.__file__)"],
                               cwd=tmp_path, env=_env(), capture_output=True, text=True, check=True).stdout.split()
        assert all(Path(p).is_relative_to(venv.parent) for p in where), where  # the wheel's, not the checkout's
        clip = Path(where[0]).parent / "clips" / "orange_circle_right.mp4"
        ask = subprocess.run([venv / "videoqa", "ask", str(clip), "Which direction does the orange circle move?",
                              "--model", "demo", "--device", "cpu"],
                             cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
        assert ask.returncode == 0, ask.stderr[-3000:]
        assert ask.stdout.strip() == "right"
        assert _page_status(f"http://127.0.0.1:{port}/", serve, deadline_s=300) == 200
    finally:
        serve.terminate()
        out = serve.communicate(timeout=60)[0]
    # SIGTERM stops the server like Ctrl-C: exit 0, or 130 when it lands before Gradio's own loop took over.
    assert serve.returncode in (0, 130) and "Traceback" not in out, out[-3000:]


def _page_status(url: str, proc: subprocess.Popen, deadline_s: float) -> int | None:
    """Poll `url` until it answers or `proc` exits (then its output is shown)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status
        except OSError:
            time.sleep(0.3)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
