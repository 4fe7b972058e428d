"""The frame sampler is an option of every command that runs the model, of VideoQA and of each call; the model
card's is the default; answers and batch records say which chose the frames, and records made with different
samplers never share a key."""

from __future__ import annotations

import json
import pickle
import shutil

import pytest
from helpers.clipgen import write_event_clip

from videoqa.batch.ray_backend import _decode_row
from videoqa.batch.shipped import shipped_rows
from videoqa.batch.store import read_records
from videoqa.batch.worklist import WorkItem, answer_options, fingerprint
from videoqa.cli import main
from videoqa.errors import InputError
from videoqa.model_card import CARD_FILE
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig
from videoqa.video import SAMPLERS
from videoqa.video import sample_frames as decode


@pytest.fixture(scope="module")
def event_clip(tmp_path_factory):
    """A 30-40 s clip with a brief event 8 uniform frames miss: there content frames differ from uniform ones."""
    path = write_event_clip(tmp_path_factory.mktemp("sampler") / "event.mp4")
    assert decode(path, 8, sampler="content").indices != decode(path, 8).indices
    return path


def test_the_card_and_the_command_line_take_the_decoders_samplers(tmp_path, event_clip):
    """Every sampler the card and `--sampler` accept, the decoder runs; a card naming another is refused."""
    from videoqa.cli import build_parser
    from videoqa.model_card import read_card

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    choices = next(a.choices for a in sub.choices["ask"]._actions if "--sampler" in a.option_strings)
    assert tuple(choices) == SAMPLERS
    for name in SAMPLERS:
        assert decode(event_clip, 4, sampler=name).sampler == name
        (tmp_path / CARD_FILE).write_text(json.dumps({"policy": {"sampler": name}}))
        assert read_card(tmp_path).policy["sampler"] == name
    (tmp_path / CARD_FILE).write_text(json.dumps({"policy": {"sampler": "scenes"}}))
    with pytest.raises(Exception, match="sampler"):
        read_card(tmp_path)


def test_pipeline_and_call_choose_the_sampler(tiny_model_dir, event_clip):
    none = PruneConfig(method="none")
    qa = VideoQA.from_pretrained(str(tiny_model_dir), prune=none, max_new_tokens=2, sampler="content")
    assert qa.sampler == "content"
    content = qa.ask(event_clip, "What is it?")
    want = decode(event_clip, 8, sampler="content")
    assert content.stats.sampler == "content" and content.clip.indices == want.indices
    video = content.to_dict()["video"]
    assert video["sampler"] == "content" and video["timestamps"] == pytest.approx(want.timestamps, abs=1e-5)
    assert "content at " in content.summary()
    uniform = qa.ask(event_clip, "What is it?", sampler="uniform")  # per call; the cache keeps both apart
    assert uniform.stats.sampler == "uniform" and uniform.clip.indices == decode(event_clip, 8).indices
    assert VideoQA.from_pretrained(str(tiny_model_dir), prune=none).sampler == "uniform"  # Video-LLaVA's default
    with pytest.raises(InputError, match="unknown frame sampler 'scenes'"):
        qa.ask(event_clip, "What is it?", sampler="scenes")
    with pytest.raises(InputError, match="unknown frame sampler"):
        VideoQA.from_pretrained(str(tiny_model_dir), sampler="scenes")


def test_the_cards_sampler_is_the_default(tiny_model_dir, tmp_path, event_clip, capsys):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    (folder / CARD_FILE).write_text(json.dumps({"policy": {"sampler": "content"}}))
    assert VideoQA.from_pretrained(str(folder)).sampler == "content"
    assert main(["ask", str(event_clip), "What?", "--model", str(folder), "--prune", "none", "--max-new-tokens", "1",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["sampler"] == "content"
    assert main(["ask", str(event_clip), "What?", "--model", str(folder), "--prune", "none", "--max-new-tokens", "1",
                 "--sampler", "uniform", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["sampler"] == "uniform"


def test_a_bad_sampler_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["ask", "x.mp4", "q", "--sampler", "scenes"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--sampler" in err and "scenes" in err and len(err.splitlines()) == 1


def test_batch_records_are_keyed_by_sampler(tiny_model_dir, event_clip, tmp_path):
    spec = {"model": str(tiny_model_dir), "prune": {"method": "none"}, "frames": None, "prompt": "plain"}
    uniform = answer_options(spec)
    assert "sampler" not in uniform  # keys made before the option existed stay valid
    assert answer_options({**spec, "sampler": "uniform"}) == uniform
    content = answer_options({**spec, "sampler": "content"})
    assert content["sampler"] == "content" and fingerprint(content) != fingerprint(uniform)

    out = tmp_path / "o.jsonl"
    base = ["batch", str(event_clip), "--question", "What?", "--out", str(out), "--model", str(tiny_model_dir),
            "--prune", "none", "--max-new-tokens", "1"]
    assert main(base + ["--sampler", "content"]) == 0
    assert main(base) == 0  # another sampler: a new record, not "already done"
    recs = read_records(out)
    assert len(recs) == 2 and len({r["key"] for r in recs}) == 2
    by_sampler = {r["frames"]["sampler"]: r for r in recs}
    assert by_sampler["content"]["frames"]["indices"] == decode(event_clip, 8, sampler="content").indices
    assert by_sampler["uniform"]["frames"]["indices"] == decode(event_clip, 8).indices


def test_the_ray_decode_stage_uses_the_sampler(event_clip):
    item = WorkItem(key="k", id="i", video=str(event_clip), question="q", meta={})
    (row,) = shipped_rows([item])  # the row as the driver ships it: absolute path and fingerprint
    out = _decode_row(row, 8, None, sampler="content")
    clip = pickle.loads(out["clip"])
    assert not out["error"] and clip.sampler == "content"
    assert clip.indices == decode(event_clip, 8, sampler="content").indices
