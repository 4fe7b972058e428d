"""A pruning method registered in one place appears everywhere methods are listed: the command line, the web
chat's method picker and compare mode, batch record keys and `videoqa bench llm`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from helpers.clipgen import write_clip

from videoqa.cli import build_parser, main
from videoqa.errors import InputError
from videoqa.pruning import REGISTRY, Acts, EncodedVideo, Method, Option, Positions, PruneConfig, Selection
from videoqa.pruning.method import kept_features


def _every_other(enc: EncodedVideo, keep: int, params: Mapping[str, Any]) -> Selection:
    """Every `stride`-th visual token, at most `keep` of them."""
    kept = list(range(0, enc.layout.n_tokens, params["stride"]))[:keep]
    return Selection(kept, kept_features(enc, kept), None, {"stride": params["stride"]})


EVERY_OTHER = Method(
    name="every_other",
    help="every STRIDE-th visual token, before the LLM",
    acts=Acts.BEFORE_LLM,
    options=(Option("stride", int, 2, "every_other: keep one token in STRIDE (default: 2)", low=1),),
    positions=Positions.RENUMBERED,
    select=_every_other,
)


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("registry-clips") / "clip.mp4", n_frames=16)


@pytest.fixture
def every_other():
    REGISTRY.register(EVERY_OTHER)
    yield EVERY_OTHER
    REGISTRY.unregister(EVERY_OTHER.name)


def test_config_validates_the_methods_own_options(every_other):
    cfg = PruneConfig(method="every_other", r=0.5, stride=3).validate()
    assert cfg.stride == 3 and cfg.layer == 0 and not cfg.original_positions
    assert PruneConfig(method="every_other", r=0.5).validate().stride == 2  # its declared default
    with pytest.raises(InputError, match="stride must be in"):
        PruneConfig(method="every_other", stride=0).validate()
    with pytest.raises(InputError, match="fastv does not use it"):
        PruneConfig(method="fastv", stride=3).validate()


def test_unregistered_methods_are_unknown():
    assert "every_other" not in REGISTRY.names()
    with pytest.raises(InputError, match="unknown pruning method 'every_other'"):
        PruneConfig(method="every_other").validate()


def test_it_shows_up_in_ask_help_and_answers_from_the_command_line(every_other, capsys, tiny_model_dir, clip_path):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ask", "--help"])
    help_text = capsys.readouterr().out
    assert "every_other" in help_text and "--stride" in help_text
    assert main(["ask", str(clip_path), "What is shown?", "--model", str(tiny_model_dir), "--json",
                 "--prune", "every_other", "--r", "0.5", "--stride", "4", "--max-new-tokens", "2"]) == 0
    record = json.loads(capsys.readouterr().out)
    n_visual = record["kept"]["n_visual"]
    assert record["kept"]["method"] == "every_other" and record["prune"]["stride"] == 4
    assert record["kept"]["kept"] == list(range(0, n_visual, 4))[:round(n_visual * 0.5)]
    assert main(["ask", str(clip_path), "q", "--prune", "fastv", "--stride", "4"]) == 2
    assert "--stride 4: not used by --prune fastv (it applies to --prune every_other)" in capsys.readouterr().err


def test_it_shows_up_in_the_web_chat_picker_and_compare_mode(every_other, tiny_qa):
    pytest.importorskip("gradio")
    from videoqa.ui.actions import ChatActions
    from videoqa.ui.app import build_app

    app = build_app(tiny_qa, samples_dir=None)
    try:
        blocks = app.blocks.values()
        picker = next(b for b in blocks if getattr(b, "elem_id", None) == "method")
        assert "every_other" in [value for _label, value in picker.choices]
        columns = [b.elem_id for b in blocks if (getattr(b, "elem_id", None) or "").startswith("compare-every")]
        assert columns == ["compare-every_other"]
        answers = [b.label for b in blocks if getattr(b, "label", None) == "every_other: answer"]
        assert len(answers) == 1
    finally:
        app.close()
    assert "every_other" in ChatActions(tiny_qa, [], work_dir=None).methods


def test_its_options_are_batch_record_keys(every_other):
    from videoqa.batch.worklist import answer_options, fingerprint

    def options(**kw):
        prune = PruneConfig(method="every_other", r=0.5, **kw).validate().to_dict()
        return answer_options({"model": "demo", "prune": prune})

    assert options()["prune"] == {"method": "every_other", "r": 0.5, "stride": 2}
    assert fingerprint(options(stride=3)) != fingerprint(options())


def test_it_gets_a_row_in_bench_llm(every_other):
    from videoqa.bench.llm import Setup, run_llm

    table = run_llm(Setup(preset="tiny"), repeats=1, decode_tokens=1, memory=False)
    rows = [line for line in table.splitlines() if line.startswith("| 8 | every_other |")]
    assert len(rows) == 1 and "| 0 | 0.50 | 1028 |" in rows[0]  # before the LLM, R=0.5: 1028 of 2056 kept


def test_a_run_folder_from_before_the_registry_resumes_with_the_same_options(tmp_path):
    """Eval run folders recorded every method's fields; the same options now record only the method's own,
    and still resume them (other options are still refused)."""
    from videoqa.eval.run import check_config

    flat = {"method": "fastv", "k": 2, "r": 0.5, "rank_by": "last", "seed": 0, "important_ratio": 0.5,
            "context_share": 0.4, "keep_positions": False, "frame_floor": 0.0}
    check_config(tmp_path / "run", {"dataset": "msvd", "prune": flat})
    now = PruneConfig(method="fastv", k=2, r=0.5).validate().to_dict()
    assert now != flat
    check_config(tmp_path / "run", {"dataset": "msvd", "prune": now})
    with pytest.raises(InputError, match="prune differ"):
        check_config(tmp_path / "run", {"dataset": "msvd", "prune": {**now, "k": 3}})


def test_a_registry_refuses_a_second_method_of_a_name_and_an_option_of_another_type():
    from videoqa.pruning import Registry

    registry = Registry((EVERY_OTHER,))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(EVERY_OTHER)
    clash = Method(name="other", help="", acts=Acts.BEFORE_LLM, positions=Positions.RENUMBERED, select=_every_other,
                   options=(Option("stride", float, 2.0, "a stride of another type"),))
    with pytest.raises(ValueError, match="'stride' is a float here but a int"):
        registry.register(clash)
    registry.unregister("every_other")
    assert registry.names() == () and "every_other" not in REGISTRY  # a registry of its own: the default untouched
    with pytest.raises(TypeError, match="unknown option 'strides'"):
        PruneConfig(method="fastv", strides=3)


def test_a_method_declares_how_it_selects():
    with pytest.raises(ValueError, match="has a `select`"):
        Method(name="bad", help="", acts=Acts.BEFORE_LLM, positions=Positions.RENUMBERED)
    with pytest.raises(ValueError, match="has a `plan`"):
        Method(name="bad", help="", acts=Acts.IN_LLM)


def test_every_method_declaration_pickles():
    """The memory bench measures each method in a fresh process and Ray ships work to actors: a declaration (its
    plan and check included) must pickle, and its copy must make the same plan."""
    import pickle

    from videoqa.pruning.registry import REGISTRY

    for method in REGISTRY:
        copy = pickle.loads(pickle.dumps(method))
        assert copy.name == method.name and copy.plan == method.plan and copy.check == method.check
