"""The job's token data, copied from the bucket to the node's disk before a launch (PROTOCOL.md section 10).

`<data prefix>/index.json` lists the shards with their sizes and sha256 (templates/trainfleet_tokens.py, the format
`trainfleet data tokenize` writes). Each shard is downloaded once into the data folder, verified against its sha256
as it is written (no second pass over the file), and renamed into place. A shard already there, at its listed size
and recorded in `.verified.json` with the index's sha256, was verified when it was written and is kept, so a
relaunch on the same disk copies nothing, while a dataset uploaded again under the same names is fetched anew. index.json is written
last: a folder with an index has every shard it lists. The data is read-only to the job: nothing is ever written
back to the bucket.
"""

from __future__ import annotations

import json
import os
import re

from .common import log

INDEX = "index.json"
SHARD_NAME = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
)  # a plain file name: never leaves the data folder
ITEMSIZE = {"uint16": 2, "uint32": 4}
VERIFIED = ".verified.json"  # shard name -> the sha256 it was verified against when written here


class DataProblem(Exception):
    """The bucket's data cannot be used as it is; the message names the object and the fix."""


def _shards(index: dict, where: str) -> list[tuple[str, int, str]]:
    """(name, bytes, sha256) of every shard the index lists, checked to be plain names of the index's dtype."""
    itemsize = ITEMSIZE.get(index.get("dtype"))
    if index.get("format") != "trainfleet-tokens" or itemsize is None:
        raise DataProblem(f"{where} is not a trainfleet-tokens index (format, dtype); write it with "
                          "`trainfleet data tokenize`")  # fmt: skip
    out = []
    for shard in index.get("shards", []):
        name, tokens, sha = shard.get("name"), shard.get("tokens"), shard.get("sha256")
        if not (isinstance(name, str) and SHARD_NAME.match(name) and name != INDEX):
            raise DataProblem(f"{where} lists a shard named {name!r}: shard names are plain file names")
        if not (isinstance(tokens, int) and tokens >= 0 and isinstance(sha, str) and len(sha) == 64):
            raise DataProblem(f"{where}: shard {name} needs a token count and a sha256")
        out.append((name, tokens * itemsize, sha))
    if not out:
        raise DataProblem(f"{where} lists no shards")
    return out


def _read_verified(dest: str) -> dict:
    try:
        with open(os.path.join(dest, VERIFIED)) as f:
            found = json.load(f)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _write(dest: str, name: str, data: bytes) -> None:
    tmp = os.path.join(dest, f".{name}.partial")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(dest, name))


def sync_data(store, prefix: str, dest: str) -> dict | None:
    """Copy the data under `prefix` into `dest`; None when the bucket holds no index there. Returns
    {"shards", "fetched", "bytes_fetched", "bytes"}; raises DataProblem for an index or shard that cannot be used."""
    key = f"{prefix.strip('/')}/{INDEX}"
    raw = store.get_bytes(key)
    if raw is None:
        return None
    try:
        index = json.loads(raw)
    except ValueError as e:
        raise DataProblem(
            f"{key} is not JSON ({e}); write it again with `trainfleet data tokenize`"
        ) from None
    shards = _shards(index, key)
    os.makedirs(dest, exist_ok=True)
    verified = _read_verified(dest)
    fetched = fetched_bytes = 0
    for name, size, sha in shards:
        path = os.path.join(dest, name)
        if verified.get(name) == sha and os.path.isfile(path) and os.path.getsize(path) == size:
            continue  # verified when it was written here
        partial = os.path.join(dest, f".{name}.partial")
        if not store.download(f"{prefix.strip('/')}/{name}", partial, f"sha256:{sha}"):
            if os.path.exists(partial):
                os.unlink(partial)
            raise DataProblem(f"shard {name} under {prefix} is missing or does not match its sha256 in {INDEX}; "
                              "upload the dataset folder again")  # fmt: skip
        if os.path.getsize(partial) != size:
            os.unlink(partial)
            raise DataProblem(f"shard {name} under {prefix} is not the size {INDEX} gives; upload it again")
        os.replace(partial, path)
        verified[name] = sha
        _write(dest, VERIFIED, json.dumps(verified).encode())
        fetched, fetched_bytes = fetched + 1, fetched_bytes + size
        log("data_shard", name=name, bytes=size)
    _write(dest, INDEX, raw)
    return {"shards": len(shards), "fetched": fetched, "bytes_fetched": fetched_bytes,
            "bytes": sum(size for _, size, _ in shards)}  # fmt: skip
