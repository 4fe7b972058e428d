"""`scripts/gpu_check.sh --cpu`: the accelerator check's dry run, as the script runs it, with gradio, ray,
matplotlib and decord unimportable (the accelerator machine has none of them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

from videoqa.pruning import keep_count

BLOCKER = '''
import sys
BLOCKED = {"gradio", "ray", "matplotlib", "decord"}
class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
        return None
sys.meta_path.insert(0, _Blocker())
'''
GROUPS = ["prefill == HF forward", "FastV kept set vs fp32 eager reference (8 frames)",
          "FastV kept set vs fp32 eager reference (15 frames)", "FastV prefill + decode == masked",
          "left-padded batch of 2", "kernel sdpa", "kernel eager", "kernel flash_attention_2",
          "memory model: 8 frames, none", "memory model: 8 frames, FastV auto", "memory model: 15 frames, none",
          "memory model: 15 frames, FastV auto", "prefill time/FLOPs, 8 frames, fastv R=0.50",
          "prefill time/FLOPs, 15 frames, fastv R=0.50", "end-to-end ask", "decode: static / compiled vs eager",
          "video tower: temporal attention / -hf"]


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(tmp_path / "site"), OUT="")
    run = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--cpu", str(tmp_path / "out")],
                         env=env, capture_output=True, text=True, timeout=600)
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert run.returncode == 0, (report["failed"], run.stderr[-2000:])
    assert not any(report["env"][f"has_{m}"] for m in ("gradio", "ray", "matplotlib", "decord"))  # blocked
    for group in GROUPS:
        assert any(name.startswith(group) for name in checks), group
    assert all(c["status"] in ("pass", "info", "skip") for c in checks.values())
    # the log names every check with its verdict as it completes (a run cut short still shows how far it got)
    progress = [line for line in run.stdout.splitlines() if line.startswith("gpu_check:   ")]
    assert len(progress) == len(report["checks"])
    for line, c in zip(progress, report["checks"], strict=True):
        assert line.startswith(f"gpu_check:   {c['status']}: {c['name']} ("), line

    # the figures come from real runs of the model (tiny: 65 tokens per frame, vocabulary of 400)
    hf = checks["prefill == HF forward (unpruned, 8 frames)"]
    assert hf["status"] == "pass" and hf["figures"]["logits_compared"] == 400
    for frames in (8, 15):
        kept = checks[f"FastV kept set vs fp32 eager reference ({frames} frames)"]["figures"]
        assert kept["visual"] == frames * 65 and kept["kept"] == kept["expected_kept"] == keep_count(frames * 65, 0.5)
    batch = next(c for n, c in checks.items() if n.startswith("left-padded batch"))["figures"]
    assert batch["padding"][0] == 0 < batch["padding"][1] and batch["decode_steps"] == 3
    memory = [c["figures"] for n, c in checks.items() if n.startswith("memory model")]
    assert len(memory) == 4 and all(m["kv_predicted_MiB"] == m["kv_measured_MiB"] > 0 for m in memory)
    assert all(m["measured_MiB"] > m["kv_measured_MiB"] for m in memory)  # activations were counted too
    assert checks["kernel sdpa: unpruned logits vs fp32, FastV kept set"]["status"] == "pass"

    md = (tmp_path / "out" / "gpu_check.md").read_text()
    assert md.count("\n| ") - md.count("\n|---") >= len(checks)
    # built as the published model: the video tower has LanguageBind's temporal attention; its cost is a row
    assert report["target"]["shapes"]["vision"]["temporal_attention"] is True
    tower = checks["video tower: temporal attention / -hf"]["figures"]
    assert tower["flops_ratio"] > 1 and tower["seconds_temporal"] > 0 < tower["seconds_hf"]
    for title in ("Prefill: time vs FLOPs", "Decode ms/token", "One answer by stage",
                  "Video tower: temporal attention's cost (8 frames)"):
        assert f"## {title}" in md
    decode = md.split("## Decode ms/token")[1]
    assert "| 8 | fastv | 2 | 0.50 |" in decode and "| 15 | none |" in decode
