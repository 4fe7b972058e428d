"""What a user sees when the model, the options or the environment are wrong: one line, exit 2, and no wait.

Nothing here reaches the network: hub lookups go to a local stand-in proxy, run in offline mode, or call
an injected lookup.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from videoqa.cli import build_parser, main
from videoqa.errors import ModelLoadError

REPO = Path(__file__).resolve().parents[1]
CLIP = str(REPO / "samples" / "clips" / "orange_circle_right.mp4")


def one_line_error(capsys, argv: list[str]) -> str:
    """Run the command; it must exit 2 with exactly one line on stderr (no usage, no traceback)."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("argv,msg", [
    (["ask", CLIP, "q", "--prune", "bogus"], "argument --prune: invalid choice: 'bogus'"),
    (["batch", CLIP, "--question", "q", "--out", "o.jsonl", "--batch-size", "0"], "--batch-size: must be >= 1, got 0"),
    (["ask", CLIP, "q", "--prune", "none", "--r", "0.7"], "--r 0.7: not used by --prune none"),
    (["ask", CLIP, "q", "--prune", "vispruner", "--k", "3"], "--k 3: not used by --prune vispruner (it applies to "
                                                           "--prune fastv)"),
    (["ask", CLIP, "q", "--prune", "fastv", "--keep-positions"], "--keep-positions: not used by --prune fastv"),
])
def test_bad_options_are_one_line(capsys, argv, msg):
    assert msg in one_line_error(capsys, argv)


def test_serve_takes_pruning_options_as_the_pages_first_settings():
    from videoqa.cli.options import prune_from_args

    args = build_parser().parse_args(["serve", "--prune", "none", "--r", "0.7", "--k", "3"])
    cfg = prune_from_args(args)  # the page starts with R=0.7, used once another method is picked
    assert (cfg.method, cfg.r, cfg.k) == ("none", 0.7, 3)


def test_results_file_must_be_a_file_path(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    model = ["--model", "/nonexistent/model"]  # checked before the model is loaded: its error never shows
    err = one_line_error(capsys, ["batch", CLIP, "--question", "q", "--out", str(tmp_path), *model])
    assert f"{tmp_path} is a folder" in err
    err = one_line_error(capsys, ["batch", CLIP, "--question", "q", "--out", str(tmp_path / "notes.txt" / "r.jsonl"),
                                  *model])
    assert f"{tmp_path / 'notes.txt'} is a file, not a folder" in err


def test_eval_run_folder_must_be_a_folder(tmp_path):
    from videoqa.errors import InputError
    from videoqa.eval.run import check_config

    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="notes.txt is a file; --out of eval is a run folder"):
        check_config(tmp_path / "notes.txt", {})
    with pytest.raises(InputError, match="notes.txt/run: cannot create the run folder"):
        check_config(tmp_path / "notes.txt" / "run", {})


def test_serve_on_a_taken_port_fails_before_loading_the_model(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        err = one_line_error(capsys, ["serve", "--port", str(port), "--model", "/nonexistent/model"])
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use" in err


# ------------------------------------------------------------------------------------------ models


@pytest.fixture()
def model_copy(tmp_path, tiny_model_dir) -> Path:
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))


def test_truncated_weights(capsys, model_copy):
    weights = model_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a download cut short
    err = one_line_error(capsys, ["ask", CLIP, "q", "--model", str(model_copy)])
    assert f"cannot load model '{model_copy}': a .safetensors file is truncated or corrupt" in err


def test_weights_that_do_not_match_the_config(capsys, model_copy):
    config = json.loads((model_copy / "config.json").read_text())
    config["text_config"]["intermediate_size"] *= 2  # e.g. the config of another model size
    (model_copy / "config.json").write_text(json.dumps(config))
    err = one_line_error(capsys, ["ask", CLIP, "q", "--model", str(model_copy)])
    assert "its weights do not match its config.json" in err and "mlp" in err


