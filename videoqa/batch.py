"""Batch QA over many clips: one JSONL record per (clip, question), resumable, locally or on Ray.

The results file is the source of truth. Every record is appended, flushed and fsynced as soon as it
exists, so killing the run loses at most the record in flight; re-running with the same `--out` reads the
file back, skips the keys already answered, and (with `--retry-errors`) retries the ones that failed.

The model call is one injected function, `answer_fn(video, question) -> dict`, so the bookkeeping here is
the same for the local engine, the Ray engine and the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import InputError
from .options import load_qa_from_kwargs, model_kwargs_from_args

VIDEO_EXTS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".gif", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv")
LIST_EXTS = (".txt", ".json", ".jsonl")

AnswerFn = Callable[[str, str], dict]


@dataclass
class WorkItem:
    """One (clip, question) to answer. `key` identifies it in the results file (the id when given)."""

    key: str
    video: str
    question: str
    id: str | None = None
    meta: dict = field(default_factory=dict)  # carried into the record unchanged (e.g. the reference answer)


@dataclass
class BatchSummary:
    out: str
    total: int  # work items asked for
    already_done: int  # answered in an earlier run and skipped
    skipped_errors: int  # failed in an earlier run and not retried (no --retry-errors)
    ran: int  # attempted in this run
    ok: int
    errors: int
    seconds: float  # from the first record asked for to the last one written
    startup_s: float = 0.0  # starting the engine: loading the model, or joining Ray

    @property
    def clips_per_s(self) -> float:
        return self.ran / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"{self.ran} run ({self.ok} ok, {self.errors} errors) in {self.seconds:.1f}s "
            f"({self.clips_per_s:.2f} clips/s, engine start {self.startup_s:.1f}s); "
            f"{self.already_done} already done, "
            f"{self.skipped_errors} earlier errors kept (retry with --retry-errors) -> {self.out}"
        )


def item_key(video: str, question: str, id: str | None = None) -> str:
    return str(id) if id is not None else f"{video}::{question}"


# ---------------------------------------------------------------------------------------------- work list


def find_videos(folder: Path) -> list[Path]:
    """Video files under `folder`, recursively, in a stable (sorted) order."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in VIDEO_EXTS)


def _read_list(path: Path) -> list[dict]:
    """A work list: .txt (one video per line) or .json/.jsonl of {video, question?, id?}."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".txt":
        rows = [
            {"video": line.strip()} for line in text.splitlines() if line.strip() and not line.startswith("#")
        ]
    elif path.suffix.lower() == ".json":
        rows = json.loads(text)
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{n}: not valid JSON ({e.msg})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "video" in r for r in rows):
        raise InputError(f"{path}: expected a list of objects with a 'video' field")
    for r in rows:  # relative video paths are relative to the list file, so a list travels with its clips
        if not Path(r["video"]).is_absolute():
            r["video"] = str(path.parent / r["video"])
    return rows


def read_questions(path: str | Path) -> list[str]:
    """Questions asked of every clip: a text file (one per line) or a JSON list of strings."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: questions file not found")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        qs = json.loads(text)
        if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs):
            raise InputError(f"{path}: expected a JSON list of strings")
    else:
        qs = [line.strip() for line in text.splitlines() if line.strip()]
    if not qs:
        raise InputError(f"{path}: no questions")
    return qs


def collect_work(paths: Iterable[str | Path], questions: list[str] | None = None) -> list[WorkItem]:
    """Expand folders (recursively), video files and work lists into (clip, question) items.

    Each clip gets every question in `questions`; list rows that carry their own `question` keep it.
    """
    items: dict[str, WorkItem] = {}

    def add(video: str, question: str, id: str | None, meta: dict) -> None:
        key = item_key(video, question, id)
        if key in items:
            if id is not None:
                raise InputError(f"duplicate id {id!r} in the work list")
            return  # the same clip and question reached twice (e.g. a folder and a file in it): ask once
        items[key] = WorkItem(key=key, video=video, question=question, id=id, meta=meta)

    for p in map(Path, paths):
        if p.is_dir():
            rows = [{"video": str(v)} for v in find_videos(p)]
        elif p.is_file() and p.suffix.lower() in LIST_EXTS:
            rows = _read_list(p)
        elif p.exists():
            rows = [{"video": str(p)}]
        else:
            raise InputError(f"{p}: no such file or folder")
        for r in rows:
            meta = {k: v for k, v in r.items() if k not in ("video", "question", "id")}
            id = None if r.get("id") is None else str(r["id"])
            if r.get("question"):
                add(r["video"], r["question"], id, meta)
            elif questions:
                for n, q in enumerate(questions):
                    # one id with several questions: suffix the question number to keep keys unique
                    qid = id if id is None or len(questions) == 1 else f"{id}#{n}"
                    add(r["video"], q, qid, meta)
            else:
                raise InputError(
                    f"{r['video']}: no question (give --question, --questions or a 'question' field)"
                )
    return list(items.values())


