"""Inputs as a player shows them, end to end: a frame count that cannot fit fails before any decoding,
what a damaged or single-frame file could not give reaches the answer, the command line and batch records,
and rotated clips reach the model (and its heatmaps) upright."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import clipgen

from videoqa.cli import main
from videoqa.errors import InputError
from videoqa.heatmap import render_heatmaps
from videoqa.model import LoadedModel
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig

CONTEXT, TOKENS_PER_FRAME, MAX_NEW = 4096, 65, 8  # the tiny model's context and frames; tiny_qa's answer budget


class RecordingQA(VideoQA):
    """The pipeline, remembering the frame count of every call to its sampling stage."""

    def __init__(self, loaded: LoadedModel, **kw):
        super().__init__(loaded, **kw)
        self.sampled: list[int] = []

    def sample(self, video, num_frames, *args, **kwargs):
        self.sampled.append(num_frames)
        return super().sample(video, num_frames, *args, **kwargs)


@pytest.fixture(scope="module")
def qa(tiny_qa):
    loaded = LoadedModel(tiny_qa.model, tiny_qa.processor, tiny_qa.device, tiny_qa.dtype, tiny_qa.name)
    return RecordingQA(loaded, max_new_tokens=MAX_NEW)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    return {
        "clip": clipgen.write_clip(root / "clip.mp4", n_frames=24),
        "garbage": clipgen.write_corrupt(root / "garbage.mkv"),
        "still": clipgen.write_clip(root / "still.gif", n_frames=1, fmt="gif"),
        "portrait": clipgen.write_rotated(root / "portrait.mp4", -90, size=(48, 64)),
    }


def text_tokens(qa: VideoQA, question: str) -> int:
    """Prompt tokens besides the visual ones, counted independently of the pipeline's check: the prompt
    with 8 frames' worth of video tokens, minus them."""
    ids = qa.processor.tokenizer(f"USER: <video>\n{question} ASSISTANT:").input_ids
    return len(ids) - 1


# ------------------------------------------------------------------------------ frame count vs context


def test_impossible_frame_count_fails_before_decoding(qa, media):
    question = "What is it?"
    most = (CONTEXT - text_tokens(qa, question) - MAX_NEW) // TOKENS_PER_FRAME  # unpruned tokens must fit
    configs = [PruneConfig("fastv", k=2, r=0.5), PruneConfig("none"), PruneConfig("random", r=0.9, keep_positions=True)]
    for cfg in configs:
        qa.sampled.clear()
        with pytest.raises(InputError) as err:
            qa.ask(media["clip"], question, prune=cfg, frames=200)
        message = str(err.value)
        assert "\n" not in message and "200 frames" in message and f"context of {CONTEXT}" in message
        assert f"at most {most} frames" in message, message
        assert qa.sampled == [], cfg  # nothing was decoded
    # the limit it names is exact: that many frames are answered, one more is refused before decoding
    qa.sampled.clear()
    answer = qa.ask(media["clip"], question, prune=PruneConfig("fastv", k=2, r=0.5), frames=most)
    assert qa.sampled == [most] and answer.stats.prompt_tokens + MAX_NEW <= CONTEXT
    with pytest.raises(InputError, match=f"{most + 1} frames"):
        qa.ask(media["clip"], question, prune=PruneConfig("fastv", k=2, r=0.5), frames=most + 1)
    assert qa.sampled == [most]


def test_frames_that_fit_once_pruned_before_the_llm_are_decoded(qa, media):
    """Random/VisPruner put only the kept tokens in the prompt: 70 frames (4550 tokens) kept at R=0.9 fit."""
    qa.sampled.clear()
    answer = qa.ask(media["clip"], "What is it?", prune=PruneConfig("random", r=0.9), frames=70)
    assert qa.sampled == [70] and answer.kept.n_visual == 70 * TOKENS_PER_FRAME
    assert answer.stats.prompt_tokens + MAX_NEW <= CONTEXT


