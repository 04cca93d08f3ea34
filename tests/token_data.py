"""The token data and model size the end-to-end runs train: a tiny Llama on the head of tiny shakespeare.

The text is vendored (tests/fixtures/text/PROVENANCE.md), split into documents at each speaker's blank line,
tokenized as `trainfleet data tokenize` does by default (UTF-8 bytes, end-of-document id 256) and written with
the node's own TokenWriter into shards small enough that training windows span shard boundaries. Built once per
machine into a folder named by its content, so every test process (and every xdist worker) reads the same bytes.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from templates.trainfleet_tokens import DataError, TokenWriter

TEXT = Path(__file__).resolve().parent / "fixtures" / "text" / "tinyshakespeare-head.txt"
SHARD_TOKENS = 25_000
BYTES_VOCAB, BYTES_EOS = 257, 256

SEQ_LEN = 32
# 2 decoder layers of hidden 64 (4 heads, 2 key/value heads: grouped-query attention), the bytes vocabulary;
# --lr: the tiny model learns visibly within a test's 30-60 steps.
TINY_MODEL_ARGS = ("--vocab-size", str(BYTES_VOCAB), "--hidden", "64", "--layers", "2", "--heads", "4",
                   "--kv-heads", "2", "--ffn", "128", "--seq-len", str(SEQ_LEN), "--lr", "3e-3")  # fmt: skip


def tiny_dataset() -> Path:
    """The dataset folder (index.json and shards), built on first use."""
    texts = [part for part in TEXT.read_bytes().split(b"\n\n") if part]
    digest = hashlib.sha256(b"\0".join(texts) + str(SHARD_TOKENS).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"trainfleet-test-tokens-{digest}"
    if (folder / "index.json").is_file():
        return folder
    try:
        with TokenWriter(folder, BYTES_VOCAB, BYTES_EOS, shard_tokens=SHARD_TOKENS) as writer:
            for text in texts:
                writer.add_document(list(text))
    except DataError:
        if not (folder / "index.json").is_file():  # not another process that got there first
            raise
    return folder


def copy_dataset(dest: Path) -> Path:
    """The dataset copied to `dest` (a node's data folder laid out by hand, without the agent)."""
    shutil.copytree(tiny_dataset(), dest, dirs_exist_ok=True)
    return dest


def upload_dataset(s3_client, bucket: str, prefix: str) -> int:
    """Put the dataset's files under `prefix` as `aws s3 sync DIR s3://bucket/prefix/` would; returns the count."""
    files = sorted(p for p in tiny_dataset().iterdir() if p.is_file())
    for path in files:
        s3_client.put_object(Bucket=bucket, Key=f"{prefix.strip('/')}/{path.name}", Body=path.read_bytes())
    return len(files)


def model_config(hidden: int, layers: int):
    """The trainer's model at `hidden` x `layers` as the benchmarks size it: 64-wide heads, multi-head attention,
    Llama's MLP width (2/3 of 4 x hidden, rounded up to 256), the bytes vocabulary."""
    from templates.trainfleet_model import ModelConfig

    heads = max(1, hidden // 64)
    return ModelConfig(BYTES_VOCAB, hidden, layers, heads, heads, -(-8 * hidden // (3 * 256)) * 256)


def model_args(hidden: int, layers: int) -> tuple[str, ...]:
    """train.py's arguments for model_config(hidden, layers), the sequence length and the learning rate."""
    c = model_config(hidden, layers)
    return ("--vocab-size", str(c.vocab_size), "--hidden", str(c.hidden), "--layers", str(c.layers), "--heads",
            str(c.heads), "--kv-heads", str(c.kv_heads), "--ffn", str(c.ffn), "--seq-len", str(SEQ_LEN),
            "--lr", "3e-3")  # fmt: skip
