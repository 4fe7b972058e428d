"""`python -m videoqa.gpucheck [--cpu] [OUT]`: run every check, write OUT/gpu_check.{md,json}, exit 1 on a FAIL."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from . import correctness, memory, speed
from .models import build_qa, cpu_target, gpu_target, shapes_of
from .report import Report, environment


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m videoqa.gpucheck", description=__doc__)
    p.add_argument("out", nargs="?", default=os.environ.get("OUT") or "artifacts/gpu_check",
                   help="report folder (default: $OUT, else artifacts/gpu_check)")
    p.add_argument("--cpu", action="store_true", help="dry run at tiny shapes on the CPU (seconds)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd decode step")
    p.add_argument("--frames", type=int, nargs="+", help="frame counts (default: 8 15)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; use --cpu for the dry run", file=sys.stderr)
        return 2
    target = cpu_target() if args.cpu else gpu_target()
    if args.no_compile:
        target = replace(target, compile=False)
    if args.frames:
        target = replace(target, frames=tuple(args.frames))
    out = Path(args.out)
    report = Report(target={k: str(v) for k, v in asdict(target).items()}, env=environment(target.device))
    qa, seconds = build_qa(target)
    report.target.update(shapes=shapes_of(qa), build_s=round(seconds, 1))
    print(f"gpu_check: built {target.name} on {target.device} in {seconds:.1f} s; report -> {out}", flush=True)
    gated = qa.device.type == "cuda"
    _correctness(qa, target, report, out)
    if gated:
        torch.cuda.empty_cache()  # the fp32 reference (27 GB at 7B) is gone
    for name, fn in [
        ("memory model", lambda: memory.memory_checks(qa, target.frames, target.memory_new_tokens, gated)),
        ("prefill speed", lambda: speed.prefill_speed(qa, target, report)),
        ("answer stages", lambda: speed.answer_stages(qa, target, report)),
        ("decode speed", lambda: speed.decode_speed(qa, target, report)),
        ("tower speed", lambda: speed.tower_speed(qa, target, report)),
    ]:
        _step(report, name, fn, out)
    report.write(out)
    print(report.markdown(), flush=True)
    failed = report.failed
    print(f"gpu_check: {len(report.checks)} checks, {len(failed)} failed"
          + (": " + "; ".join(c.name for c in failed) if failed else ""), file=sys.stderr)
    return 1 if failed else 0


def _correctness(qa, target, report: Report, out: Path) -> None:
    ref = correctness.Reference.of(qa)
    for name, fn in [
        ("prefill == HF", lambda: correctness.prefill_matches_hf(qa, ref)),
        ("FastV kept sets", lambda: [correctness.fastv_kept_vs_fp32(qa, ref, f) for f in target.frames]),
        ("FastV masked reference", lambda: correctness.fastv_matches_masked_reference(qa, ref)),
        ("batch", lambda: correctness.batch_matches_single(qa, ref)),
        ("kernels", lambda: correctness.kernels(qa, ref, target)),
    ]:
        _step(report, name, fn, out)


def _step(report: Report, name: str, fn, out: Path) -> None:
    """Run one group and print a line per check it produced: when a run is cut short, its log still says how
    far it got and what each check gave (a group yields several checks, e.g. one per kernel)."""
    print(f"gpu_check: {name} ...", flush=True)
    before = len(report.checks)
    report.run(name, fn, out)
    for check in report.checks[before:]:
        note = f" - {check.note}" if check.note else ""
        print(f"gpu_check:   {check.status}: {check.name} ({check.seconds:.1f} s){note}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
