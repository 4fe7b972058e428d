"""The Ray back end: CPU tasks decode clips (under a timeout), an actor pool with one model per actor answers.

Work travels one row per clip (`clip_rows`): the clip's questions go to one actor together, which decodes and
encodes the clip once and answers every question on its prefix cache (llm/prefix_cache.py).

Built on Ray Data so decoding and answering overlap. The pipeline runs inside a small driver actor on the
cluster (Ray Data cannot run through Ray Client), which hands records to this process as they complete;
this process writes them to the same resumable results file as the local back end. Clips travel by absolute
path with a fingerprint (`shipped.py`); how to join a cluster: `ray_connect.py`.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import InputError, VideoQAError
from ..measure import call_with_timeout
from .ray_connect import connect, resolve_address
from .run import Produce, answer_one, base_record, summarize_answer
from .shipped import check_same_file, error_text, shipped_rows, shipped_spec
from .worklist import WorkItem


@dataclass(frozen=True)
class RayOptions:
    """How the Ray back end is laid out on the cluster."""

    actors: int = 1  # model replicas
    cpus_per_actor: float | None = None  # None: 1, or the share that lets all actors and decoding fit
    gpus_per_actor: float | None = None  # None: 1 when the cluster has GPUs, else 0; 0.5: two actors a GPU
    timeout_s: float | None = 600.0  # per clip, for decoding
    address: str | None = None  # None: $RAY_ADDRESS, else a local Ray
    num_cpus: int | None = None  # local Ray only (None: all cores)
    decode_cpus: float = 0.5  # CPU share of one decoding task
    batch_size: int = 1  # questions of one clip an actor answers per left-padded batch

    def __post_init__(self):
        """Refuse a layout that cannot run, before Ray is joined: a timeout of -1 or nan would make every
        clip an error record. Messages name the command-line options these fields come from."""
        def bad(flag: str, value, want: str) -> InputError:
            return InputError(f"{flag}: expected {want}, got {value:g}")

        def finite(x) -> bool:
            return isinstance(x, (int, float)) and math.isfinite(x)

        if not isinstance(self.actors, int) or self.actors < 1:
            raise bad("--actors", self.actors, "a whole number >= 1")
        if self.num_cpus is not None and (not isinstance(self.num_cpus, int) or self.num_cpus < 1):
            raise bad("--num-cpus", self.num_cpus, "a whole number >= 1")
        if self.timeout_s is not None and not (finite(self.timeout_s) and self.timeout_s > 0):
            raise bad("--timeout", self.timeout_s, "a number of seconds > 0")
        if self.cpus_per_actor is not None and not (finite(self.cpus_per_actor) and self.cpus_per_actor > 0):
            raise bad("--cpus-per-actor", self.cpus_per_actor, "a number > 0")
        if self.gpus_per_actor is not None and not (finite(self.gpus_per_actor) and self.gpus_per_actor >= 0):
            raise bad("--gpus-per-actor", self.gpus_per_actor, "a number >= 0")


def fixed_frame_count(model_spec: dict, base_frames: int) -> int | None:
    """The frames the pipeline will sample, when that does not depend on the device: an explicit --frames,
    or a fixed R (the model's base frames, `base_frames`). With R=auto the count is chosen from the memory of
    the actor's device."""
    from ..pruning import PruneConfig

    if model_spec.get("frames"):
        return model_spec["frames"]
    return None if PruneConfig(**model_spec["prune"]).adaptive else base_frames


def clip_rows(rows: list[dict]) -> list[dict]:
    """`shipped_rows` as one row per clip (by absolute path, in first-seen order): its questions' items as a JSON
    list in their order, its path and fingerprint."""
    groups: dict[str, dict] = {}
    for row in rows:
        group = groups.setdefault(row["path"], {"items": [], "path": row["path"], "fingerprint": row["fingerprint"]})
        group["items"].append(json.loads(row["item"]))
    return [{**group, "items": json.dumps(group["items"])} for group in groups.values()]


def _items(row: dict) -> list[WorkItem]:
    """A row's work: a clip row's questions, or the one question of a `shipped_rows` row."""
    data = json.loads(row["items"]) if "items" in row else [json.loads(row["item"])]
    return [WorkItem(**d) for d in data]


def _decode_row(row: dict, frames: int | None, timeout_s: float | None, sampler: str = "uniform") -> dict:
    """CPU stage: check the clip is the one the driver saw, then decode it with `sampler` (or, when the frame
    count is the actor's choice, probe its length) under a timeout. A failure becomes the row's `error`; the
    actor turns it into an error record."""
    import pickle

    from ..video import probe_video, sample_frames

    path = row["path"]
    clip, error, duration = b"", "", None
    try:
        check_same_file(path, row["fingerprint"])
        if frames:
            clip = pickle.dumps(call_with_timeout(lambda: sample_frames(path, frames, sampler=sampler), timeout_s))
        else:
            duration = call_with_timeout(lambda: probe_video(path), timeout_s).duration_s
    except Exception as e:
        error = error_text(e, path, _items(row)[0].video)
    return {**row, "clip": clip, "error": error, "duration": duration}


class _QAActor:
    """Ray actor: one VideoQA per actor, loaded once; answers every question of the clips the CPU stage decoded,
    `batch_size` questions of a clip per left-padded batch."""

    def __init__(self, model_spec: dict, timeout_s: float | None, batch_size: int = 1):
        from ..pipeline import VideoQA

        t0 = time.perf_counter()
        self.qa = VideoQA.from_spec(model_spec)
        self.load_s = time.perf_counter() - t0  # reported with this actor's first record
        self.timeout_s = timeout_s
        self.batch_size = batch_size

    def _video(self, item: WorkItem, path: str, fingerprint: str, clip, duration: float | None):
        """The clip to answer on: the CPU stage's decoded `clip`, else (R=auto: the frame count is this device's
        choice) decoded here (after checking this node has the driver's file at `path`), under the timeout, into
        the pipeline's clip cache, so answering the path finds it there."""
        if clip is not None:
            return clip
        check_same_file(path, fingerprint)
        frames = self.qa.frames_to_sample(item.question, duration)  # the plan `ask` will make, from the same stage
        call_with_timeout(lambda: self.qa.sample(path, frames), self.timeout_s)
        return path

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        out = []
        columns = ("path", "fingerprint", "clip", "error", "duration")
        rows = [dict(zip(columns, values, strict=True)) for values in zip(*(batch[c] for c in columns), strict=True)]
        work = "items" if "items" in batch else "item"
        for row, value in zip(rows, batch[work], strict=True):
            for rec in self._clip_records(_items({work: value}), row):
                rec = {**rec, "backend": "ray"}
                if self.load_s is not None:
                    rec["_model_load_s"], self.load_s = round(self.load_s, 3), None
                out.append(json.dumps(rec, ensure_ascii=False))
        return {"record": np.array(out, dtype=object)}

    def _clip_records(self, items: list[WorkItem], row: dict) -> list[dict]:
        """Records of one clip's questions, in their order."""
        if row["error"]:  # the CPU stage could not decode it
            return [{**base_record(item), "answer": None, "error": str(row["error"]), "seconds": 0.0} for item in items]
        import pickle

        records, ready = {}, []
        clip = pickle.loads(row["clip"]) if len(row["clip"]) else None  # once for all its questions
        for i, item in enumerate(items):
            try:
                video = self._video(item, row["path"], row["fingerprint"], clip, _seconds(row["duration"]))
                ready.append((i, item, video))
            except Exception as e:  # decoding under R=auto failed or timed out
                records[i] = {**base_record(item), "answer": None, "error": error_text(e, row["path"], item.video),
                              "seconds": 0.0}
        for start in range(0, len(ready), self.batch_size):
            records.update(self._answer(ready[start:start + self.batch_size]))
        return [records[i] for i in sorted(records)]

    def _answer(self, ready: list) -> dict[int, dict]:
        """Records of decoded questions: one left-padded batch when there are several (each answer equals asking
        alone); a batch that fails is answered question by question, so only the bad one becomes an error."""
        if len(ready) > 1:
            t0 = time.perf_counter()
            try:
                answers = self.qa.ask_batch([(video, item.question) for _, item, video in ready])
            except Exception:
                pass
            else:
                seconds = round((time.perf_counter() - t0) / len(ready), 4)
                return {i: {**base_record(item), **summarize_answer(a.to_dict()), "error": None, "seconds": seconds}
                        for (i, item, _), a in zip(ready, answers, strict=True)}
        return {i: answer_one(item, lambda _v, q, video=video: summarize_answer(self.qa.ask(video, q).to_dict()))
                for i, item, video in ready}


def _seconds(x) -> float | None:
    """A duration from a numpy batch column, where a missing one may have become NaN."""
    return None if x is None or x != x else float(x)


def _layout(opts: RayOptions) -> dict:
    """CPUs and GPUs per actor on the cluster we joined; refuses what cannot be scheduled, in one line."""
    import ray

    resources = ray.cluster_resources()
    cpus, gpus_total = resources.get("CPU", 0), resources.get("GPU", 0)
    if opts.actors < 1 or opts.batch_size < 1:
        raise InputError("--actors and --batch-size must be >= 1")
    gpus = opts.gpus_per_actor if opts.gpus_per_actor is not None else (1 if gpus_total > 0 else 0)
    if gpus and gpus_total < opts.actors * gpus:
        raise InputError(f"--actors {opts.actors} with {gpus:g} GPU each needs {opts.actors * gpus:g} GPUs; "
                         f"the cluster has {gpus_total:g} (fractions share one: --gpus-per-actor 0.5)")
    per_actor = opts.cpus_per_actor
    if per_actor is None:  # one CPU each, or an even share of what decoding leaves (a 2-CPU machine: 0.75)
        per_actor = min(1.0, int(100 * (cpus - opts.decode_cpus) / opts.actors) / 100)
    # Actors hold their CPUs for the whole run; without some left over, decoding never gets scheduled.
    if per_actor <= 0 or opts.actors * per_actor + opts.decode_cpus > cpus + 1e-9:
        raise InputError(f"--actors {opts.actors} x {per_actor:g} CPUs plus {opts.decode_cpus:g} for decoding do "
                         f"not fit the cluster's {cpus:g} CPUs; use fewer actors or a smaller --cpus-per-actor")
    return {"cpus": per_actor, "gpus": gpus}


def _pipeline(rows: list[dict], model_spec: dict, opts: RayOptions, layout: dict) -> Iterator[dict]:
    """The Ray Data pipeline over `shipped_rows`; runs where Ray Data can run (the driver actor)."""
    import ray

    from ..model_policy import policy_of

    ray.data.DataContext.get_current().enable_progress_bars = False  # the caller's bar counts records
    ds = ray.data.from_items(rows, override_num_blocks=min(len(rows), 200))
    # Decoding asks for a different CPU share than the actors so Ray does not fuse it into the actor
    # process: clips are decoded by CPU tasks while the actors run the model, not in turn with it.
    # the frames the actor's pipeline would sample: the spec's sampler, else the model card's
    card = policy_of(model_spec["model"])
    sampler = model_spec.get("sampler") or card.sampler
    frames = fixed_frame_count(model_spec, card.policy.base_frames)
    ds = ds.map(_decode_row, fn_kwargs={"frames": frames, "timeout_s": opts.timeout_s,
                                        "sampler": sampler}, num_cpus=opts.decode_cpus)
    # One clip a call: its records come back together, after all of its questions.
    ds = ds.map_batches(_QAActor, fn_constructor_kwargs={"model_spec": model_spec, "timeout_s": opts.timeout_s,
                                                         "batch_size": opts.batch_size},
                        batch_size=1, batch_format="numpy",
                        compute=ray.data.ActorPoolStrategy(size=opts.actors), num_cpus=layout["cpus"],
                        num_gpus=layout["gpus"])
    for row in ds.iter_rows():
        yield json.loads(row["record"])


class _Driver:
    """Driver actor: runs the pipeline in a thread and hands out the records produced so far."""

    def __init__(self, rows: list[dict], model_spec: dict, opts: RayOptions, layout: dict):
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, args=(rows, model_spec, opts, layout), daemon=True).start()

    def _run(self, *args) -> None:
        try:
            for rec in _pipeline(*args):
                self._queue.put(rec)
            self._queue.put(None)
        except Exception as e:
            self._queue.put(f"{type(e).__name__}: {e}")

    def take(self, wait_s: float = 1.0) -> tuple[list[dict], bool, str | None]:
        """(records, finished, error): what is ready, waiting up to `wait_s` for the first one."""
        out: list[dict] = []
        try:
            got = self._queue.get(timeout=wait_s)
            while isinstance(got, dict):
                out.append(got)
                got = self._queue.get_nowait()
        except queue.Empty:
            return out, False, None
        return out, True, got  # None: done; a string: the pipeline failed


