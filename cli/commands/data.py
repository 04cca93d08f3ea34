"""`trainfleet data tokenize|check`: write and check the pre-tokenized data nodes train on.

The format and its reader are templates/trainfleet_tokens.py (the file nodes import); this module reads the
user's documents, tokenizes them and streams the ids into its `TokenWriter`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Annotated

import typer

from cli.app import app
from cli.output import print_json
from infra.errors import TrainfleetError

data_app = typer.Typer(
    help="Tokenize documents into the data format nodes train on, and check it.", no_args_is_help=True
)
app.add_typer(data_app, name="data")

BYTES_VOCAB, BYTES_EOS = 257, 256  # UTF-8 bytes 0-255, then end of document
EOS_TOKENS = ("</s>", "<|endoftext|>", "<|end_of_text|>")
BATCH = 1000  # documents tokenized at once: Hugging Face tokenizers encode a batch in parallel

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for machines instead of a line.")]


def _tokens_module():
    try:
        from templates import trainfleet_tokens
    except ImportError as exc:
        raise TrainfleetError(f"trainfleet data needs numpy ({exc}): pip install numpy") from None
    return trainfleet_tokens


def documents(paths: list[Path], text_field: str) -> Iterator[str]:
    """Each input's documents, one at a time: a .txt file is one document, a .jsonl line is one."""
    for path in paths:
        try:
            if path.suffix == ".txt":
                yield path.read_text(encoding="utf-8")
            else:
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        if line.strip():
                            yield _jsonl_text(line, text_field, f"{path}:{number}")
        except UnicodeDecodeError as exc:
            raise TrainfleetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise TrainfleetError(f"{path}: cannot read ({exc.strerror})") from None


def _jsonl_text(line: str, field: str, where: str) -> str:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise TrainfleetError(f"{where}: not a JSON line ({exc})") from None
    text = record.get(field) if isinstance(record, dict) else None
    if not isinstance(text, str):
        raise TrainfleetError(
            f'{where}: no string field {field!r} (the line needs {{{field!r}: "..."}}, or pass --text-field)'
        )
    return text


class BytesTokenizer:
    vocab_size, eos_id, file = BYTES_VOCAB, BYTES_EOS, None

    def encode(self, texts: list[str]) -> list:
        import numpy as np

        return [np.frombuffer(text.encode("utf-8"), dtype=np.uint8) for text in texts]


class HuggingFaceTokenizer:
    def __init__(self, path: Path, eos_id: int | None):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TrainfleetError(
                f"--tokenizer {path} needs the Hugging Face tokenizers library: pip install tokenizers"
            ) from None
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises its own Exception for any file it cannot load
            raise TrainfleetError(f"--tokenizer {path}: not a tokenizer.json ({exc})") from None
        self.file = path
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        found = [i for i in map(self.tokenizer.token_to_id, EOS_TOKENS) if i is not None]
        if eos_id is None and not found:
            raise TrainfleetError(
                f"--tokenizer {path} has none of the end-of-document tokens {', '.join(EOS_TOKENS)}: "
                "pass its id with --eos-id"
            )
        self.eos_id = found[0] if eos_id is None else eos_id

    def encode(self, texts: list[str]) -> list:
        # No template specials (BOS, ...): the format's document separator is eos_id, added by the writer.
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]


def _check_inputs(inputs: list[Path]) -> None:
    for path in inputs:
        if path.suffix not in (".txt", ".jsonl"):
            raise TrainfleetError(
                f"{path}: unsupported input; give .txt files (one document each) or .jsonl (one per line)"
            )
        if not path.is_file():
            raise TrainfleetError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")


