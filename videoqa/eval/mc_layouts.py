"""The six multiple-choice benchmarks as they are distributed, read as lmms-eval reads them (its
`lmms_eval/tasks/{videomme,mvbench,egoschema,longvideobench,mlvu,nextqa}`): the same fields, option lettering
and prompt strings (each benchmark's default `post_prompt`). docs/evaluation.md gives each layout, and where
videoqa differs from lmms-eval and why.

A loader takes the benchmark's folder and a split and returns its questions as `MCItem`s; the exporter turns
predictions into the file the benchmark's own scorer or submission server takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..jsonio import read_json
from .choice import BAD_REFERENCE, LETTERS, MCItem, lettered, strip_letter
from .mc_files import field, file_index, find, first_file, read_rows

VIDEOMME_PROMPT = ("Select the best answer to the following multiple-choice question based on the video. "
                   "Respond with only the letter (A, B, C, or D) of the correct option.")
VIDEOMME_PROMPT_SUBS = ("Select the best answer to the following multiple-choice question based on the video and "
                        "the subtitles. Respond with only the letter (A, B, C, or D) of the correct option.")
VIDEOMME_SUBS_HEAD = "This video's subtitles are listed below: \n"
LETTER_DIRECTLY = "Answer with the option's letter from the given choices directly."
MVBENCH_POST = "Only give the best option.\n"
MLVU_POST = "\nOnly give the best option.\nBest option: ("
NEXTQA_GROUPS = {"CW": "causal", "CH": "causal", "TN": "temporal", "TC": "temporal", "TP": "temporal",
                 "DL": "descriptive", "DC": "descriptive", "DO": "descriptive"}
# MVBench's task -> its videos' folder (lmms-eval's DATA_LIST), under video/ of the Hugging Face copy.
MVBENCH_VIDEOS = {
    "object_interaction": "star/Charades_segment", "action_sequence": "star/Charades_segment",
    "action_prediction": "star/Charades_segment", "action_localization": "sta/sta_video_segment",
    "moving_count": "clevrer/video_validation", "fine_grained_pose": "nturgbd_convert",
    "character_order": "perception/videos", "object_shuffle": "perception/videos",
    "egocentric_navigation": "vlnqa", "moving_direction": "clevrer/video_validation",
    "episodic_reasoning": "tvqa/video_fps3_hq_segment", "fine_grained_action": "Moments_in_Time_Raw/videos",
    "scene_transition": "scene_qa/video", "state_change": "perception/videos",
    "moving_attribute": "clevrer/video_validation", "action_antonym": "ssv2_video_mp4",
    "unexpected_action": "FunQA_test/test", "counterfactual_inference": "clevrer/video_validation",
    "object_existence": "clevrer/video_validation", "action_count": "perception/videos",
}
MLVU_MC_TASKS = ("plotQA", "needle", "ego", "count", "order", "anomaly_reco", "topic_reasoning")

Loaded = tuple[list[MCItem], int]  # (items, questions in the files before the split is applied)


def _letter_of_index(value, n: int, path: Path, i: int, name: str) -> str | None:
    try:
        k = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{path}: entry {i}: {name!r} is {value!r}, expected an option index") from None
    return LETTERS[k] if 0 <= k < n else BAD_REFERENCE


# -- Video-MME ------------------------------------------------------------------------------------------------


def _srt_lines(path: Path) -> list[tuple[float, float, str]]:
    """(start s, end s, text) of each SRT cue, font tags removed."""
    cues = []
    for block in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
        lines = block.strip().splitlines()
        m = re.match(r"(\d+):(\d+):(\d+)[,.](\d+)\s*-->\s*(\d+):(\d+):(\d+)[,.](\d+)", lines[1]) if len(lines) >= 3 \
            else None
        if m:
            h1, m1, s1, f1, h2, m2, s2, f2 = (int(x) for x in m.groups())
            text = re.sub(r"<[^>]+>", "", " ".join(lines[2:])).strip()
            cues.append((h1 * 3600 + m1 * 60 + s1 + f1 / 1000, h2 * 3600 + m2 * 60 + s2 + f2 / 1000, text))
    return cues


def subtitles_at_frames(srt: Path, video: Path | None, frames: int) -> str:
    """The subtitle lines shown at `frames` evenly spaced times of the video (lmms-eval's selection), in order;
    every line when the video's length cannot be read."""
    cues = _srt_lines(srt)
    duration = None
    if video is not None:
        try:
            import av

            with av.open(str(video)) as c:
                duration = c.duration / 1e6 if c.duration else None
        except Exception:  # noqa: BLE001 - an unreadable video is the prediction's error record, not the prompt's
            duration = None
    if not duration:
        return "\n".join(t for _, _, t in cues)
    times = [duration * k / max(frames - 1, 1) for k in range(frames)]
    return "\n".join(t for s, e, t in cues if any(s <= x < e for x in times))


def videomme_prompt(question: str, listing: str, subtitles: str | None = None) -> str:
    """Video-MME's prompt: the instruction, the question, its 'A. ...' lines, "The best answer is:"; with
    subtitles (None: without), they come first and the instruction names them."""
    if subtitles is None:
        return f"{VIDEOMME_PROMPT}\n{question}\n{listing}\nThe best answer is:"
    return f"{VIDEOMME_SUBS_HEAD}{subtitles}\n{VIDEOMME_PROMPT_SUBS}\n{question}\n{listing}\nThe best answer is:"


def load_videomme(root: Path, split: str | None, subtitles: bool = False, frames: int = 8) -> Loaded:
    """lmms-eval/Video-MME: videomme/test-*.parquet (or the rows as .json/.jsonl), data/{videoID}.mp4,
    subtitle/{videoID}.srt. split: short / medium / long (default: all)."""
    path = first_file(root, ["videomme/test-*.parquet", "videomme/*.parquet", "videomme/*.json*", "*.parquet",
                             "test.json*"], "Video-MME (videomme/test-*.parquet, data/, subtitle/)")
    rows = read_rows(path)
    videos, subs = file_index(root / "data"), file_index(root / "subtitle")
    items = []
    for i, r in enumerate(rows):
        vid = str(field(r, "videoID", path, i))
        options = field(r, "options", path, i, (list,))
        duration = str(field(r, "duration", path, i))
        if split and duration != split:
            continue
        question = str(field(r, "question", path, i))
        listing = "\n".join(str(o) for o in options)
        video = find(videos, vid)
        subs_text = None
        if subtitles:
            srt = subs.get(f"{vid}.srt")
            subs_text = subtitles_at_frames(srt, video, frames) if srt else "No subtitles available"
        prompt = videomme_prompt(question, listing, subs_text)
        items.append(MCItem(
            question_id=str(field(r, "question_id", path, i)), video_name=vid, video=video, question=question,
            options=[strip_letter(str(o), k) for k, o in enumerate(options)],
            answer=str(field(r, "answer", path, i)).strip().upper(), prompt=prompt,
            categories={"duration": duration, "task_type": str(field(r, "task_type", path, i)),
                        "domain": str(r.get("domain", "?"))},
            raw={k: r.get(k) for k in ("videoID", "video_id", "duration", "domain", "sub_category", "task_type",
                                       "question_id", "question", "options", "answer")},
        ))
    return items, len(rows)


def export_videomme(items: list[MCItem], replies: dict[str, str]) -> tuple[str, object]:
    """Video-MME's eval_your_results.py input: one entry per video (`missing` when its clip was not found, which
    that script's skip_missing leaves out) with its questions and a `response` each."""
    videos: dict[str, dict] = {}
    for it in items:
        r = it.raw
        v = videos.setdefault(it.video_name, {"video_id": r.get("video_id") or it.video_name,
                                              "duration": r.get("duration"), "domain": r.get("domain"),
                                              "sub_category": r.get("sub_category"),
                                              "missing": it.video is None, "questions": []})
        v["questions"].append({"question_id": it.question_id, "task_type": r.get("task_type"),
                               "question": it.question, "options": r.get("options"), "answer": it.answer,
                               "response": replies.get(it.question_id, "")})
    return "videomme_results.json", list(videos.values())


# -- MVBench -------------------------------------------------------------------------------------------------


def load_mvbench(root: Path, split: str | None) -> Loaded:
    """OpenGVLab/MVBench: json/{task}.json (20 files of {video, question, candidates, answer}) and the videos
    under video/{folder of the task}/ (or the folders at the top, as lmms-eval links them). split: one task."""
    files = sorted((root / "json").glob("*.json"))
    if not files:
        raise InputError(f"{root}: no json/*.json here (expected the MVBench layout: json/{{task}}.json with "
                         "video, question, candidates, answer)")
    if split and not (root / "json" / f"{split}.json").is_file():
        raise InputError(f"{root / 'json' / (split + '.json')}: no such MVBench task file")
    index = {**file_index(root), **file_index(root / "video")}
    items, total = [], 0
    for path in files:
        task = path.stem
        rows = read_rows(path)
        total += len(rows)
        if split and task != split:
            continue
        folder = MVBENCH_VIDEOS.get(task, "")
        for i, r in enumerate(rows):
            cands = [str(c) for c in field(r, "candidates", path, i, (list,))]
            answer = str(field(r, "answer", path, i))
            name = str(field(r, "video", path, i))
            question = str(field(r, "question", path, i))
            video = (find(index, f"{folder}/{name}") or find(index, f"data0613/{folder}/{name}")
                     or find(index, name))
            options = "".join(f"{o}\n" for o in lettered(cands, "({L}) {text}"))
            items.append(MCItem(
                question_id=f"{task}_{i}", video_name=name, video=video, question=question, options=cands,
                answer=LETTERS[cands.index(answer)] if answer in cands else BAD_REFERENCE,
                prompt=f"Question:{question}\nOption:\n{options}{MVBENCH_POST}",
                categories={"task": task}, raw={"task": task, "video": name, "answer": answer},
            ))
    return items, total


# -- EgoSchema -----------------------------------------------------------------------------------------------


def load_egoschema(root: Path, split: str | None) -> Loaded:
    """EgoSchema's release: questions.json ({q_uid, question, option 0..4}), subset_answers.json
    ({q_uid: index}), videos/{q_uid}.mp4. split: subset (the 500 with public answers, default) or full (all
    5,031, unscored: for the submission file)."""
    path = first_file(root, ["questions.json", "MC/*.parquet", "Subset/*.parquet"],
                      "EgoSchema (questions.json, subset_answers.json, videos/)")
    rows = read_rows(path)
    answers_path = root / "subset_answers.json"
    answers = {}
    if answers_path.is_file():
        try:
            answers = {str(k): v for k, v in read_json(answers_path, InputError).items()}
        except AttributeError:
            raise InputError(f"{answers_path}: expected a JSON object {{q_uid: option index}}") from None
    videos = file_index(root / "videos") or file_index(root)
    items = []
    for i, r in enumerate(rows):
        if "q_uid" in r:  # the release
            uid = str(field(r, "q_uid", path, i))
            options = [str(field(r, f"option {k}", path, i)) for k in range(5)]
            ref = answers.get(uid)
        else:  # lmms-eval's copy: video_idx, option (5 'A. ...' strings), answer
            uid = str(field(r, "video_idx", path, i))
            options = [strip_letter(str(o), k) for k, o in enumerate(field(r, "option", path, i, (list,)))]
            ref = r.get("answer") if str(r.get("answer", "")).strip() != "" else answers.get(uid)
        if (split or "subset") == "subset" and ref is None:
            continue
        question = str(field(r, "question", path, i))
        listing = "".join(f"\n{o}" for o in lettered(options))
        items.append(MCItem(
            question_id=uid, video_name=uid, video=find(videos, uid), question=question, options=options,
            answer=None if ref is None else _letter_of_index(ref, len(options), path, i, "answer"),
            prompt=f"{question}{listing}\n{LETTER_DIRECTLY}", raw={"q_uid": uid},
        ))
    if (split or "subset") == "subset" and not items:
        raise InputError(f"{answers_path}: no answers for the questions of {path} (the subset needs "
                         "subset_answers.json; --split full writes the submission file without scoring)")
    return items, len(rows)


def export_egoschema(items: list[MCItem], letters: dict[str, str | None]) -> tuple[str, object]:
    """The validation server's upload: {q_uid: option index}, -1 where the reply named no option."""
    return "egoschema_submission.json", {
        it.question_id: LETTERS.index(letters[it.question_id]) if letters.get(it.question_id) else -1
        for it in items if it.question_id in letters
    }


# -- LongVideoBench ------------------------------------------------------------------------------------------


def load_longvideobench(root: Path, split: str | None) -> Loaded:
    """longvideobench/LongVideoBench: lvb_val.json (or lvb_test_wo_gt.json with --split test), rows with id,
    video_path, question, candidates (or option0..4, 'N/A' when absent), correct_choice, duration_group,
    question_category; videos/{video_path}."""
    name = "lvb_test_wo_gt" if split == "test" else "lvb_val"
    path = first_file(root, [f"{name}.json", f"{name}.parquet", f"*/{name}*.parquet"],
                      f"LongVideoBench ({name}.json, videos/)")
    rows = read_rows(path)
    videos = file_index(root / "videos")
    items = []
    for i, r in enumerate(rows):
        if "candidates" in r:
            options = [str(c) for c in field(r, "candidates", path, i, (list,))]
        else:
            options = [str(r[f"option{k}"]) for k in range(5) if r.get(f"option{k}") not in (None, "N/A")]
            if not options:
                raise InputError(f"{path}: entry {i} has no 'candidates' (nor option0..option4)")
        question = str(field(r, "question", path, i))
        ref = r.get("correct_choice")
        listing = "\n".join(lettered(options))
        vp = str(field(r, "video_path", path, i))
        items.append(MCItem(
            question_id=str(field(r, "id", path, i)), video_name=vp, video=find(videos, vp), question=question,
            options=options, answer=None if ref is None else _letter_of_index(ref, len(options), path, i,
                                                                              "correct_choice"),
            prompt=f"{question}\n{listing}\n{LETTER_DIRECTLY}\n",
            categories={"duration_group": str(r.get("duration_group", "?")),
                        "question_category": str(r.get("question_category", "?"))},
        ))
    return items, len(rows)


def export_longvideobench(items: list[MCItem], replies: dict[str, str]) -> tuple[str, object]:
    """The test-set submission lmms-eval writes: {id: reply}."""
    return "longvideobench_submission.json", {it.question_id: replies[it.question_id] for it in items
                                              if it.question_id in replies}


# -- MLVU ----------------------------------------------------------------------------------------------------


def load_mlvu(root: Path, split: str | None) -> Loaded:
    """MLVU's dev release: json/{n}_{task}.json for the multiple-choice tasks (plotQA, needle, ego, count, order,
    anomaly_reco, topic_reasoning) with video, question, candidates, answer (text), question_type; videos under
    video/{n}_{task}/. The generation tasks (sub_scene, summary) need a judge and are skipped. split: one task."""
    files = [p for p in sorted((root / "json").glob("*.json")) if re.sub(r"^\d+_", "", p.stem) in MLVU_MC_TASKS]
    if not files:
        raise InputError(f"{root}: no json/{{n}}_{{task}}.json for the MLVU multiple-choice tasks here (expected "
                         "the MLVU layout: json/1_plotQA.json ... with video, question, candidates, answer)")
    index = file_index(root / "video")
    items, total = [], 0
    for path in files:
        task = re.sub(r"^\d+_", "", path.stem)
        rows = read_rows(path)
        total += len(rows)
        if split and task != split:
            continue
        for i, r in enumerate(rows):
            cands = [str(c) for c in field(r, "candidates", path, i, (list,))]
            answer = str(field(r, "answer", path, i))
            name = str(field(r, "video", path, i))
            question = str(field(r, "question", path, i))
            listing = "\n".join(lettered(cands, "({L}) {text}"))
            items.append(MCItem(
                question_id=f"{task}_{i}", video_name=name, video=find(index, f"{path.stem}/{name}")
                or find(index, name), question=question, options=cands,
                answer=LETTERS[cands.index(answer)] if answer in cands else BAD_REFERENCE,
                prompt=f"{question}\n{listing}{MLVU_POST}", categories={"task_type": task},
                raw={"question_type": r.get("question_type", task), "video": name},
            ))
    return items, total


# -- NExT-QA -------------------------------------------------------------------------------------------------


def load_nextqa(root: Path, split: str | None) -> Loaded:
    """NExT-QA's release: {test,val}.csv (video, question, answer, qid, type, a0..a4) and NExTVideo/ (with
    map_vid_vidorID.json from video id to folder/file, or the clips flat as lmms-eval keeps them)."""
    name = split or "test"
    path = first_file(root, [f"{name}.csv", f"nextqa/{name}.csv", f"MC/{name}-*.parquet"],
                      f"NExT-QA ({name}.csv, NExTVideo/)")
    rows = read_rows(path)
    videos = file_index(root / "NExTVideo")
    mapping = {}
    map_file = root / "map_vid_vidorID.json"
    if map_file.is_file():
        mapping = read_json(map_file, InputError)
        if not isinstance(mapping, dict):
            raise InputError(f"{map_file}: expected a JSON object {{video: vidor id}}")
        mapping = {str(k): str(v) for k, v in mapping.items()}
    items = []
    for i, r in enumerate(rows):
        vid = str(field(r, "video", path, i))
        options = [str(field(r, f"a{k}", path, i)).strip() for k in range(5)]
        question = str(field(r, "question", path, i)).strip()
        qtype = str(r.get("type", "?"))
        items.append(MCItem(
            question_id=f"{vid}_{r.get('qid', i)}", video_name=vid,
            video=find(videos, mapping.get(vid, vid)) or find(videos, vid), question=question, options=options,
            answer=_letter_of_index(field(r, "answer", path, i), 5, path, i, "answer"),
            prompt="\n".join([question, *lettered(options)]),
            categories={"group": NEXTQA_GROUPS.get(qtype, "?"), "type": qtype},
            raw={"video": vid, "qid": r.get("qid"), "type": qtype},
        ))
    return items, len(rows)


@dataclass(frozen=True)
class MCBenchmark:
    name: str
    title: str
    load: Callable[..., Loaded]
    category_keys: tuple[str, ...]
    splits: tuple[str, ...]  # values --split takes (empty: the loader's one set)
    max_new_tokens: int  # lmms-eval's generation_kwargs
    macro_key: str | None = None  # the headline averages this key's categories (MLVU's M-Avg)
    export: Callable[[list[MCItem], dict], tuple[str, object]] | None = None
    export_letters: bool = False  # the exporter takes extracted letters, not replies


MC_BENCHMARKS: dict[str, MCBenchmark] = {b.name: b for b in (
    MCBenchmark("videomme", "Video-MME", load_videomme, ("duration", "task_type", "domain"),
                ("short", "medium", "long"), 16, export=export_videomme),
    MCBenchmark("mvbench", "MVBench", load_mvbench, ("task",), tuple(MVBENCH_VIDEOS), 16),
    MCBenchmark("egoschema", "EgoSchema", load_egoschema, (), ("subset", "full"), 16,
                export=export_egoschema, export_letters=True),
    MCBenchmark("longvideobench", "LongVideoBench", load_longvideobench, ("duration_group", "question_category"),
                ("val", "test"), 32, export=export_longvideobench),
    MCBenchmark("mlvu", "MLVU (multiple-choice)", load_mlvu, ("task_type",), MLVU_MC_TASKS, 16,
                macro_key="task_type"),
    MCBenchmark("nextqa", "NExT-QA (multiple-choice)", load_nextqa, ("group", "type"), ("test", "val"), 16),
)}