def test_auto_caps_the_frames_before_decoding(qa, media):
    qa.sampled.clear()
    answer = qa.ask(media["clip"], "What is it?", prune=PruneConfig("fastv", k=2, r="auto"), frames=200)
    assert qa.sampled == [answer.decision.frames] and answer.decision.frames < 200
    assert "200 frames" in answer.decision.warnings[0]


def test_cli_impossible_frame_count_is_one_line_exit_2(capsys, tiny_model_dir, media):
    code = main(["ask", str(media["clip"]), "What?", "--model", str(tiny_model_dir), "--frames", "200",
                 "--r", "0.5"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "200 frames" in err and "Traceback" not in err


# ------------------------------------------------------------------------------ what the file could not give


def test_answer_says_it_was_built_on_one_frame(tiny_qa, media):
    answer = tiny_qa.ask(media["garbage"], "What is it?")
    assert answer.stats.frames == 8 and answer.stats.distinct_frames == 1
    assert answer.warnings == answer.clip.warnings and len(answer.warnings) == 2
    assert "declares 4.8 s of video but only 0.1 s could be read" in answer.warnings[0]
    assert "frames 8 (1 distinct)" in answer.summary()
    record = answer.to_dict()
    assert record["warnings"] == answer.warnings and record["stats"]["distinct_frames"] == 1
    healthy = tiny_qa.ask(media["clip"], "What is it?")
    assert healthy.warnings == [] and "frames 8 |" in healthy.summary()


@pytest.mark.parametrize("json_out", [False, True])
def test_cli_prints_the_warnings_on_stderr(capsys, tiny_model_dir, media, json_out):
    argv = ["ask", str(media["still"]), "What?", "--model", str(tiny_model_dir), "--max-new-tokens", "2"]
    code = main(argv + (["--json"] if json_out else []))
    out, err = capsys.readouterr()
    assert code == 0
    assert "videoqa: warning: a single image, not a video: all 8 frames are the same picture" in err.splitlines()
    if json_out:
        assert json.loads(out)["warnings"] == ["a single image, not a video: all 8 frames are the same picture"]


def test_batch_records_carry_the_warnings(tmp_path, tiny_model_dir, media):
    folder = tmp_path / "clips"
    folder.mkdir()
    for name in ("clip", "still", "garbage"):
        (folder / media[name].name).write_bytes(media[name].read_bytes())
    out = tmp_path / "out.jsonl"
    code = main(["batch", str(folder), "--question", "What?", "--out", str(out), "--model", str(tiny_model_dir),
                 "--max-new-tokens", "2", "--no-progress"])
    assert code == 0
    records = {json.loads(line)["video"].rsplit("/", 1)[-1]: json.loads(line) for line in out.read_text().splitlines()}
    assert records["clip.mp4"]["warnings"] == []
    assert records["still.gif"]["warnings"] == ["a single image, not a video: all 8 frames are the same picture"]
    assert len(records["garbage.mkv"]["warnings"]) == 2 and records["garbage.mkv"]["error"] is None


# ------------------------------------------------------------------------------ rotation


def test_rotated_clip_reaches_the_model_and_heatmaps_upright(tiny_qa, media):
    """A portrait clip stored landscape: the model sees it upright, and so do the heatmaps drawn from it."""
    answer = tiny_qa.ask(media["portrait"], "What is it?", prune=PruneConfig("none"))
    frames = answer.clip.frames
    assert frames.shape[1:3] == (64, 48) and all(clipgen.is_rgb(f) for f in frames)
    assert [clipgen.read_index(f) for f in frames] == [i * 11 // 7 for i in range(8)]
    vp = tiny_qa.processor.video_processor
    images = [np.asarray(img) for img, _ in render_heatmaps(answer.clip, answer.kept, vp.size, vp.crop_size)]
    # the centre crop of an upright frame keeps part of the red strip on top, none at the bottom
    assert all(clipgen.is_rgb(img) and not clipgen.is_rgb(img[::-1]) for img in images)
