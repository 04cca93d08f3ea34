"""No secrets in user-data: anyone who can describe the instance (or reach its metadata) reads it.

Where user-data lives (provider input names) and how it is encoded (infra/userdata.py `.encoded(cloud)`):
  aws:ec2/launchTemplate  userData                               base64, of gzip when over 16 KB raw
  aws:ec2/instance        userData (text) / userDataBase64
  gcp:compute/instanceTemplate, gcp:compute/instance
                          metadata (every value: user-data, startup-script, ...), metadataStartupScript  text
  azure-native:compute:VirtualMachineScaleSet
                          virtualMachineProfile.osProfile.customData, virtualMachineProfile.userData  base64,
                          of gzip when it would not fit (cloud-init unpacks gzip there too)
  azure-native:compute:VirtualMachine  osProfile.customData, userData                                base64
Each document is scanned as it is and as decoded: base64, gzip, a MIME multi-part archive's parts, a
cloud-config `write_files` entry's b64/gzip content, and any long base64 run inside the text that decodes to
text. A match names the pattern and where it was found, never the secret.
"""

from __future__ import annotations

import base64
import binascii
import email
import re
import zlib
from collections.abc import Iterator
from typing import Any

import yaml

from .base import resource_policy
from .props import dig, is_map, listed

NAME = "no-secrets-in-user-data"

MAX_DECODED = 8 * 1024 * 1024  # bytes a decoded layer may grow to (a gzip bomb stops here)
MAX_DEPTH = 4  # layers of encoding followed
MAX_BLOBS = 256  # long base64 runs inside one text that are tried

# (name, pattern). Patterns follow the formats the issuers document:
#   AWS access key ids: AKIA (long-term) / ASIA (temporary) + 16 characters
#     (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids);
#   a secret access key written into a credentials file or environment (40 characters)
#     (https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html);
#   GitHub tokens ghp_/gho_/ghu_/ghs_/ghr_ and fine-grained github_pat_
#     (https://github.blog/engineering/platform-security/behind-githubs-new-authentication-token-formats/);
#   Azure storage connection strings with AccountKey=
#     (https://learn.microsoft.com/azure/storage/common/storage-configure-connection-string);
#   a GCP service account key file ("private_key")
#     (https://cloud.google.com/iam/docs/keys-create-delete#creating); any PEM private key (RFC 7468).
SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")),
    (
        "AWS secret access key",
        re.compile(r"(?i)aws_secret_access_key\\?[\"']?\s*[:=]\s*\\?[\"']?[A-Za-z0-9/+=]{16,}"),
    ),
    ("private key (PEM)", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    (
        "GitHub token",
        re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{22,})"),
    ),
    ("Azure storage account key (AccountKey=)", re.compile(r"(?i)AccountKey=[A-Za-z0-9+/]{20,}")),
    ('GCP service account key ("private_key")', re.compile(r"\\?\"private_key\\?\"\s*:\s*\\?\"")),
)

_B64_RUN = re.compile(r"[A-Za-z0-9+/]{40,}={0,2}")
_WRITE_FILE_ENCODINGS = {
    "b64": ("b64",),
    "base64": ("b64",),
    "gz": ("gz",),
    "gzip": ("gz",),
    "gz+b64": ("b64", "gz"),
    "gz+base64": ("b64", "gz"),
    "gzip+b64": ("b64", "gz"),
    "gzip+base64": ("b64", "gz"),
}


