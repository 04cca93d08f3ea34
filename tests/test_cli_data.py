"""`trainfleet data tokenize|check`, run in-process through `cli.app.main` (one test in a real process).

Expected token streams are the naive reference: each document's UTF-8 bytes then 256 (or, with a
tokenizer.json, `Tokenizer.encode` then the eos id), concatenated; sample counts are worked by hand.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from templates.trainfleet_tokens import TokenData
from tests.conftest import assert_one_line_error, one_line_error, run_in_process

DOCS = ["héllo wörld\n", "second line doc", "", "third, the last: ✓"]  # the empty one is skipped


def inputs(tmp_path: Path) -> list[str]:
    (tmp_path / "a.txt").write_text(DOCS[0], encoding="utf-8")
    lines = [
        json.dumps({"text": DOCS[1], "id": 1}),
        "",
        json.dumps({"text": DOCS[2]}),
        json.dumps({"text": DOCS[3]}),
    ]
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl")]


def naive_bytes_stream() -> list[int]:
    return [t for doc in DOCS if doc for t in [*doc.encode("utf-8"), 256]]


def test_round_trip_with_the_bytes_tokenizer(capsys, tmp_path):
    out = tmp_path / "ds"
    code, stdout, _ = run_in_process(
        capsys, "data", "tokenize", *inputs(tmp_path), "--out", str(out), "--shard-tokens", "7"
    )
    stream = naive_bytes_stream()
    assert len(stream) == 14 + 1 + 15 + 1 + 20 + 1  # é, ö are 2 bytes each, ✓ is 3
    assert code == 0 and f"3 documents, {len(stream)} tokens in 8 shard(s) (uint16, vocab 257)" in stdout

    index = json.loads((out / "index.json").read_text())
    assert index["tokenizer"] == {"kind": "bytes", "file": None, "sha256": None}
    assert [index[k] for k in ("dtype", "vocab_size", "eos_id", "total_tokens")] == ["uint16", 257, 256, 52]
    assert [s["tokens"] for s in index["shards"]] == [7] * 7 + [3]
    shards = [(out / s["name"]).read_bytes() for s in index["shards"]]
    assert [hashlib.sha256(b).hexdigest() for b in shards] == [s["sha256"] for s in index["shards"]]
    assert b"".join(shards) == np.array(stream, dtype="<u2").tobytes()

    data = TokenData.open(out, verify=True)
    for seq_len in (1, 5, 9, 51):  # windows of 6 and 10 cross the 7-token shard boundaries
        assert data.num_samples(seq_len) == 52 // (seq_len + 1)
        for j in range(data.num_samples(seq_len)):
            assert data.window(j, seq_len).tolist() == stream[j * (seq_len + 1) : (j + 1) * (seq_len + 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.jsonl", "ds"]  # no temp folder

    code, stdout, _ = run_in_process(capsys, "data", "check", str(out), "--seq-len", "5", "--json")
    assert code == 0 and json.loads(stdout) == {"tokens": 52, "shards": 8, "dtype": "uint16", "vocab_size": 257,
                                                "eos_id": 256, "seq_len": 5, "samples": 8}  # fmt: skip
    code, stdout, _ = run_in_process(capsys, "data", "check", str(out), "--seq-len", "12")
    assert code == 0 and "ok, 52 tokens in 8 shard(s)" in stdout and "4 samples of 12 + 1 tokens" in stdout


def test_tokenize_writes_into_an_empty_folder_and_refuses_a_full_one(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_in_process(capsys, "data", "tokenize", *inputs(tmp_path), "--out", str(empty))[0] == 0
    assert TokenData.open(empty).total_tokens == 52
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    line = one_line_error(capsys, "data", "tokenize", *inputs(tmp_path), "--out", str(full))
    assert str(full) in line and "not an empty folder" in line
    assert [p.name for p in full.iterdir()] == ["notes.txt"]
    line = one_line_error(capsys, "data", "tokenize", *inputs(tmp_path), "--out", str(empty))
    assert "not an empty folder" in line


def test_a_bad_line_mid_stream_leaves_nothing_behind(capsys, tmp_path):
    (tmp_path / "docs.jsonl").write_text('{"text": "fine"}\n{"text": "also fine"}\n{"text": broken}\n')
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "ds"
    # shards of 2 tokens: several are written and closed before line 3 fails
    line = one_line_error(
        capsys, "data", "tokenize", str(tmp_path / "docs.jsonl"), "--out", str(out), "--shard-tokens", "2"
    )
    assert "docs.jsonl:3: not a JSON line" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    "files,extra,needle",
    [
        ({}, [], "missing.txt: no such file"),
        ({"doc.md": "# hi"}, [], "doc.md: unsupported input"),
        ({"empty.txt": "", "blank.jsonl": "\n\n"}, [], "no documents"),
        ({"d.jsonl": '{"body": "x"}\n'}, [], "d.jsonl:1: no string field 'text'"),
        ({"d.jsonl": '["text"]\n'}, [], "d.jsonl:1: no string field 'text'"),
        ({"d.jsonl": '{"body": "x"}\n'}, ["--text-field", "body", "--eos-id", "3"], "--eos-id"),
        ({"d.txt": b"\xff\xfe bad"}, [], "d.txt: not UTF-8"),
        ({"d.txt": "x"}, ["--tokenizer", "nope/tokenizer.json"], "no such file"),
        ({"d.txt": "x"}, ["--shard-tokens", "0"], "--shard-tokens"),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, files, extra, needle):
    for name, text in files.items():
        (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    paths = [str(tmp_path / name) for name in files] or [str(tmp_path / "missing.txt")]
    line = one_line_error(capsys, "data", "tokenize", *paths, "--out", str(tmp_path / "ds"), *extra)
    assert needle in line, line
    assert not (tmp_path / "ds").exists() and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_text_field_picks_the_jsonl_field(capsys, tmp_path):
    (tmp_path / "d.jsonl").write_text('{"body": "ab"}\n')
    assert run_in_process(capsys, "data", "tokenize", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "ds"), "--text-field", "body")[0] == 0  # fmt: skip
    assert TokenData.open(tmp_path / "ds").window(0, 2).tolist() == [ord("a"), ord("b"), 256]


# ---- check: every DataError is one line ------------------------------------------------------------------------


def damage_truncate(ds: Path) -> None:
    shard = ds / "tokens-00001.bin"
    shard.write_bytes(shard.read_bytes()[:-2])


def damage_flip(ds: Path) -> None:
    shard = ds / "tokens-00001.bin"
    raw = bytearray(shard.read_bytes())
    raw[3] ^= 0x40
    shard.write_bytes(raw)


def damage_index(**changes):
    def damage(ds: Path) -> None:
        index = json.loads((ds / "index.json").read_text())
        (ds / "index.json").write_text(json.dumps({**index, **changes}))

    return damage


@pytest.mark.parametrize(
    "damage,needle",
    [
        (damage_truncate, "tokens-00001.bin: 12 bytes, index.json says 7 uint16 tokens (14 bytes)"),
        (damage_flip, "tokens-00001.bin: sha256 differs"),
        (lambda ds: (ds / "index.json").unlink(), "index.json: no such file"),
        (lambda ds: (ds / "tokens-00002.bin").unlink(), "tokens-00002.bin: shard missing"),
        (damage_index(dtype="int8"), "dtype 'int8' is not one of uint16, uint32"),
        (damage_index(version=3), "version 3"),
        (damage_index(format="other"), "'format' is not 'trainfleet-tokens'"),
        (damage_index(eos_id=300), "eos_id 300 is out of range for vocab_size 257"),
        (damage_index(total_tokens=53), "total_tokens 53 is not the sum"),
        (lambda ds: (ds / "index.json").write_text("{not json"), "index.json: unreadable"),
    ],
)
def test_check_gives_one_line_for_each_damage(capsys, tmp_path, damage, needle):
    ds = tmp_path / "ds"
    assert run_in_process(capsys, "data", "tokenize", *inputs(tmp_path), "--out", str(ds), "--shard-tokens", "7")[0] == 0
    damage(ds)
    line = one_line_error(capsys, "data", "check", str(ds))
    assert needle in line and "trainfleet data tokenize" in line, line


def test_check_refuses_a_sequence_longer_than_the_data(capsys, tmp_path):
    ds = tmp_path / "ds"
    run_in_process(capsys, "data", "tokenize", *inputs(tmp_path), "--out", str(ds))
    assert "fewer than one sample of 54" in one_line_error(
        capsys, "data", "check", str(ds), "--seq-len", "53"
    )


def test_a_real_process_exits_2_with_one_line(trainfleet, tmp_path):
    assert_one_line_error(trainfleet("data", "check", str(tmp_path)), "index.json: no such file")
    helped = trainfleet("data", "tokenize", "--help")
    assert helped.code == 0 and "each file is one document" in helped.stdout


# ---- Hugging Face tokenizers -----------------------------------------------------------------------------------

WORDS = {"[UNK]": 0, "hello": 1, "world": 2, "</s>": 3, "foo": 4}


def word_level(tmp_path: Path, vocab: dict[str, int]) -> Path:
    tokenizers = pytest.importorskip("tokenizers")  # under CI=true, conftest turns a skip into a failure
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_a_tokenizer_json_gives_its_ids(capsys, tmp_path):
    from tokenizers import Tokenizer

    path = word_level(tmp_path, WORDS)
    texts = ["hello world", "foo bar hello", "world"]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = tmp_path / "ds"
    assert run_in_process(capsys, "data", "tokenize", str(tmp_path / "d.jsonl"), "--out", str(out), "--tokenizer", str(path))[0] == 0  # fmt: skip

    tok = Tokenizer.from_file(str(path))
    expected = [i for t in texts for i in [*tok.encode(t, add_special_tokens=False).ids, 3]]
    assert expected == [1, 2, 3, 4, 0, 1, 3, 2, 3]  # by hand: bar is unknown, </s> is 3
    data = TokenData.open(out, verify=True)
    assert (data.vocab_size, data.eos_id) == (5, 3)
    assert data.window(0, 8).tolist() == expected
    index = json.loads((out / "index.json").read_text())
    assert index["tokenizer"] == {"kind": "huggingface", "file": "tokenizer.json",
                                  "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}  # fmt: skip
    (out / "tokenizer.json").write_text("{}")
    assert "tokenizer.json: missing, or its sha256 differs" in one_line_error(
        capsys, "data", "check", str(out)
    )


def test_a_tokenizer_without_an_eos_token_needs_eos_id(capsys, tmp_path):
    path = word_level(tmp_path, {"[UNK]": 0, "hello": 1, "<eod>": 2})
    (tmp_path / "d.txt").write_text("hello")
    args = [
        "data",
        "tokenize",
        str(tmp_path / "d.txt"),
        "--tokenizer",
        str(path),
        "--out",
        str(tmp_path / "ds"),
    ]
    assert "pass its id with --eos-id" in one_line_error(capsys, *args)
    assert "--eos-id 9 is outside the tokenizer's 3 ids" in one_line_error(capsys, *args, "--eos-id", "9")
    assert run_in_process(capsys, *args, "--eos-id", "2")[0] == 0
    assert TokenData.open(tmp_path / "ds").window(0, 1).tolist() == [1, 2]


def test_without_the_tokenizers_library_the_error_names_the_install(capsys, tmp_path, monkeypatch):
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "d.txt").write_text("x")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    line = one_line_error(capsys, "data", "tokenize", str(tmp_path / "d.txt"), "--out", str(tmp_path / "ds"),
                          "--tokenizer", str(tmp_path / "tokenizer.json"))  # fmt: skip
    assert "pip install tokenizers" in line