# ------------------------------------------------------------------------------------------- results file


def read_records(path: str | Path) -> list[dict]:
    """All complete records in a results file. A torn last line (the run was killed mid-write) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    lines = path.read_bytes().split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):  # no trailing newline: a record cut by a kill; it is simply redone
                continue
            print(f"videoqa: warning: {path}:{n}: skipping a line that is not JSON", file=sys.stderr)
    return records


def latest_by_key(records: Iterable[dict]) -> dict[str, dict]:
    """The last record of each key (a retried error is superseded by its retry)."""
    return {r["key"]: r for r in records if "key" in r}


def _drop_torn_tail(path: Path) -> None:
    """Cut a partial last line so the next append starts on a line of its own."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        data = path.read_bytes()
        f.truncate(data.rfind(b"\n") + 1)


def _rewrite_without(path: Path, drop_keys: set[str]) -> None:
    """Remove the records of `drop_keys` (errors about to be retried), atomically, so keys stay unique."""
    keep = [r for r in read_records(path) if r.get("key") not in drop_keys]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in keep:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ResultsWriter:
    """Appends one JSON line per record and makes it durable before returning."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_tail(path)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        # One write call per whole line, then flush + fsync: a kill can only tear the line being written.
        self._f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- records


def summarize_answer(answer: dict) -> dict:
    """The record fields of an `Answer.to_dict()`: text, kept-token summary (with indices), decision, stats.

    Per-token scores are dropped: they are for heatmaps, and for a 7B model they are 2,056 floats a record.
    """
    rec = {"answer": answer["answer"]}
    if isinstance(answer.get("kept"), dict):
        rec["kept"] = {k: v for k, v in answer["kept"].items() if k != "scores"}
    for k in ("prune", "decision", "flops", "stats"):
        if k in answer:
            rec[k] = answer[k]
    if isinstance(answer.get("video"), dict):  # which frames were sampled, not the whole probe
        rec["frames"] = {
            k: answer["video"][k] for k in ("indices", "timestamps", "backend") if k in answer["video"]
        }
    return rec


def base_record(item: WorkItem) -> dict:
    return {"key": item.key, "id": item.id, "video": item.video, "question": item.question, **item.meta}


def error_record(item: WorkItem, exc: BaseException) -> dict:
    return {**base_record(item), "answer": None, "error": f"{type(exc).__name__}: {exc}"}


def answer_one(item: WorkItem, answer_fn: AnswerFn) -> dict:
    """Answer one item; any failure becomes an error record so the run goes on."""
    t0 = time.perf_counter()
    try:
        out = answer_fn(item.video, item.question)
    except Exception as e:  # a bad clip, a decoder failure, a question too long: record it and move on
        rec = error_record(item, e)
    else:
        rec = {**base_record(item), **out, "error": None}
    rec["seconds"] = round(time.perf_counter() - t0, 4)
    return rec


def call_with_timeout(fn: Callable[[], object], timeout_s: float | None):
    """Run `fn` in a daemon thread and give up after `timeout_s` (a hung decoder is abandoned, not joined)."""
    if not timeout_s:
        return fn()
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TimeoutError(f"gave up after {timeout_s:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---------------------------------------------------------------------------------------------- running


def plan(items: list[WorkItem], done: dict[str, dict], retry_errors: bool) -> tuple[list[WorkItem], int, int]:
    """(items still to run, how many finished earlier, how many earlier errors are kept as they are)."""
    todo, n_done, n_err = [], 0, 0
    for it in items:
        prev = done.get(it.key)
        if prev is None:
            todo.append(it)
        elif prev.get("error"):
            if retry_errors:
                todo.append(it)
            else:
                n_err += 1
        else:
            n_done += 1
    return todo, n_done, n_err


def local_records(todo: list[WorkItem], answer_fn: AnswerFn, delay_s: float = 0.0) -> Iterator[dict]:
    for it in todo:
        rec = answer_one(it, answer_fn)
        rec["engine"] = "local"
        yield rec
        if delay_s:  # test hook (--test-delay): widens the window in which a kill lands mid-run
            time.sleep(delay_s)


def batched_records(todo: list[WorkItem], qa, batch_size: int) -> Iterator[dict]:
    """Answer `batch_size` items per left-padded batch (`VideoQA.ask_batch`: every answer equals asking
    alone). A batch holding a bad item is answered item by item, so only that item becomes an error."""
    for start in range(0, len(todo), batch_size):
        chunk = todo[start : start + batch_size]
        t0 = time.perf_counter()
        try:
            answers = qa.ask_batch([(it.video, it.question) for it in chunk])
        except Exception:  # a bad clip or question: isolate it
            yield from local_records(chunk, qa_answer_fn(qa))
            continue
        seconds = round((time.perf_counter() - t0) / len(chunk), 4)
        for it, answer in zip(chunk, answers, strict=True):
            rec = {**base_record(it), **summarize_answer(answer.to_dict()), "error": None}
            yield {**rec, "seconds": seconds, "engine": "local"}


def run_batch(
    items: list[WorkItem],
    out: str | Path,
    produce: Callable[[list[WorkItem]], Iterable[dict]],
    *,
    retry_errors: bool = False,
    progress: bool = True,
) -> BatchSummary:
    """Run `produce` over the items not yet in `out` and append its records as they arrive.

    `produce(todo)` yields one record per item, in any order (e.g. `local_records`, `ray_records`).
    """
    out = Path(out)
    done = latest_by_key(read_records(out))
    todo, n_done, n_err = plan(items, done, retry_errors)
    retried = {it.key for it in todo if it.key in done}
    if retried:
        _rewrite_without(out, retried)
    ok = errors = 0
    t0 = time.perf_counter()
    startup = 0.0
    if todo:
        from tqdm import tqdm

        records = produce(todo)  # engines start (load the model, join Ray) here, before the bar
        startup = time.perf_counter() - t0
        t0 = time.perf_counter()
        bar = tqdm(total=len(todo), unit="clip", file=sys.stderr, disable=not progress, dynamic_ncols=True)
        with ResultsWriter(out) as writer:
            try:
                for rec in records:
                    writer.write(rec)
                    if rec.get("error"):
                        errors += 1
                    else:
                        ok += 1
                    bar.set_postfix(errors=errors, refresh=False)
                    bar.update(1)
            finally:
                bar.close()
    return BatchSummary(
        out=str(out),
        total=len(items),
        already_done=n_done,
        skipped_errors=n_err,
        ran=ok + errors,
        ok=ok,
        errors=errors,
        seconds=time.perf_counter() - t0,
        startup_s=startup,
    )


def qa_answer_fn(qa) -> AnswerFn:
    """The local engine's model call: a loaded VideoQA, with the pruning it was loaded with."""

    def answer(video: str, question: str) -> dict:
        return summarize_answer(qa.ask(video, question).to_dict())

    return answer