@data_app.command("tokenize")
def tokenize_command(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            metavar="INPUT",
            help="documents: .txt (each file is one document) or .jsonl (one document per line)",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="new dataset folder (must not exist, or be empty)")],
    tokenizer: Annotated[
        str,
        typer.Option(
            help="'bytes' (UTF-8 bytes, eos 256, vocab 257) or the path of a Hugging Face tokenizer.json"
        ),
    ] = "bytes",
    shard_tokens: Annotated[
        int, typer.Option(min=1, max=1 << 40, help="tokens per shard file")
    ] = 100_000_000,
    text_field: Annotated[str, typer.Option(help="the .jsonl field that holds a document's text")] = "text",
    eos_id: Annotated[
        int | None,
        typer.Option(
            min=0, help="end-of-document id, when the tokenizer has no </s>, <|endoftext|>, <|end_of_text|>"
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Tokenize documents into a trainfleet-tokens dataset (shards + index.json), each document followed by eos.

    Upload the folder to the stack's data prefix: aws s3 sync DIR s3://BUCKET/JOB_PREFIX/data/"""
    tokens = _tokens_module()
    _check_inputs(inputs)
    if tokenizer == "bytes":
        if eos_id is not None:
            raise TrainfleetError("--eos-id applies to a tokenizer.json; the bytes tokenizer's eos is 256")
        tok = BytesTokenizer()
    else:
        path = Path(tokenizer)
        if not path.is_file():
            raise TrainfleetError(
                f"--tokenizer {tokenizer!r}: no such file; give 'bytes' or a tokenizer.json"
            )
        tok = HuggingFaceTokenizer(path, eos_id)
    if not 0 <= tok.eos_id < tok.vocab_size:
        raise TrainfleetError(f"--eos-id {tok.eos_id} is outside the tokenizer's {tok.vocab_size} ids")

    count = 0
    try:
        with tokens.TokenWriter(out, tok.vocab_size, tok.eos_id, shard_tokens) as writer:
            if tok.file is not None:
                writer.add_tokenizer_file(tok.file)
            docs = (text for text in documents(inputs, text_field) if text)  # an empty document holds nothing
            while batch := list(islice(docs, BATCH)):
                writer.add_documents(tok.encode(batch))
                count += len(batch)
            if not count:
                raise TrainfleetError(f"no documents: the {len(inputs)} input file(s) hold no text")
    except tokens.DataError as exc:
        raise TrainfleetError(str(exc)) from None
    except OSError as exc:
        raise TrainfleetError(f"{out}: cannot write ({exc.strerror})") from None

    summary = {
        "documents": count,
        "tokens": writer.total_tokens,
        "shards": len(writer.shards),
        "dtype": writer.dtype,
        "vocab_size": tok.vocab_size,
        "eos_id": tok.eos_id,
        "out": str(out),
    }
    if json_out:
        print_json(summary)
    else:
        typer.echo(  # plain text: a path is not Rich markup
            f"{count:,} documents, {writer.total_tokens:,} tokens in {len(writer.shards)} shard(s) "
            f"({writer.dtype}, vocab {tok.vocab_size}) -> {out}"
        )


@data_app.command("check")
def check_command(
    folder: Annotated[
        Path, typer.Argument(metavar="DIR", help="a dataset folder (index.json and its shards)")
    ],
    seq_len: Annotated[int, typer.Option(min=1, help="sequence length S: samples are S + 1 tokens")] = 2048,
    json_out: JsonFlag = False,
) -> None:
    """Check a dataset folder (every sha256) and count its samples for a sequence length."""
    tokens = _tokens_module()
    try:
        data = tokens.TokenData.open(folder, verify=True)
    except tokens.DataError as exc:
        raise TrainfleetError(str(exc)) from None
    except OSError as exc:
        raise TrainfleetError(f"{folder}: cannot read ({exc.strerror})") from None
    samples = data.num_samples(seq_len)
    if samples == 0:
        raise TrainfleetError(
            f"{folder}: {data.total_tokens} tokens, fewer than one sample of {seq_len + 1}; "
            "tokenize more data or use a smaller --seq-len"
        )
    summary = {
        "tokens": data.total_tokens,
        "shards": data.num_shards,
        "dtype": data.dtype,
        "vocab_size": data.vocab_size,
        "eos_id": data.eos_id,
        "seq_len": seq_len,
        "samples": samples,
    }
    if json_out:
        print_json(summary)
    else:
        typer.echo(
            f"{folder}: ok, {data.total_tokens:,} tokens in {data.num_shards} shard(s) ({data.dtype}), "
            f"vocab {data.vocab_size}, eos {data.eos_id}, {samples:,} samples of {seq_len} + 1 tokens"
        )
