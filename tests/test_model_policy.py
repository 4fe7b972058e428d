"""The adaptive policy's constants come from the model's videoqa.json, else Video-LLaVA-7B's defaults, and every
adaptive answer names where each came from."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from conftest import SAMPLE_CLIPS

from videoqa.cli import main
from videoqa.model_card import CARD_FILE, read_card, write_policy
from videoqa.model_policy import DEFAULTS, policy_of
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig
from videoqa.pruning.adaptive import AdaptivePolicy, GiB, decide
from videoqa.video import probe_video

CARD_POLICY = {"frames": 4, "seconds_per_frame": 0.5, "budget_exponent": 0.5, "r_max": 0.8, "k": 1,
               "note": "a test's constants"}


@pytest.fixture
def carded(tiny_model_dir, tmp_path):
    folder = tmp_path / "carded"
    shutil.copytree(tiny_model_dir, folder)
    (folder / CARD_FILE).write_text(json.dumps({"conversation": "plain", "policy": CARD_POLICY}))
    return folder


def adaptive_answer(folder) -> tuple[VideoQA, object]:
    qa = VideoQA.from_pretrained(str(folder), prune=PruneConfig(method="fastv", r="auto"), max_new_tokens=4)
    qa.free_memory = lambda _device: 64 * GiB  # plan for ample memory: the constants alone decide
    return qa, qa.ask(SAMPLE_CLIPS[0], "What is it?")


def test_without_a_card_video_llava_7b_defaults_apply(tiny_model_dir):
    qa, answer = adaptive_answer(tiny_model_dir)
    assert qa.policy == AdaptivePolicy() and qa.prune.k == 2 and qa.model_policy.sampler == "uniform"
    # the documented defaults are the policy's own
    p = AdaptivePolicy()
    assert [DEFAULTS[n][0] for n in ("frames", "r", "seconds_per_frame", "budget_exponent", "r_max")] == [
        p.base_frames, p.base_r, p.seconds_per_frame, p.budget_exponent, p.r_max]
    constants = answer.to_dict()["decision"]["constants"]
    assert set(constants) == set(DEFAULTS)
    assert all(c["source"].startswith("default (Video-LLaVA-7B: ") for c in constants.values())
    assert constants["k"] == {"value": 2, "source": "default (Video-LLaVA-7B: FastV's K=2)"}


def test_a_card_changes_the_decision_and_is_named_as_its_source(carded):
    qa, answer = adaptive_answer(carded)
    assert qa.prune.k == 1  # the card's K where none was asked for
    assert qa.ask(SAMPLE_CLIPS[0], "What?", prune=PruneConfig(method="fastv", k=3, r="auto")).kept.layer == 3
    # independently: the pure policy function with the card's constants
    duration = probe_video(SAMPLE_CLIPS[0]).duration_s
    want = decide(duration, qa.dims, answer.stats.prompt_tokens - answer.stats.visual_tokens, 64 * GiB, k=1,
                  policy=replace(AdaptivePolicy(), base_frames=4, seconds_per_frame=0.5, budget_exponent=0.5,
                                 r_max=0.8, new_tokens=4))
    default = decide(duration, qa.dims, answer.stats.prompt_tokens - answer.stats.visual_tokens, 64 * GiB, k=2,
                     policy=replace(AdaptivePolicy(), new_tokens=4))
    d = answer.decision
    assert (d.frames, d.kept) == (want.frames, want.kept) != (default.frames, default.kept)
    assert answer.stats.frames == want.frames and answer.kept.layer == 1
    source = str(carded / CARD_FILE)  # the note once, not in each source (issue 37, finding 8)
    constants = answer.to_dict()["decision"]["constants"]
    assert constants["seconds_per_frame"] == {"value": 0.5, "source": source}
    assert constants["k"] == {"value": 1, "source": source}
    assert constants["note"] == {"value": "a test's constants", "source": source}
    assert constants["sampler"]["source"] == "default (Video-LLaVA-7B: uniform frames, as trained)"


def test_a_policy_set_by_hand_is_named_so(carded):
    qa = VideoQA.from_pretrained(str(carded), prune=PruneConfig(method="fastv", r="auto"), max_new_tokens=4)
    qa.policy = replace(qa.policy, seconds_per_frame=3.0)
    constants = qa.ask(SAMPLE_CLIPS[0], "What is it?").decision.constants
    assert constants["seconds_per_frame"] == {"value": 3.0, "source": "set on the pipeline (VideoQA.policy)"}
    assert constants["r_max"]["source"].startswith(str(carded / CARD_FILE))


def test_the_command_line_takes_the_cards_k(carded, capsys):
    assert main(["ask", str(SAMPLE_CLIPS[0]), "What is it?", "--model", str(carded), "--max-new-tokens", "2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prune"]["k"] == 1 and out["decision"]["constants"]["k"]["value"] == 1
    assert policy_of(str(carded)).k == 1


def test_write_policy_keeps_the_rest_of_the_card(carded):
    write_policy(carded, {"seconds_per_frame": 2.0, "k": 2})
    card = read_card(carded)
    assert card.conversation == "plain" and card.policy == {"seconds_per_frame": 2.0, "k": 2}


def test_the_sweep_writes_its_choice_into_the_card(carded):
    from videoqa.bench.long import RowResult
    from videoqa.bench.long.sweep import sweep_rows, write_choice

    rows = sweep_rows([(2.0, 0.25, 0.9, 1, 0.0, 0.5), (3.0, 0.5, 0.8, 2, 0.0, 0.5), (1.5, 0.25, 0.9, 2, 0.0, 0.5)])

    def result(short, long_, flops):
        return RowResult("r", {"all": (short + long_, 200), "≤10 s": (short, 100), ">30 s": (long_, 100)},
                         {}, 0.0, {"all": flops, "≤10 s": flops, ">30 s": flops}, {}, 0.0, 0)

    ref = result(90, 50, 1.0)
    # the third variant is best on > 30 s but over the FLOPs; the first loses 2 points on short clips
    results = [ref, result(90, 50, 0.5), result(88, 70, 0.9), result(90, 65, 0.9), result(90, 80, 1.2)]
    line = write_choice(carded, rows, results, "a test")
    card = read_card(carded)
    assert rows[3].label in line and card.conversation == "plain"
    assert {k: v for k, v in card.policy.items() if k != "note"} == {
        "frames": 8, "k": 2, "r": 0.5, "seconds_per_frame": 3.0, "budget_exponent": 0.5, "r_max": 0.8,
        "sampler": "uniform"}
    assert "a test" in card.policy["note"] and policy_of(str(carded)).policy.seconds_per_frame == 3.0
    before = (carded / CARD_FILE).read_text()
    assert "left as it was" in write_choice(carded, rows, [ref] + [result(80, 90, 0.5)] * 4, "x")
    assert (carded / CARD_FILE).read_text() == before


def test_a_content_sampler_variant_writes_its_sampler_into_the_card(carded):
    from videoqa.bench.long import RowResult
    from videoqa.bench.long.sweep import VARIANTS, sweep_rows, write_choice

    assert {v[6] for v in VARIANTS if len(v) > 6} == {"content"}  # the sweep tries the content sampler
    rows = sweep_rows([(3.0, 0.25, 0.9, 2, 0.0, 0.5), (3.0, 0.25, 0.9, 2, 0.0, 0.5, "content")])
    assert [r.sampler for r in rows[2:]] == ["uniform", "content"] and "content sampler" in rows[3].label

    def result(long_):
        return RowResult("r", {"all": (90 + long_, 200), "≤10 s": (90, 100), ">30 s": (long_, 100)},
                         {}, 0.0, {"all": 0.9, "≤10 s": 0.9, ">30 s": 0.9}, {}, 0.0, 0)

    write_choice(carded, rows, [result(50), result(50), result(60), result(70)], "a test")
    assert read_card(carded).policy["sampler"] == "content"
    assert policy_of(str(carded)).sampler == "content"


def test_bench_run_folders_follow_the_cards_constants(carded, tiny_model_dir):
    from videoqa.bench.long import Row

    row = Row("adaptive FastV", PruneConfig(method="fastv", k=2, r="auto"))
    fixed = Row("8 frames", PruneConfig(method="none"), 8)
    plain, card = policy_of(str(tiny_model_dir)), policy_of(str(carded))
    assert row.folder("m", "test", plain) == row.folder("m", "test")  # no card: the names runs always had
    assert row.folder("m", "test", card) != row.folder("m", "test")  # a rewritten card never resumes old runs
    assert fixed.folder("m", "test", card) == fixed.folder("m", "test")  # a row the policy does not touch


def test_the_cards_frames_are_also_the_fixed_r_frame_count(carded):
    """A model trained on 4 frames gets 4 with a fixed R too, not the 8 Video-LLaVA-7B was trained with."""
    qa = VideoQA.from_pretrained(str(carded), prune=PruneConfig(method="fastv", r=0.5), max_new_tokens=4)
    assert qa.ask(SAMPLE_CLIPS[0], "What is it?").stats.frames == CARD_POLICY["frames"]
    from videoqa.batch.ray_backend import fixed_frame_count
    from videoqa.model_policy import policy_of

    spec = {"frames": None, "prune": {"method": "fastv", "r": 0.5}}
    assert fixed_frame_count(spec, policy_of(str(carded)).policy.base_frames) == CARD_POLICY["frames"]


def test_reference_rows_stay_uniform_under_a_content_card(carded):
    """A card that prefers the content sampler moves the adaptive rows, never the references they are measured
    against (unpruned 8 frames is the uniform baseline; "shown" in the reads table is decided on uniform frames)."""
    from videoqa.bench.long import default_rows

    write_policy(carded, {"sampler": "content"})
    card = policy_of(str(carded))
    rows = {r.label: r for r in default_rows()}
    for label in ("8 frames, unpruned", "8 frames, FastV R=0.5", "max frames, unpruned"):
        assert "sampler" not in rows[label].config("m", "test", card), label
        assert rows[label].folder("m", "test", card) == rows[label].folder("m", "test")
    assert rows["adaptive FastV"].config("m", "test", card)["sampler"] == "content"
    assert "sampler" not in rows["adaptive FastV, uniform"].config("m", "test", card)
