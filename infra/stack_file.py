"""Read and write `stacks/Pulumi.<env>.yaml`: the `trainfleet:*` keys go through StackConfig, everything
else (provider keys such as `aws:region`, secrets, `encryptionsalt`) is carried through untouched."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.config import NAMESPACE, SECTIONS, StackConfig
from infra.errors import ConfigError, did_you_mean

PROJECT_FILE = "Pulumi.yaml"


@dataclass
class StackFile:
    path: Path
    config: StackConfig
    other_config: dict[str, Any] = field(default_factory=dict)  # non-trainfleet `config:` keys, as read
    other_top: dict[str, Any] = field(default_factory=dict)  # top-level keys beside `config:`

    @property
    def env(self) -> str:
        return stack_name(self.path)


def stack_name(path: Path) -> str:
    """stacks/Pulumi.prod.yaml -> prod"""
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml")


def find_project_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above `start` holding Pulumi.yaml."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
    return None


def stacks_dir(start: Path | None = None) -> Path:
    """Where stack files live: the project's stackConfigDir, else ./stacks."""
    root = find_project_root(start)
    if root is None:
        return (start or Path.cwd()) / "stacks"
    try:
        project = yaml.safe_load((root / PROJECT_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError):
        project = {}
    sub = project.get("stackConfigDir", ".") if isinstance(project, dict) else "."
    return root / str(sub)


def stack_path(stack: str, start: Path | None = None) -> Path:
    """`prod` -> <project>/stacks/Pulumi.prod.yaml; a path to a file is used as it is."""
    if stack.endswith((".yaml", ".yml")) or os.sep in stack:
        return Path(stack)
    return stacks_dir(start) / f"Pulumi.{stack}.yaml"


def list_stack_files(start: Path | None = None) -> list[Path]:
    return sorted(stacks_dir(start).glob("Pulumi.*.yaml"))


def parse_stack_text(text: str, where: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split a stack file into (trainfleet sections, other config keys, other top-level keys)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}{line}: {problem}; fix the YAML syntax") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError(f"{where}: expected a mapping with a `config:` key, got {type(document).__name__}")
    config = document.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: `config:` must be a mapping of keys such as trainfleet:job")
    sections, other = {}, {}
    for key, value in config.items():
        namespace, _, name = str(key).partition(":")
        if namespace != NAMESPACE:
            other[key] = value
            continue
        if name not in SECTIONS:
            hint = did_you_mean(name, list(SECTIONS))
            raise ConfigError(f"{where}: {key} is not a known key{hint}; allowed: " + ", ".join(SECTIONS))
        if isinstance(value, dict) and set(value) == {"secure"}:
            raise ConfigError(
                f"{where}: {key} is a secret; trainfleet settings are plain values, not secrets"
            )
        sections[name] = value
    top = {k: v for k, v in document.items() if k != "config"}
    return sections, other, top


def read_stack_file(path: Path, *, check_catalog: bool = True) -> StackFile:
    """Load and validate a stack file; any problem is one ConfigError line naming the file and key."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        have = ", ".join(stack_name(p) for p in sorted(path.parent.glob("Pulumi.*.yaml"))) or "none"
        raise ConfigError(f"stack file {path} does not exist; stacks here: {have}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"stack file {path} cannot be read ({exc})") from None
    sections, other, top = parse_stack_text(text, str(path))
    try:
        config = StackConfig.from_sections(sections, check_catalog=check_catalog)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return StackFile(path, config, other, top)


def render_stack_text(
    config: StackConfig, other_config: dict | None = None, other_top: dict | None = None
) -> str:
    document: dict[str, Any] = dict(other_top or {})
    config_keys: dict[str, Any] = dict(other_config or {})
    config_keys.update({f"{NAMESPACE}:{name}": value for name, value in config.to_sections().items()})
    document["config"] = config_keys
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)


def write_stack_file(
    path: Path, config: StackConfig, other_config: dict | None = None, other_top=None
) -> Path:
    """Write atomically (temp file + rename), so a crash never leaves half a stack file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_stack_text(config, other_config, other_top)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