class RayRun:
    """The records of one Ray run, in completion order; `phases` says where the time went."""

    def __init__(self, todo: list[WorkItem], model_spec: dict, opts: RayOptions):
        import ray

        # Paths are resolved here, where the user typed them, and checked before anything is sent. One row per
        # clip: a clip's questions all go to one actor, whose caches (decoded clip, encoding, prompt prefix)
        # serve them.
        rows, model_spec = clip_rows(shipped_rows(todo)), shipped_spec(model_spec)
        self.joined, connect_s = connect(resolve_address(opts.address), opts.num_cpus)
        self.phases = {"cluster connect": connect_s}
        layout = _layout(opts)
        # The driver actor needs no CPU of its own: it only waits on the pipeline.
        self._driver = ray.remote(num_cpus=0)(_Driver).remote(rows, model_spec, opts, layout)
        self._t0 = time.perf_counter()

    def __iter__(self) -> Iterator[dict]:
        import ray

        loads = []
        finished = False
        while not finished:
            try:
                records, finished, error = ray.get(self._driver.take.remote())
            except ray.exceptions.RayError as e:  # the driver actor or its node is gone
                error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                records, finished = [], True
            for rec in records:
                if "_model_load_s" in rec:
                    loads.append(rec.pop("_model_load_s"))
                yield rec
            if error:
                raise VideoQAError(f"the Ray run stopped: {error}; the records written so far are kept, "
                                   "re-run the same command to resume")
        if loads:
            self.phases["model load"] = max(loads)  # the slowest actor; it overlaps with decoding
        self.phases["processing"] = time.perf_counter() - self._t0


def ray_backend(model_spec: dict, opts: RayOptions) -> Produce:
    """The Ray back end for `model_spec` (see `VideoQA.from_spec`): each actor loads its own model."""
    return lambda todo: ray_records(todo, model_spec, opts)


def ray_records(todo: list[WorkItem], model_spec: dict, opts: RayOptions) -> RayRun:
    """Answer `todo` on Ray: CPU tasks decode, an actor pool (one model each) answers; records stream back
    as they complete. Joins Ray (and checks the layout fits) before returning."""
    return RayRun(todo, model_spec, opts)
