"""The Ray engine: CPU tasks decode clips (under a timeout), an actor pool with one model per actor answers.

Built on Ray Data so decoding and answering overlap and records stream back to the driver as they are
completed; the driver writes them to the same resumable results file as the local engine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from ..errors import InputError
from .local import call_with_timeout, qa_answer_fn
from .run import Produce, answer_one, base_record
from .worklist import WorkItem


@dataclass(frozen=True)
class RayOptions:
    """How the Ray engine is laid out on the cluster."""

    actors: int = 1  # model replicas
    gpus_per_actor: float | None = None  # None: 1 when the cluster has GPUs, else 0
    timeout_s: float | None = 600.0  # per clip, for decoding
    address: str | None = None  # None: $RAY_ADDRESS, else a local Ray
    num_cpus: int | None = None  # local Ray only (None: all cores)
    decode_cpus: float = 0.5  # CPU share of one decoding task


def fixed_frame_count(model_spec: dict) -> int | None:
    """The frames the pipeline will sample, when that does not depend on the device: an explicit --frames,
    or a fixed R (8 frames). With R=auto the count is chosen from the memory of the actor's device."""
    from ..pipeline import DEFAULT_FRAMES

    if model_spec.get("frames"):
        return model_spec["frames"]
    prune = model_spec["prune"]
    return DEFAULT_FRAMES if prune["method"] == "none" or prune["r"] != "auto" else None


def _decode_row(row: dict, frames: int | None, timeout_s: float | None) -> dict:
    """CPU stage: decode the clip (or, when the frame count is the actor's choice, probe it) under a timeout.

    A failure becomes the row's `error`; the actor turns it into an error record without touching the model.
    """
    import pickle

    from ..video import probe_video, sample_frames

    item = WorkItem(**json.loads(row["item"]))
    clip, error = b"", ""
    try:
        if frames:
            clip = pickle.dumps(call_with_timeout(lambda: sample_frames(item.video, frames), timeout_s))
        else:
            call_with_timeout(lambda: probe_video(item.video), timeout_s)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    return {"item": row["item"], "clip": clip, "error": error}


class _QAActor:
    """Ray actor: one VideoQA per actor, loaded once; answers the rows the CPU stage decoded."""

    def __init__(self, model_spec: dict):
        from ..pipeline import VideoQA

        self.qa = VideoQA.from_spec(model_spec)
        self.answer_fn = qa_answer_fn(self.qa)

    def __call__(self, batch: dict) -> dict:
        import pickle

        import numpy as np

        out = []
        for item_json, clip, error in zip(batch["item"], batch["clip"], batch["error"], strict=True):
            item = WorkItem(**json.loads(item_json))
            if error:  # the CPU stage could not decode it
                rec = {**base_record(item), "answer": None, "error": str(error), "seconds": 0.0}
            else:
                video = pickle.loads(clip) if len(clip) else item.video
                rec = answer_one(item, lambda _v, q, video=video: self.answer_fn(video, q))
            rec["engine"] = "ray"
            out.append(json.dumps(rec, ensure_ascii=False))
        return {"record": np.array(out, dtype=object)}


def ray_engine(model_spec: dict, opts: RayOptions) -> Produce:
    """The Ray engine for `model_spec` (see `VideoQA.from_spec`): each actor loads its own model."""
    return lambda todo: ray_records(todo, model_spec, opts)


def ray_records(todo: list[WorkItem], model_spec: dict, opts: RayOptions) -> Iterator[dict]:
    """Answer `todo` on Ray: CPU tasks decode, an actor pool (one model each) answers; records stream back
    to the driver as they complete, in completion order."""
    import ray

    if not ray.is_initialized():
        address = opts.address or os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address)
        else:
            ray.init(num_cpus=opts.num_cpus, include_dashboard=False)
    resources = ray.cluster_resources()
    gpus = opts.gpus_per_actor
    if gpus is None:
        gpus = 1 if resources.get("GPU", 0) > 0 else 0
    # Actors hold their CPU for the whole run; without a CPU left over, decoding never gets scheduled.
    need_cpus = opts.actors + opts.decode_cpus
    if resources.get("CPU", 0) < need_cpus:
        raise InputError(f"--actors {opts.actors} needs {need_cpus:g} CPUs on Ray (one per actor, plus decoding); "
                         f"the cluster has {resources.get('CPU', 0):g}")
    if gpus and resources.get("GPU", 0) < opts.actors * gpus:
        raise InputError(f"--actors {opts.actors} with {gpus:g} GPU each needs {opts.actors * gpus:g} GPUs; "
                         f"the cluster has {resources.get('GPU', 0):g}")
    return _ray_stream(todo, model_spec, opts, gpus)


def _ray_stream(todo: list[WorkItem], model_spec: dict, opts: RayOptions, gpus: float) -> Iterator[dict]:
    import ray

    ctx = ray.data.DataContext.get_current()
    bars = ctx.enable_progress_bars
    ctx.enable_progress_bars = False  # our own bar counts records; restored below
    try:
        rows = [{"item": json.dumps(asdict(it))} for it in todo]
        ds = ray.data.from_items(rows, override_num_blocks=min(len(rows), 200))
        # Decoding asks for a different CPU share than the actors so Ray does not fuse it into the actor
        # process: clips are decoded by CPU tasks while the actors run the model, not in turn with it.
        ds = ds.map(
            _decode_row,
            fn_kwargs={"frames": fixed_frame_count(model_spec), "timeout_s": opts.timeout_s},
            num_cpus=opts.decode_cpus,
        )
        ds = ds.map_batches(
            _QAActor,
            fn_constructor_kwargs={"model_spec": model_spec},
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=opts.actors),
            num_cpus=1,
            num_gpus=gpus,
        )
        for row in ds.iter_rows():
            yield json.loads(row["record"])
    finally:
        ctx.enable_progress_bars = bars