def make_produce(args: argparse.Namespace) -> Callable[[list[WorkItem]], Iterable[dict]]:
    """The engine the options ask for. The local model is loaded only if there is something to run."""
    kwargs = model_kwargs_from_args(args)
    if args.engine == "ray":
        opts = RayOptions(
            actors=args.actors,
            gpus_per_actor=args.gpus_per_actor,
            timeout_s=args.timeout,
            address=args.ray_address,
        )
        return lambda todo: ray_records(todo, kwargs, opts)

    def produce(todo: list[WorkItem]) -> Iterator[dict]:
        qa = load_qa_from_kwargs(kwargs)  # before the progress bar starts, so its rate is clips only
        if args.batch_size > 1:
            return batched_records(todo, qa, args.batch_size)
        return local_records(todo, qa_answer_fn(qa), delay_s=args.test_delay)

    return produce


# ------------------------------------------------------------------------------------------------ Ray


@dataclass
class RayOptions:
    actors: int = 1  # model replicas
    gpus_per_actor: float | None = None  # None: 1 when the cluster has GPUs, else 0
    timeout_s: float | None = 600.0  # per clip, for decoding
    address: str | None = None  # None: $RAY_ADDRESS, else a local Ray
    num_cpus: int | None = None  # local Ray only (None: all cores)
    decode_cpus: float = 0.5  # CPU share of one decoding task