def _b64(data: str | bytes) -> bytes | None:
    try:
        raw = data.encode("ascii") if isinstance(data, str) else data
        return base64.b64decode(b"".join(raw.split()), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


def _gunzip(data: bytes) -> bytes | None:
    if data[:2] != b"\x1f\x8b":
        return None
    try:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        return inflater.decompress(data, MAX_DECODED)
    except zlib.error:
        return None


def _text(data: bytes) -> str | None:
    """Bytes as text, if they are mostly text (a decoded blob of random bytes is not scanned as text)."""
    text = data.decode("utf-8", errors="replace")
    if not text:
        return None
    printable = sum(1 for c in text if c.isprintable() or c in "\r\n\t")
    return text if printable / len(text) >= 0.9 else None


def _layers(text: str, where: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """(where, text) for the text and every layer encoded inside it."""
    yield where, text
    if depth >= MAX_DEPTH:
        return
    if text.lstrip().startswith("#cloud-config"):
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            doc = None
        for i, entry in enumerate(listed(doc.get("write_files")) if isinstance(doc, dict) else []):
            if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
                continue
            steps = _WRITE_FILE_ENCODINGS.get(str(entry.get("encoding", "")).lower())
            if steps:
                data: bytes | None = entry["content"].encode()
                for step in steps:
                    data = (_b64 if step == "b64" else _gunzip)(data) if data is not None else None
                decoded = _text(data) if data is not None else None
                if decoded is not None:
                    yield from _layers(
                        decoded, f"{where} > write_files[{i}] ({entry.get('path')})", depth + 1
                    )
    if text.startswith(("Content-Type: multipart", "MIME-Version:")):
        message = email.message_from_string(text)
        for i, part in enumerate(message.walk()):
            if part.is_multipart():
                continue
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                payload = _gunzip(payload) or payload
                decoded = _text(payload)
                if decoded is not None:
                    yield from _layers(decoded, f"{where} > MIME part {i}", depth + 1)
    for n, match in enumerate(_B64_RUN.finditer(text)):
        if n >= MAX_BLOBS:
            break
        raw = _b64(match.group())
        if raw is None:
            continue
        decoded = _text(_gunzip(raw) or raw)
        if decoded is not None:
            yield from _layers(decoded, f"{where} > base64 at offset {match.start()}", depth + 1)


def decode_user_data(value: str, where: str, *, base64_encoded: bool) -> Iterator[tuple[str, str]]:
    """(where, text) for every layer of one user-data value. A value that should be base64 but is not is
    scanned as the text it is."""
    if base64_encoded:
        raw = _b64(value)
        if raw is not None:
            raw = _gunzip(raw) or raw
            text = raw.decode("utf-8", errors="replace")
            yield from _layers(text, f"{where} (decoded)")
            return
    yield from _layers(value, where)


def user_data_values(resource_type: str, props: Any) -> list[tuple[str, Any, bool]]:
    """(input path, value, base64-encoded?) for each user-data input of the resource that is set."""
    found: list[tuple[str, Any, bool]] = []

    def add(path: str, b64: bool) -> None:
        value = dig(props, path)
        if value is not None:
            found.append((path, value, b64))

    if resource_type == "aws:ec2/launchTemplate:LaunchTemplate":
        add("userData", True)
    elif resource_type == "aws:ec2/instance:Instance":
        add("userData", False)
        add("userDataBase64", True)
    elif resource_type in ("gcp:compute/instanceTemplate:InstanceTemplate", "gcp:compute/instance:Instance"):
        metadata = dig(props, "metadata")
        if is_map(metadata):
            for key in metadata:
                if metadata[key] is not None:
                    found.append((f"metadata[{key!r}]", metadata[key], False))
        add("metadataStartupScript", False)
    elif resource_type == "azure-native:compute:VirtualMachineScaleSet":
        add("virtualMachineProfile.osProfile.customData", True)
        add("virtualMachineProfile.userData", True)
    elif resource_type == "azure-native:compute:VirtualMachine":
        add("osProfile.customData", True)
        add("userData", True)
    return found


def secret_findings(resource_type: str, props: Any) -> list[str]:
    out: list[str] = []
    for path, value, b64 in user_data_values(resource_type, props):
        if not isinstance(value, str):
            continue
        seen: set[str] = set()  # one finding per kind of secret and input, at the first layer it shows in
        for where, text in decode_user_data(value, path, base64_encoded=b64):
            for name, pattern in SECRET_PATTERNS:
                match = pattern.search(text)
                if match and name not in seen:
                    seen.add(name)
                    line = text.count("\n", 0, match.start()) + 1
                    out.append(
                        f"{where} line {line} holds a {name}; give nodes credentials through their instance "
                        "identity (instance profile, service account, managed identity), never in user-data"
                    )
    return out


POLICY = resource_policy(
    NAME,
    "User-data holds no secrets (AWS access keys, aws_secret_access_key values, PEM private keys, GitHub tokens, "
    "Azure AccountKey= connection strings, GCP service account keys), decoded from base64/gzip as "
    "infra/userdata.py encodes it. Follows https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html "
    "(user data is not a place for sensitive data), https://cloud.google.com/compute/docs/metadata/overview and "
    "https://learn.microsoft.com/azure/virtual-machines/custom-data.",
    secret_findings,
)
