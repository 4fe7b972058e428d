"""The methods of issue 33 that act before the LLM, end to end on a tiny model: `ask --json` answers with each,
the record says what was kept and merged, and a merged token's features are what the LLM received."""

import json

import pytest
import torch
from helpers.clipgen import write_clip

from videoqa.cli import main
from videoqa.pruning import PruneConfig

MERGING = ("visionzip", "holitom", "flashvid", "pool")
METHODS = ("divprune", "vidcom2", "frames", *MERGING)


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("issue33-clips") / "clip.mp4", n_frames=16)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.slow
def test_ask_json_answers_with_each_method(method, capsys, tiny_model_dir, clip_path):
    code = main(["ask", str(clip_path), "What is shown?", "--model", str(tiny_model_dir), "--json",
                 "--prune", method, "--r", "0.75", "--max-new-tokens", "2"])
    record = json.loads(capsys.readouterr().out)
    kept = record["kept"]
    assert code == 0 and kept["method"] == method and kept["layer"] == 0
    assert abs(kept["n_kept"] - 130) <= 8  # 520 tokens at R = 0.75, within the official rounding
    assert record["flops"]["ratio"] < 0.3
    if method in MERGING:
        assert kept["n_merged_dropped"] > 0 and kept["absorbed"]


@pytest.mark.parametrize("method", MERGING)
def test_the_llm_receives_the_merged_features(method, tiny_qa, clip_path):
    req = tiny_qa.prepare(clip_path, "What is shown?", None, PruneConfig(method=method, r=0.75).validate(), None, 2)
    flat = req.enc.features.reshape(-1, req.enc.features.shape[-1])
    merged = [n for n, group in enumerate(req.selection.absorbed) if group]
    assert merged and not torch.allclose(req.visual[merged], flat[[req.kept[n] for n in merged]])
    batch = tiny_qa.collate([req])
    torch.testing.assert_close(batch.embeds[0, batch.visual_mask[0]], req.visual.to(batch.embeds.dtype))
    assert batch.position_ids[0].tolist() == list(range(len(req.ids)))  # renumbered, as the official code