def fixed_frame_count(kwargs: dict) -> int | None:
    """The frames the pipeline will sample, when that does not depend on the device: an explicit --frames,
    or a fixed R (8 frames). With R=auto the count is chosen from the memory of the actor's device."""
    from .pipeline import DEFAULT_FRAMES

    if kwargs.get("frames"):
        return kwargs["frames"]
    prune = kwargs["prune"]
    return DEFAULT_FRAMES if prune["method"] == "none" or prune["r"] != "auto" else None


def _decode_row(row: dict, frames: int | None, timeout_s: float | None) -> dict:
    """CPU stage: decode the clip (or, when the frame count is the actor's choice, probe it) under a timeout.

    A failure becomes the row's `error`; the actor turns it into an error record without touching the model.
    """
    import pickle

    from .video import probe_video, sample_frames

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

    def __init__(self, model_kwargs: dict):
        self.qa = load_qa_from_kwargs(model_kwargs)
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


def ray_records(todo: list[WorkItem], model_kwargs: dict, opts: RayOptions) -> Iterator[dict]:
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
    return _ray_stream(todo, model_kwargs, opts, gpus)


def _ray_stream(todo: list[WorkItem], model_kwargs: dict, opts: RayOptions, gpus: float) -> Iterator[dict]:
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
            fn_kwargs={"frames": fixed_frame_count(model_kwargs), "timeout_s": opts.timeout_s},
            num_cpus=opts.decode_cpus,
        )
        ds = ds.map_batches(
            _QAActor,
            fn_constructor_kwargs={"model_kwargs": model_kwargs},
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


# -------------------------------------------------------------------------------------------------- CLI


def add_engine_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument(
        "--engine",
        default="local",
        choices=["local", "ray"],
        help="local: one model in this process; ray: an actor pool on Ray (RAY_ADDRESS or a local Ray)",
    )
    g.add_argument("--batch-size", type=int, default=1,
                   help="local: questions per left-padded batch (GPU throughput; same answers as 1)")
    g.add_argument("--actors", type=int, default=1, help="Ray: model replicas (one per actor; default 1)")
    g.add_argument(
        "--gpus-per-actor",
        type=float,
        default=None,
        help="Ray: GPUs per actor (default: 1 when the cluster has GPUs, else 0)",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="Ray: seconds allowed to decode one clip before it is recorded as an error (default 600)",
    )
    g.add_argument(
        "--ray-address", default=None, help="Ray cluster address (default: $RAY_ADDRESS, else local)"
    )
    g.add_argument(
        "--retry-errors", action="store_true", help="re-run items whose earlier record is an error"
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--test-delay", type=float, default=0.0, help=argparse.SUPPRESS)


def register(sub) -> None:
    from .options import add_model_options, add_prune_options

    p = sub.add_parser(
        "batch",
        help="answer questions about many clips into a resumable JSONL file",
        description=__doc__.splitlines()[0],
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="video files, folders (searched recursively) or work lists (.txt of videos, "
        ".json/.jsonl of {video, question, id})",
    )
    q = p.add_mutually_exclusive_group()
    q.add_argument("--question", help="question asked of every clip")
    q.add_argument("--questions", help="file of questions (one per line, or a JSON list) asked of every clip")
    p.add_argument("--out", required=True, help="results JSONL; re-running with the same file resumes")
    add_model_options(p)
    add_prune_options(p)
    add_engine_options(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    questions = (
        [args.question] if args.question else read_questions(args.questions) if args.questions else None
    )
    items = collect_work(args.paths, questions)
    if not items:
        raise InputError("no videos found in " + ", ".join(args.paths))
    summary = run_batch(
        items, args.out, make_produce(args), retry_errors=args.retry_errors, progress=not args.no_progress
    )
    print(summary.line())
    return 0
