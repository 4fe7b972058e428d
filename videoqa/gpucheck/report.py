"""Check results, and the markdown and JSON reports made of them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

PASS, FAIL, INFO, SKIP = "pass", "FAIL", "info", "skip"


@dataclass
class Check:
    """One check: what was compared, the criterion, the figures it produced and the verdict.

    status: pass / FAIL (the criterion was applied) / info (figures only: the criterion does not apply on this
    target, e.g. speed at tiny shapes) / skip (did not run; `note` says why)."""

    name: str
    status: str
    criterion: str
    figures: dict = field(default_factory=dict)
    note: str = ""
    seconds: float = 0.0  # of the group of checks it was produced with


def verdict(ok: bool, gated: bool = True) -> str:
    return INFO if not gated else (PASS if ok else FAIL)


@dataclass
class Report:
    target: dict
    env: dict
    checks: list[Check] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    def add(self, check: Check) -> Check:
        self.checks.append(check)
        return check

    def run(self, name: str, fn: Callable[[], list[Check] | Check], out: Path | None) -> None:
        """Run one group of checks; an exception becomes a FAIL with its message, and the report is rewritten
        after every group so that a run cut short still leaves what it measured."""
        t0 = time.perf_counter()
        try:
            produced = fn()
            for check in produced if isinstance(produced, list) else [produced]:
                if not check.seconds:
                    check.seconds = time.perf_counter() - t0
                self.add(check)
        except Exception as e:  # noqa: BLE001 - the report must say what broke and go on
            self.add(Check(name, FAIL, "runs without error", note=f"{type(e).__name__}: {e}",
                           seconds=time.perf_counter() - t0))
        if out is not None:
            self.write(out)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    def to_dict(self) -> dict:
        return {"target": self.target, "env": self.env, "checks": [asdict(c) for c in self.checks],
                "tables": self.tables, "failed": [c.name for c in self.failed],
                "elapsed_s": round(time.perf_counter() - self.started, 1)}

    def markdown(self) -> str:
        d = self.to_dict()
        lines = [f"# GPU check: {self.target.get('name')} on {self.env.get('device_name')}", "",
                 f"{len(self.checks)} checks, {len(self.failed)} failed, {d['elapsed_s']} s. "
                 f"torch {self.env.get('torch')}, transformers {self.env.get('transformers')}.", "",
                 "| check | status | key figures | criterion | note |", "|---|---|---|---|---|"]
        for c in self.checks:
            lines.append(f"| {c.name} | {c.status} | {_figures(c.figures)} | {c.criterion} | {c.note} |")
        for title, table in self.tables.items():
            lines += ["", f"## {title}", "", table]
        lines += ["", "## Environment", "", "```", json.dumps({"target": self.target, "env": self.env}, indent=1),
                  "```"]
        return "\n".join(lines) + "\n"

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_check.json").write_text(json.dumps(self.to_dict(), indent=1, default=str) + "\n")
        (out / "gpu_check.md").write_text(self.markdown())


def _figures(figures: dict, limit: int = 6) -> str:
    parts = []
    for key, value in list(figures.items())[:limit]:
        if isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, (list, dict)):
            continue
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def environment(device: str) -> dict:
    """Versions and the device, and which optional pieces are importable."""
    import importlib.util

    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__, "device": device,
           "cuda": torch.version.cuda, "device_name": "cpu"}
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(device_name=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                   multiprocessors=props.multi_processor_count)
    for mod in ("flash_attn", "av", "decord", "gradio", "ray", "matplotlib"):
        try:
            env[f"has_{mod}"] = importlib.util.find_spec(mod) is not None
        except ImportError:  # an import hook that refuses it
            env[f"has_{mod}"] = False
    return env

