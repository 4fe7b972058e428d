"""The benchmarks' own files read back (a split's test_q/test_a/scenes.json, its marker), a multiple-choice
benchmark's files, a model folder's config.json and the stand-in judge's requests go through the one JSON reader
(issue 37, finding 5): huge, deeply nested, out-of-range or non-finite JSON, a FIFO or a file that is no list is
one line naming the file, never a traceback, and never read whole when it is too large."""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from scripts import judge_standin
from videoqa import jsonio
from videoqa.bench.accuracy import exact_hits, held_out_split, per_type_exact, split_marker
from videoqa.bench.long import long_split, question_info
from videoqa.bench.long.core import read_scenes
from videoqa.bench.long.reads import blind_answers
from videoqa.errors import InputError, ModelLoadError
from videoqa.eval.mc_files import read_rows
from videoqa.model import _check_folder

HOSTILE = {"nesting": "[" * 200_000 + "]" * 200_000, "huge-int": "[" + "9" * 5000 + "]",
           "overflow": "[1e400]", "nan": "[NaN]", "not-a-list": '{"question_id": "q"}', "huge": None,
           "fifo": None}


def _plant(path: Path, kind: str) -> None:
    if kind == "huge":  # sparse: larger than the reader's bound without using the disk
        with open(path, "wb") as f:
            f.truncate(jsonio.MAX_FILE_BYTES + 1)
    elif kind == "fifo":  # opening it to read would wait for a writer for ever
        os.mkfifo(path)
    else:
        path.write_text(HOSTILE[kind])


def _one_line_naming(error: pytest.ExceptionInfo, path: Path) -> bool:
    return str(error.value).startswith(str(path)) and "\n" not in str(error.value)


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_split_file_is_one_line_naming_it(tmp_path, kind):
    (tmp_path / "preds.jsonl").write_text('{"key": "q", "answer": "red"}\n')
    readers = {"test_a.json": [lambda r: exact_hits(r, r / "preds.jsonl"),
                               lambda r: per_type_exact(r, r / "preds.jsonl"), blind_answers],
               "scenes.json": [read_scenes, question_info],
               "split.json": [lambda r: split_marker(r / "split.json"), lambda r: held_out_split(r, 3),
                              lambda r: long_split(r, "test", 3)]}
    if kind == "not-a-list":  # valid JSON in a marker is a marker of another split: the split is written anew
        del readers["split.json"]
    for name, reads in readers.items():
        root = tmp_path / name.replace(".", "-")
        root.mkdir()
        _plant(root / name, kind)
        for read in reads:
            with pytest.raises(InputError) as e:
                read(root)
            assert _one_line_naming(e, root / name), str(e.value)
        assert sorted(p.name for p in root.iterdir()) == [name]  # nothing generated over a marker it cannot read


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_benchmark_or_model_file_is_refused(tmp_path, kind):
    for name in ("rows.json",) if kind == "not-a-list" else ("rows.json", "rows.jsonl"):  # an object is a JSONL row
        _plant(tmp_path / name, kind)
        with pytest.raises(InputError) as e:
            read_rows(tmp_path / name)
        assert _one_line_naming(e, tmp_path / name), str(e.value)
    model = tmp_path / "model"
    model.mkdir()
    _plant(model / "config.json", kind)
    with pytest.raises(ModelLoadError) as e:  # the loader says why in one line naming the file
        _check_folder(str(model), model)
    assert str(model) in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_stand_in_judge_refuses_hostile_requests(tmp_path):
    server, base = judge_standin.start()
    try:
        def post(body: bytes) -> int:
            request = urllib.request.Request(f"{base}/chat/completions", data=body, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=10) as reply:
                    return reply.status
            except urllib.error.HTTPError as e:
                return e.code

        prompt = "Question: q\nCorrect Answer: red\nPredicted Answer: red\n\n"
        assert post(json.dumps({"messages": [{"role": "user", "content": prompt}]}).encode()) == 200
        for text in (v for v in HOSTILE.values() if v):
            assert post(text.encode()) == 400
        # a body announced larger than the bound is refused before any of it is read
        connection = http.client.HTTPConnection(urllib.parse.urlsplit(base).netloc, timeout=10)
        connection.putrequest("POST", "/v1/chat/completions")
        connection.putheader("Content-Length", str(judge_standin.MAX_REQUEST_BYTES + 1))
        connection.endheaders(b"{}")
        assert connection.getresponse().status == 413
        connection.close()
    finally:
        server.shutdown()
