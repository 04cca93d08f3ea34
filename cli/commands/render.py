"""`trainfleet render --stack prod --out build/userdata`: each fleet's cloud-init user-data, readable for review.

Per fleet, under OUT/<fleet>/:

    user-data            the #cloud-config document as cloud-init reads it
    user-data.encoded    exactly what the provider input gets (base64 on AWS/Azure, gzip inside if needed)
    parts/<name>         every file the node gets (env, ds_config.json, boot/launch scripts, units, agent, ...)
    assets.json          AWS: bucket keys of the files fetched at boot (too big for 16 KB), with sha256
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
from cli.output import console, print_json, table

LIMITS = {"aws": ("payload", 16 * 1024), "gcp": ("raw", 256 * 1024), "azure": ("encoded", 64 * 1024)}


def render_stack(stack: str, out: Path, start: Path | None = None) -> list[dict[str, Any]]:
    """Render every fleet of `stack` into `out`; returns one summary per fleet."""
    from infra.errors import ConfigError
    from infra.stack_file import read_stack_file, stack_path
    from infra.userdata import render_fleets

    sf = read_stack_file(stack_path(stack, start))
    rendered = render_fleets(sf.env, sf.config)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; name a folder")
    summaries = []
    for fleet_name, r in rendered.items():
        folder = out / fleet_name
        if folder.exists():
            shutil.rmtree(folder)  # a part dropped since the last render must not linger for review
        (folder / "parts").mkdir(parents=True)
        (folder / "user-data").write_text(r.document)
        (folder / "user-data.encoded").write_text(r.encoded())
        for name, text in r.parts.items():
            (folder / "parts" / name).write_text(text)
        assets = [
            {"key": key, "sha256": hashlib.sha256(text.encode()).hexdigest(), "bytes": len(text.encode())}
            for key, text in r.assets.items()
        ]
        if assets:
            (folder / "assets.json").write_text(json.dumps(assets, indent=2) + "\n")
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
        (folder / "SUMMARY.json").write_text(json.dumps(summary, indent=2) + "\n")
        summaries.append(summary)
    return summaries


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
) -> None:
    """Render each fleet's cloud-init user-data and every part of it, readable for review."""
    summaries = render_stack(stack, out)
    if json_out:
        print_json(summaries)
        return
    console.print(
        table(
            f"user-data for stack {summaries[0]['stack']} in {out}",
            ["fleet", "cloud", "raw", "gzip", "encoded", "limit", "headroom", "fetched at boot"],
            [
                (
                    s["fleet"],
                    s["cloud"],
                    f"{s['raw_bytes']:,} B",
                    f"{s['gzip_bytes']:,} B" + (" (sent)" if s["gzipped"] else ""),
                    f"{s['encoded_bytes']:,} B",
                    f"{s['limit_bytes'] // 1024} KB {s['limit_measures']}",
                    f"{s['headroom_bytes']:,} B",
                    str(len(s["fetched_at_boot"])) + " file(s)" if s["fetched_at_boot"] else "-",
                )
                for s in summaries
            ],
            justify={"raw": "right", "gzip": "right", "encoded": "right", "headroom": "right"},
        )
    )