@pytest.mark.parametrize("name,msg", [
    ("./no-such-model", "no such folder"),
    ("~/no-such-videoqa-model", "no such folder"),
    ("models/a/b", "no such folder"),
    ("tests/no-such-model", "no such folder"),  # its first part is a folder here: a path was meant, not a hub id
    ("tests/conftest.py", "not a folder"),
    ("demo2", "no such folder, and neither a model shipped with videoqa (demo, demo-long) nor a Hugging Face id"),
])
def test_a_mistyped_folder_fails_at_once(capsys, monkeypatch, name, msg):
    monkeypatch.chdir(REPO)
    err = one_line_error(capsys, ["ask", CLIP, "q", "--model", name])
    assert f"cannot load model '{name}': {msg}" in err


def test_offline_hub_id_not_in_the_cache(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = one_line_error(capsys, ["ask", CLIP, "q", "--model", "videoqa-test/no-such-model"])
    assert "the Hugging Face hub cannot be reached (offline mode: HF_HUB_OFFLINE is set)" in err
    assert "not in the local cache" in err and "--local-dir DIR" in err


def test_hub_lookup_is_one_bounded_request(monkeypatch):
    import httpx2
    from huggingface_hub import constants, errors

    from videoqa.model import hub_unreachable

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    calls = []

    def lookup(error):
        def model_info(repo_id, timeout):
            calls.append((repo_id, timeout))
            raise error
        return model_info

    assert hub_unreachable("org/name", lookup(httpx2.ProxyError("502 Bad Gateway"))) == "ProxyError: 502 Bad Gateway"
    assert calls == [("org/name", 10.0)]  # one request, with a timeout: no retries
    response = httpx2.Response(404, request=httpx2.Request("GET", "https://huggingface.co/api/models/org/name"))
    with pytest.raises(ModelLoadError, match="no such model on the Hugging Face hub"):
        hub_unreachable("org/name", lookup(errors.RepositoryNotFoundError("404", response=response)))
    with pytest.raises(ModelLoadError, match="gated"):
        hub_unreachable("org/name", lookup(errors.GatedRepoError("403", response=response)))


@pytest.mark.slow
def test_hub_id_behind_a_dead_proxy_fails_after_one_attempt(tmp_path):
    """The real command and HTTP stack behind a proxy that hangs up on every connection (a network error the
    downloader retries): one line, exit 2, one connection for the model. A retry storm shows as dozens of
    connections over minutes."""
    with socket.socket() as proxy:
        proxy.bind(("127.0.0.1", 0))
        proxy.listen(16)
        connections = []

        def hang_up() -> None:
            while True:
                try:
                    conn, _ = proxy.accept()
                except OSError:  # closed at the end of the test
                    return
                with conn:
                    connections.append(conn.recv(4096).split(b"\r\n")[0])

        threading.Thread(target=hang_up, daemon=True).start()
        url = f"http://127.0.0.1:{proxy.getsockname()[1]}"
        env = {k: v for k, v in os.environ.items()
               if k.upper() not in ("NO_PROXY", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")}
        env.update(HTTPS_PROXY=url, HTTP_PROXY=url, ALL_PROXY=url, HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
        proc = subprocess.run([sys.executable, "-m", "videoqa.cli", "ask", CLIP, "q", "--model",
                               "videoqa-test/no-such-model"], env=env, capture_output=True, text=True, timeout=600)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert "the Hugging Face hub cannot be reached (" in err and "not in the local cache" in err
    # Our one lookup, plus at most huggingface_hub's own one-off fetch of its agent registry (no retries).
    assert 1 <= len(connections) <= 2 and set(connections) == {b"CONNECT huggingface.co:443 HTTP/1.1"}


EVAL = ["eval", "--dataset", "msvd", "--root", "/nonexistent/data", "--model", "/nonexistent/model"]
BATCH = ["batch", CLIP, "--question", "q", "--out", "/nonexistent/o.jsonl", "--model", "/nonexistent/model"]


@pytest.mark.parametrize("argv,msg", [
    *[([*EVAL, "--judge-timeout", v], f"--judge-timeout: expected a number of seconds > 0, got '{v}'")
      for v in ("-1", "0", "nan", "inf", "1e999", "soon")],
    *[([*EVAL, "--judge-retries", v], f"--judge-retries: expected a whole number >= 0, got '{v}'")
      for v in ("-1", "1.5", "nan")],
    ([*EVAL, "--judge-workers", "0"], "--judge-workers: must be >= 1, got 0"),
    ([*EVAL, "--limit", "-3"], "--limit: expected a whole number >= 0, got '-3'"),
    ([*BATCH, "--frames", "0"], "--frames: must be >= 1, got 0"),
    ([*BATCH, "--max-new-tokens", "-1"], "--max-new-tokens: must be >= 1, got -1"),
    (["bench", "--repeats", "0"], "--repeats: must be >= 1, got 0"),
    (["bench", "--decode-tokens", "-4"], "--decode-tokens: must be >= 1, got -4"),
    ([*BATCH, "--prefix-cache-bytes", "-1"], "--prefix-cache-bytes: expected a whole number >= 0, got '-1'"),
    (["bench", "e2e", "--methods", "vispruner", "bogus"], "unknown method(s) bogus; registered: none, fastv"),
    (["serve", "--port", "70000"], "--port: expected a port number in 0-65535, got '70000'"),
    (["serve", "--queue-size", "0"], "--queue-size: must be >= 1, got 0"),
])
def test_numeric_options_are_checked_when_parsed(capsys, argv, msg):
    assert msg in one_line_error(capsys, argv)


@pytest.mark.parametrize("flag,value,msg", [
    ("--timeout", "-1", "--timeout: expected a number of seconds > 0, got '-1'"),
    ("--timeout", "nan", "--timeout: expected a number of seconds > 0, got 'nan'"),
    ("--timeout", "inf", "--timeout: expected a number of seconds > 0, got 'inf'"),
    ("--actors", "0", "--actors: must be >= 1, got 0"),
    ("--cpus-per-actor", "nan", "--cpus-per-actor: expected a number > 0, got 'nan'"),
    ("--gpus-per-actor", "-0.5", "--gpus-per-actor: expected a number >= 0, got '-0.5'"),
    ("--num-cpus", "-2", "--num-cpus: must be >= 1, got -2"),
])
def test_ray_options_are_checked_before_anything_starts(capsys, tmp_path, flag, value, msg):
    # Caught when parsed (RayOptions checks the same for API callers): one line, nothing written or joined.
    out = tmp_path / "o.jsonl"
    argv = ["batch", CLIP, "--question", "q", "--out", str(out), "--model", "/nonexistent/model", "--backend", "ray",
            "--ray-address", "127.0.0.1:9", flag, value]
    assert msg in one_line_error(capsys, argv)
    assert not out.exists()


def test_the_judge_refuses_a_timeout_or_retry_count_that_sends_nothing():
    from videoqa.errors import InputError
    from videoqa.eval.judges import GPTJudge

    for kwargs, msg in (({"timeout_s": 0}, "timeout"), ({"timeout_s": float("nan")}, "timeout"),
                        ({"retries": -1}, "retries")):
        with pytest.raises(InputError, match=msg):
            GPTJudge(base_url="http://127.0.0.1:9/v1", **kwargs)


def test_a_model_folder_without_a_config_says_so(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    err = one_line_error(capsys, ["ask", CLIP, "q", "--model", str(tmp_path / "empty")])
    assert f"no config.json in {tmp_path / 'empty'}" in err


def test_a_broken_config_json_is_named(capsys, model_copy):
    (model_copy / "config.json").write_text("{'not': json}")
    err = one_line_error(capsys, ["ask", CLIP, "q", "--model", str(model_copy)])
    assert f"{model_copy / 'config.json'}: not valid JSON" in err and "line 1, column 2" in err


def test_a_defect_is_one_line_and_exit_1_and_its_traceback_only_with_debug(capsys):
    """A bug of videoqa's own (here a command that raises) must not print a traceback at the user."""
    import argparse

    from videoqa.cli import run_command

    def broken(args):
        raise ValueError("zip() argument 2 is shorter than argument 1")

    assert run_command(argparse.Namespace(func=broken, debug=False)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ValueError: zip()" in err and "Traceback" not in err
    with pytest.raises(ValueError):
        run_command(argparse.Namespace(func=broken, debug=True))
