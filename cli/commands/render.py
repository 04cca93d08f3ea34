"""`trainfleet render --stack prod --out build/userdata`: each fleet's cloud-init user-data, readable for review.

Per fleet, under OUT/<fleet>/:

    user-data            the #cloud-config document as cloud-init reads it
    user-data.encoded    exactly what the provider input gets (base64 on AWS/Azure, gzip inside if needed)
    parts/<name>         every file the node gets (env, ds_config.json, boot/launch scripts, units, agent, ...)
    assets.json          bucket keys of the files fetched at boot (too big for user-data), with sha256
    SUMMARY.json         sizes and limits

The bucket and group names come from infra/naming.py where they are deterministic; a bucket name that only
exists after `pulumi up` shows as an obvious REPLACE-ME placeholder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.app import app
from cli.output import Col, WideOpt, print_json, show, table

LIMITS = {"aws": ("payload", 16 * 1024), "gcp": ("raw", 256 * 1024), "azure": ("encoded", 64 * 1024)}


# What a render leaves in OUT/<fleet>; a folder holding anything else is not replaced (see _replaceable).
RENDER_ENTRIES = {"user-data", "user-data.encoded", "parts", "assets.json", "SUMMARY.json"}


def render_stack(stack: str, out: Path, start: Path | None = None) -> list[dict[str, Any]]:
    """Render every fleet of `stack` into `out`; returns one summary per fleet.

    Each fleet is rendered into a fresh temp folder beside its destination and swapped in only when complete,
    so a failure (a full disk, a kill) leaves the previous render as it was. An existing OUT/<fleet> is
    replaced only when it is a previous render (its SUMMARY.json names the fleet and it holds nothing a render
    does not write); anything else is refused with one line before anything is written."""
    from infra.atomic import write_error
    from infra.errors import ConfigError
    from infra.stack_file import read_stack_file, stack_path
    from infra.userdata import render_fleets

    sf = read_stack_file(stack_path(stack, start))
    rendered = render_fleets(sf.env, sf.config)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; name a folder")
    for fleet_name in rendered:
        _replaceable(out / fleet_name)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(out, exc, "--out") from None
    summaries = []
    for fleet_name, r in rendered.items():
        folder = out / fleet_name
        assets = [
            {"key": key, "sha256": hashlib.sha256(text.encode()).hexdigest(), "bytes": len(text.encode())}
            for key, text in r.assets.items()
        ]
        sizes = r.sizes()
        measure, limit = LIMITS[r.cloud]
        summary = {
            "stack": sf.env,
            "fleet": fleet_name,
            "cloud": r.cloud,
            "folder": str(folder),
            "raw_bytes": sizes["raw"],
            "gzip_bytes": sizes["gzip"],
            "gzipped": sizes["payload"] != sizes["raw"],
            "encoded_bytes": sizes["encoded"],
            "limit_bytes": limit,
            "limit_measures": measure,
            "headroom_bytes": limit - sizes[measure],
            "parts": sorted(r.parts),
            "fetched_at_boot": [a["key"] for a in assets],
        }
        files = {"user-data": r.document, "user-data.encoded": r.encoded()}
        files.update({f"parts/{name}": text for name, text in r.parts.items()})
        if assets:
            files["assets.json"] = json.dumps(assets, indent=2) + "\n"
        files["SUMMARY.json"] = json.dumps(summary, indent=2) + "\n"  # last: the mark of a complete render
        _swap_in(folder, files)
        summaries.append(summary)
    return summaries


def _replaceable(folder: Path) -> None:
    """Refuse (one line) to replace OUT/<fleet> unless it is missing, empty, or a previous render."""
    from infra.errors import ConfigError

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"--out: {folder} {why}, so trainfleet will not replace it; move it away or choose another --out"
        )

    if folder.is_symlink():
        raise refuse("is a symlink")
    if not folder.exists():
        return
    if not folder.is_dir():
        raise refuse("is a file trainfleet did not write")
    try:
        entries = sorted(p.name for p in folder.iterdir())
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror or exc})") from None
    if not entries:
        return
    try:
        summary = json.loads((folder / "SUMMARY.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        summary = None
    if not isinstance(summary, dict) or summary.get("fleet") != folder.name:
        raise refuse("holds no SUMMARY.json from an earlier trainfleet render")
    if extra := [e for e in entries if e not in RENDER_ENTRIES]:
        raise refuse(f"holds {extra[0]!r}, which a render does not write")
    for name in RENDER_ENTRIES - {"parts"}:
        if (folder / name).is_symlink() or ((folder / name).exists() and not (folder / name).is_file()):
            raise refuse(f"holds {name!r} that is not a file a render writes")
    parts = folder / "parts"
    if parts.is_symlink() or (parts.exists() and not parts.is_dir()):
        raise refuse("holds a 'parts' that is not a folder a render writes")


def _swap_in(folder: Path, files: dict[str, str]) -> None:
    """Write `files` into a fresh temp folder beside `folder`, then put it in `folder`'s place."""
    import os

    from infra.atomic import fsync_dir, make_temp_dir, write_error, write_file

    tmp = make_temp_dir(folder.parent, f".{folder.name}.")
    try:
        for rel, text in files.items():
            write_file(tmp / rel, text, make_parents=True, what="--out")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a render folder is as readable as any other
        aside = None
        if folder.exists():
            aside = folder.with_name(f"{tmp.name}.previous")
            os.rename(folder, aside)
        try:
            os.rename(tmp, folder)
        except OSError:
            if aside is not None:
                os.rename(aside, folder)
            raise
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(folder, exc, "--out") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)  # the previous render, checked by _replaceable
    fsync_dir(folder.parent)


@app.command("render")
def render_command(
    stack: Annotated[
        str, typer.Option("--stack", "-s", help="stack name (stacks/Pulumi.<stack>.yaml) or file")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for the review files")] = Path(
        "build/userdata"
    ),
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON for machines instead of a table.")
    ] = False,
    wide: WideOpt = False,
) -> None:
    """Render each fleet's cloud-init user-data and every part of it, readable for review."""
    summaries = render_stack(stack, out)
    if json_out:
        print_json(summaries)
        return
    # Sizes in bytes, the unit in the header so a number never wraps away from it.
    show(
        table(
            f"user-data for stack {summaries[0]['stack']} in {out}",
            [
                Col("fleet"),
                Col("cloud", drop=1),
                Col("raw (B)", "right"),
                Col("gzip (B)", "right"),
                Col("sent", drop=2),
                Col("encoded (B)", "right", drop=3),
                Col("limit"),
                Col("headroom (B)", "right"),
                Col("fetched at boot", drop=4),
            ],
            [
                (
                    s["fleet"],
                    s["cloud"],
                    f"{s['raw_bytes']:,}",
                    f"{s['gzip_bytes']:,}",
                    "gzip" if s["gzipped"] else "raw",
                    f"{s['encoded_bytes']:,}",
                    f"{s['limit_bytes'] // 1024} KB {s['limit_measures']}",
                    f"{s['headroom_bytes']:,}",
                    f"{len(s['fetched_at_boot'])} file(s)" if s["fetched_at_boot"] else "-",
                )
                for s in summaries
            ],
            wide=wide,
        ),
        wide=wide,
    )
