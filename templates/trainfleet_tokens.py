"""Pre-tokenized training data: the trainfleet-tokens format, its reader, and the sample order.

Standard library and numpy only: this file is copied to /opt/trainfleet/ beside train.py (`import
trainfleet_tokens`); the CLI's `trainfleet data tokenize` writes the format with the same `TokenWriter`.

Format (version 1). A dataset is a folder:

- `index.json`::

      {"format": "trainfleet-tokens", "version": 1, "dtype": "uint16" | "uint32",
       "vocab_size": int, "eos_id": int,
       "tokenizer": {"kind": "bytes" | "huggingface", "file": "<name or null>", "sha256": "<hex or null>"},
       "total_tokens": int,
       "shards": [{"name": "tokens-00000.bin", "tokens": int, "sha256": "<hex of the file>"}, ...]}

  `tokenizer.file`, when not null, is a file in the folder (the tokenizer.json the data was made with).
- shards: flat little-endian arrays of token ids of `dtype` (nanoGPT's train.bin layout): documents
  concatenated, each followed by `eos_id`. `uint16` when vocab_size <= 65536, else `uint32`.
- Samples for a sequence length S are the non-overlapping windows of S + 1 tokens of the concatenated stream
  (every shard, in index order): sample j is tokens [j * (S + 1), (j + 1) * (S + 1)), and may span shards.
  num_samples(S) = total_tokens // (S + 1); input = window[:-1], labels = window[1:].

Sample order: the sample a rank trains on is a pure function of (seed, step, its global index in the step's
global batch): `order.sample(step * global_batch + index)`, a keyed permutation of the samples per epoch
(`SampleOrder`). A job resumed, or restarted on more or fewer nodes with the same global batch, trains every
step on the same tokens. The permutation is part of the format: changing it changes a resumed run's data.
Exactly: epoch, x = divmod(position, n); h = max(1, ceil(bitlen(n - 1) / 2)); 6 Feistel rounds on (x >> h,
x & (2^h - 1)): (L, R) -> (R, L ^ (fmix(R ^ K_r) & (2^h - 1))), fmix being splitmix64's finalizer and K_0..K_5
the little-endian 8-byte words of blake2b(f"{seed}:{epoch}", digest_size=48, person=b"trainfleet-order");
repeated (cycle-walking) until the value is < n.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from bisect import bisect_right
from operator import index as as_int
from pathlib import Path

import numpy as np

FORMAT = "trainfleet-tokens"
VERSION = 1
INDEX = "index.json"
DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
MAX_MAPPED = 64
FIX = "re-run `trainfleet data tokenize`, or copy the folder again (aws s3 sync)"


class DataError(ValueError):
    """A dataset folder that is missing, not this format, or damaged; the message names the file and the fix."""


def dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


# ---- reading ---------------------------------------------------------------------------------------------------


def _int(index: dict, key: str, where: str, minimum: int = 0) -> int:
    value = index.get(key)
    if type(value) is not int or value < minimum:  # bool is an int to Python, not to this format
        raise DataError(f"{where}: {key!r} must be an integer >= {minimum}, not {value!r}; {FIX}")
    return value


def _name(value: object, where: str) -> str:
    # Names come from a file that may have been edited: never a path that leaves the folder.
    if not isinstance(value, str) or not value or "/" in value or "\\" in value or value in (".", ".."):
        raise DataError(f"{where}: {value!r} is not a file name in the dataset folder; {FIX}")
    return value


class TokenData:
    """A dataset folder opened for reading: shards memory-mapped read-only, windows of S + 1 tokens."""

    def __init__(self, folder: Path, index: dict, shards: list[tuple[Path, int]]):
        self.folder = folder
        self.index = index
        self.vocab_size: int = index["vocab_size"]
        self.eos_id: int = index["eos_id"]
        self.dtype: str = index["dtype"]
        self.total_tokens: int = index["total_tokens"]
        self._shards = shards  # (path, tokens), checked by open()
        self._maps: dict[int, np.memmap] = {}
        self._starts = [0]  # token offset of each shard in the stream
        for _, tokens in shards[:-1]:
            self._starts.append(self._starts[-1] + tokens)

    @classmethod
    def open(cls, folder: str | Path, verify: bool = False) -> TokenData:
        """Read and check index.json and the shards' sizes; with verify, every file's sha256 as well."""
        folder = Path(folder)
        path = folder / INDEX
        if folder.exists() and not folder.is_dir():
            raise DataError(f"{folder}: not a folder; give the dataset folder (index.json and its shards)")
        try:
            index = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{path}: no such file: not a trainfleet-tokens dataset; {FIX}") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise DataError(f"{path}: unreadable ({exc}); {FIX}") from None
        if not isinstance(index, dict) or index.get("format") != FORMAT:
            raise DataError(f"{path}: 'format' is not {FORMAT!r}: not a trainfleet-tokens index; {FIX}")
        if index.get("version") != VERSION:
            raise DataError(
                f"{path}: version {index.get('version')!r}, this reader reads version {VERSION}; "
                f"upgrade trainfleet or {FIX}"
            )
        dtype = index.get("dtype")
        if dtype not in DTYPES:
            raise DataError(f"{path}: dtype {dtype!r} is not one of {', '.join(DTYPES)}; {FIX}")
        vocab = _int(index, "vocab_size", str(path), 1)
        if vocab > np.iinfo(DTYPES[dtype]).max + 1:
            raise DataError(f"{path}: vocab_size {vocab} does not fit dtype {dtype}; {FIX}")
        eos = _int(index, "eos_id", str(path))
        if eos >= vocab:
            raise DataError(f"{path}: eos_id {eos} is out of range for vocab_size {vocab}; {FIX}")
        total = _int(index, "total_tokens", str(path), 1)
        entries = index.get("shards")
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            raise DataError(f"{path}: 'shards' must be a non-empty list of objects; {FIX}")
        listed = [
            (
                _name(e.get("name"), f"{path} shards[{i}]"),
                _int(e, "tokens", f"{path} shards[{i}]", 1),
                e.get("sha256"),
            )
            for i, e in enumerate(entries)
        ]
        if total != sum(tokens for _, tokens, _ in listed):
            raise DataError(f"{path}: total_tokens {total} is not the sum of the shards' tokens; {FIX}")
        if verify:
            cls._verify_tokenizer(folder, index, path)

        item = DTYPES[dtype].itemsize
        shards = []
        for name, tokens, sha in listed:
            shard = folder / name
            try:
                size = shard.stat().st_size
            except FileNotFoundError:
                raise DataError(f"{shard}: shard missing (listed in {path}); {FIX}") from None
            if size != tokens * item:
                raise DataError(
                    f"{shard}: {size} bytes, {INDEX} says {tokens} {dtype} tokens ({tokens * item} bytes): "
                    f"truncated or not this dataset's; {FIX}"
                )
            if verify and file_sha256(shard) != sha:
                raise DataError(f"{shard}: sha256 differs from {path}: the file is damaged; {FIX}")
            shards.append((shard, tokens))
        return cls(folder, index, shards)

    @staticmethod
    def _verify_tokenizer(folder: Path, index: dict, path: Path) -> None:
        tokenizer = index.get("tokenizer")
        if not isinstance(tokenizer, dict) or tokenizer.get("kind") not in ("bytes", "huggingface"):
            raise DataError(f"{path}: 'tokenizer' must be an object with kind bytes or huggingface; {FIX}")
        if tokenizer.get("file") is None:
            return
        file = folder / _name(tokenizer["file"], f"{path} tokenizer.file")
        if not file.is_file() or file_sha256(file) != tokenizer.get("sha256"):
            raise DataError(f"{file}: missing, or its sha256 differs from {path}; {FIX}")

    def _map(self, shard: int) -> np.memmap:
        # Mapped on first use, at most MAX_MAPPED at once: each map holds a file descriptor, and 10,000 shards
        # would pass the usual limit of 1,024.
        mapped = self._maps.pop(shard, None)
        if mapped is None:
            path, tokens = self._shards[shard]
            mapped = np.memmap(path, dtype=DTYPES[self.dtype], mode="r", shape=(tokens,))
            if len(self._maps) >= MAX_MAPPED:
                del self._maps[next(iter(self._maps))]  # the least recently used
        self._maps[shard] = mapped  # (re)inserted last: the dict's order is the order of use
        return mapped

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    def num_samples(self, seq_len: int) -> int:
        if as_int(seq_len) < 1:
            raise ValueError(f"seq_len must be >= 1, not {seq_len}")
        return self.total_tokens // (seq_len + 1)

    def window(self, j: int, seq_len: int) -> np.ndarray:
        """Sample j for sequence length seq_len: its seq_len + 1 tokens as int64 (input [:-1], labels [1:])."""
        j = as_int(j)
        if not 0 <= j < self.num_samples(seq_len):
            raise IndexError(f"sample {j} out of range: {self.num_samples(seq_len)} samples of {seq_len + 1}")
        start, end = j * (seq_len + 1), (j + 1) * (seq_len + 1)
        pieces = []
        shard = bisect_right(self._starts, start) - 1
        while start < end:  # a window may span several shards
            offset = start - self._starts[shard]
            piece = self._map(shard)[offset : offset + end - start]
            pieces.append(piece)
            start += len(piece)
            shard += 1
        return np.concatenate(pieces).astype(np.int64)


# ---- sample order ----------------------------------------------------------------------------------------------

ROUNDS = 6
MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finalizer: a cheap, well-mixing 64-bit function (the Feistel round function)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class SampleOrder:
    """A keyed pseudo-random permutation of [0, num_samples) per epoch, O(1) memory and time per lookup.

    A balanced Feistel network over the smallest power-of-two domain with an even number of bits that holds
    num_samples, cycle-walking until the value falls inside (on average under 4 walks: the domain is < 4 n).
    Round keys come from blake2b over (seed, epoch), never Python's hash(), which is salted per process."""

    def __init__(self, num_samples: int, seed: int):
        self.num_samples = as_int(num_samples)
        self.seed = as_int(seed)
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, not {num_samples}")
        self._half = max(1, ((self.num_samples - 1).bit_length() + 1) // 2)
        self._mask = (1 << self._half) - 1
        self._epoch, self._keys = -1, ()

    def keys(self, epoch: int) -> tuple[int, ...]:
        if epoch != self._epoch:  # training walks epochs in order: keep the current one
            digest = hashlib.blake2b(
                f"{self.seed}:{epoch}".encode(), digest_size=8 * ROUNDS, person=b"trainfleet-order"
            ).digest()
            self._keys = tuple(int.from_bytes(digest[8 * r : 8 * r + 8], "little") for r in range(ROUNDS))
            self._epoch = epoch
        return self._keys

    def _permute(self, x: int, keys: tuple[int, ...]) -> int:
        half, mask = self._half, self._mask
        left, right = x >> half, x & mask
        for key in keys:
            left, right = right, left ^ (_mix64(right ^ key) & mask)
        return (left << half) | right

    def sample(self, position: int) -> int:
        """The sample at `position` (samples consumed since the start of training, over all epochs)."""
        position = as_int(position)
        if position < 0:
            raise ValueError(f"position must be >= 0, not {position}")
        epoch, x = divmod(position, self.num_samples)
        keys = self.keys(epoch)
        x = self._permute(x, keys)
        while x >= self.num_samples:  # cycle-walk: the orbit of an in-range value returns in range
            x = self._permute(x, keys)
        return x


def step_samples(order: SampleOrder, step: int, global_batch: int, first: int, count: int) -> list[int]:
    """Sample ids of global indices [first, first + count) of `step`: the same whatever the data-parallel size."""
    if step < 0 or global_batch < 1 or first < 0 or count < 0 or first + count > global_batch:
        raise ValueError(
            f"indices [{first}, {first + count}) of step {step} are not inside a global batch of {global_batch}"
        )
    return [order.sample(step * global_batch + i) for i in range(first, first + count)]


def batch_tokens(
    data: TokenData, order: SampleOrder, step: int, global_batch: int, first: int, count: int, seq_len: int
) -> np.ndarray:
    """Windows of the samples at global indices [first, first + count) of `step`: shape (count, seq_len + 1)."""
    if order.num_samples != data.num_samples(seq_len):
        raise ValueError(
            f"the order covers {order.num_samples} samples, the data has {data.num_samples(seq_len)} "
            f"of {seq_len + 1} tokens: make the order with SampleOrder(data.num_samples(seq_len), seed)"
        )
    out = np.empty((count, seq_len + 1), dtype=np.int64)
    for row, j in enumerate(step_samples(order, step, global_batch, first, count)):
        out[row] = data.window(j, seq_len)
    return out


# ---- writing ---------------------------------------------------------------------------------------------------


class TokenWriter:
    """Writes a dataset into a new temp folder beside `out` and renames it into place on `close()`.

    Shards are written as the stream fills them (memory stays at one `add`), each `shard_tokens` long but the
    last. `out` must not exist or be an empty folder: a dataset never replaces files it did not write. Use as a
    context manager: an exception removes the temp folder and leaves `out` as it was."""

    def __init__(self, out: str | Path, vocab_size: int, eos_id: int, shard_tokens: int = 100_000_000):
        self.out = Path(out)
        if not 0 <= eos_id < vocab_size or shard_tokens < 1:
            raise ValueError(f"eos_id {eos_id}, vocab_size {vocab_size}, shard_tokens {shard_tokens}")
        if self.out.exists() and (not self.out.is_dir() or any(self.out.iterdir())):
            raise DataError(f"{self.out}: exists and is not an empty folder; choose a new output folder")
        self.vocab_size, self.eos_id, self.shard_tokens = vocab_size, eos_id, shard_tokens
        self.dtype = dtype_for(vocab_size)
        self.tokenizer: dict = {"kind": "bytes", "file": None, "sha256": None}
        self.shards: list[dict] = []
        self.total_tokens = 0
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.tmp-", dir=self.out.parent))
        self._file = None
        self._hash = hashlib.sha256()

    def add_tokenizer_file(self, path: str | Path, kind: str = "huggingface") -> None:
        """Copy the tokenizer the data was made with into the dataset, named in index.json with its sha256."""
        name = Path(path).name
        shutil.copyfile(path, self.tmp / name)
        self.tokenizer = {"kind": kind, "file": name, "sha256": file_sha256(self.tmp / name)}

    def add(self, ids) -> None:
        """Append token ids (any integer sequence or array) to the stream."""
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            bad = int(ids.min() if ids.min() < 0 else ids.max())
            raise DataError(f"token id {bad} is outside the tokenizer's vocabulary of {self.vocab_size} ids")
        ids = ids.astype(DTYPES[self.dtype], copy=False)
        while ids.size:
            if self._file is None:
                self._open_shard()
            room = self.shard_tokens - self.shards[-1]["tokens"]
            piece, ids = ids[:room], ids[room:]
            data = piece.tobytes()
            self._file.write(data)
            self._hash.update(data)
            self.shards[-1]["tokens"] += len(piece)
            self.total_tokens += len(piece)
            if self.shards[-1]["tokens"] == self.shard_tokens:
                self._close_shard()

    def add_document(self, ids) -> None:
        """Append one document (a sequence of ids) and eos_id after it."""
        self.add_documents([ids])

    def add_documents(self, documents) -> None:
        """Append documents (each a sequence of ids), each followed by eos_id; one write for the lot."""
        eos = np.array([self.eos_id], dtype=np.int64)
        pieces = [piece for ids in documents for piece in (np.asarray(ids, dtype=np.int64), eos)]
        if pieces:
            self.add(np.concatenate(pieces))

    def _open_shard(self) -> None:
        name = f"tokens-{len(self.shards):05d}.bin"
        self.shards.append({"name": name, "tokens": 0, "sha256": None})
        self._file = open(self.tmp / name, "wb")  # closed by _close_shard, or abort
        self._hash = hashlib.sha256()

    def _close_shard(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        self.shards[-1]["sha256"] = self._hash.hexdigest()

    def close(self) -> dict:
        """Write index.json and rename the folder into place; returns the index."""
        if self._file is not None:
            self._close_shard()
        if not self.total_tokens:
            raise DataError("no tokens to write: the input has no documents")
        index = {
            "format": FORMAT,
            "version": VERSION,
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "tokenizer": self.tokenizer,
            "total_tokens": self.total_tokens,
            "shards": self.shards,
        }
        with open(self.tmp / INDEX, "w", encoding="utf-8") as f:
            json.dump(index, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(self.tmp, 0o755)  # mkdtemp's folder is private to its owner; a dataset is not
        try:
            os.replace(self.tmp, self.out)  # onto nothing or an empty folder only
        except OSError as exc:
            raise DataError(f"{self.out}: cannot move the new dataset into place ({exc.strerror})") from None
        return index

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> TokenWriter:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            try:
                self.close()
            except BaseException:
                self.abort()
                raise
        else:
            self.abort()


def synthetic(folder: str | Path, total_tokens: int, vocab_size: int, seed: int) -> TokenData:
    """A valid dataset of `total_tokens` uniformly random tokens (eos_id is the last id), for tests and benchmarks
    without real data. Written atomically like every dataset; returns it opened."""
    rng = np.random.default_rng(seed)
    with TokenWriter(
        folder, vocab_size, vocab_size - 1, shard_tokens=max(1, min(total_tokens, 50_000_000))
    ) as w:
        left = total_tokens
        while left > 0:
            n = min(left, 1 << 22)
            w.add(rng.integers(0, vocab_size, size=n, dtype=np.int64))
            left -= n
    return TokenData.open(folder)
