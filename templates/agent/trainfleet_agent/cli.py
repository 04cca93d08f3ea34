"""Command line: restore, watch, sync, data, peers, scale-to-zero, event."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from .checkpoints import NodeCountChanged, complete_steps, restore, step_part, upload_step
from .common import log
from .data import DataProblem, sync_data
from .events import check_name, parse_field, parse_fields_json, record
from .membership import cmd_peers, cmd_scale_to_zero
from .stores import make_store
from .watch import Watcher

NODE_COUNT_CHANGED = 6  # restore: the newest checkpoint was saved by another node count (printed on stdout)


def cmd_restore(a) -> int:
    os.makedirs(a.dest, exist_ok=True)
    store = make_store(a.cloud, a.bucket, a.metadata_url)
    try:
        step = restore(store, a.prefix, a.dest, a.node_rank, a.nodes or None, resize=a.resize)
    except NodeCountChanged as e:
        log("node_count_changed", step=e.step, saved_by=e.saved_by, nodes=e.nodes)
        print(f"trainfleet_agent restore: {e}", file=sys.stderr)
        print(e.saved_by)  # for the boot script's event
        return NODE_COUNT_CHANGED
    if step is None:
        log("restore_nothing", bucket=a.bucket, prefix=a.prefix)
        return 0
    print(step)
    return 0


def cmd_sync(a) -> int:
    store = make_store(a.cloud, a.bucket, a.metadata_url)
    steps = complete_steps(a.ckpt_dir)
    if not steps:
        log("sync_nothing", ckpt_dir=a.ckpt_dir)
        return 0
    committed = upload_step(store, a.prefix, a.ckpt_dir, steps[-1], a.keep_last, a.commit_wait_s)
    print(steps[-1])
    who = step_part(a.ckpt_dir, steps[-1])
    if committed is None and who["node_rank"] == 0 and not who["restored"]:
        return 5  # this node's part is durable; the step is not committed yet (another node's part is missing)
    return 0


def cmd_data(a) -> int:
    store = make_store(a.cloud, a.bucket, a.metadata_url)
    try:
        got = sync_data(store, a.prefix, a.dest)
    except DataProblem as e:
        print(f"trainfleet_agent data: {e}", file=sys.stderr)
        return 2
    if got is None:
        log("data_nothing", bucket=a.bucket, prefix=a.prefix)
        return 0
    log("data_ready", dest=a.dest, **got)
    print(json.dumps(got))
    return 0


def cmd_event(a) -> int:
    fields = dict(a.json or {})
    for key, value in a.field:
        if key in fields:
            print(f"trainfleet_agent event: --field {key} given twice", file=sys.stderr)
            return 2
        fields[key] = value
    store = make_store(a.cloud, a.bucket, a.metadata_url)
    print(record(store, a.prefix, a.node, a.event, fields))
    return 0


def _argument(parse):
    """An argparse type from a checker that raises ValueError (argparse then exits 2 with its message)."""

    def convert(text):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = parse.__name__
    return convert


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainfleet_agent", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp, bucket=True):
        sp.add_argument("--cloud", choices=["aws", "gcp", "azure"], required=True)
        sp.add_argument("--metadata-url", default=None, help="metadata service base URL (tests)")
        if bucket:
            sp.add_argument("--bucket", required=True)
            sp.add_argument("--prefix", default="")

    r = sub.add_parser("restore", help="restore the newest complete checkpoint from the bucket")
    common(r)
    r.add_argument("--dest", required=True)
    r.add_argument("--node-rank", type=int, default=0, help="this node's rank: restore its part of the checkpoint")
    r.add_argument("--nodes", type=int, default=0, help="the job's node count (0: whatever saved the checkpoint)")
    r.add_argument(
        "--resize",
        action="store_true",
        help="a step saved by another node count: fetch every part (to convert it), instead of skipping it",
    )

    d = sub.add_parser("data", help="copy the job's token data from the bucket (index.json and its shards)")
    common(d)
    d.add_argument("--dest", required=True)

    w = sub.add_parser("watch", help="watch for spot notices; sync checkpoints")
    common(w)
    w.add_argument("--ckpt-dir", required=True)
    w.add_argument("--run-dir", required=True)
    w.add_argument("--interval-minutes", type=float, default=0.0)
    w.add_argument("--keep-last", type=int, default=0)
    w.add_argument("--notice-window-s", type=float, default=None)
    w.add_argument("--poll-s", type=float, default=1.0, help="metadata poll period (GCP: hanging-get base)")
    w.add_argument("--scan-s", type=float, default=0.5, help="checkpoint directory scan period")
    w.add_argument("--http-timeout-s", type=float, default=2.0, help="per-request metadata timeout")

    s = sub.add_parser("sync", help="upload the newest complete checkpoint once")
    common(s)
    s.add_argument("--ckpt-dir", required=True)
    s.add_argument("--keep-last", type=int, default=0)
    s.add_argument(
        "--commit-wait-s", type=float, default=0.0, help="rank 0: wait this long for the other nodes' parts"
    )

    pe = sub.add_parser("peers", help="discover group members; write a DeepSpeed hostfile")
    common(pe, bucket=False)
    pe.add_argument("--group", required=True)
    pe.add_argument("--hostfile", default=None)
    pe.add_argument("--slots", type=int, default=0)
    pe.add_argument("--self-ip", default=None, help="this node's private IP (default: from metadata)")
    pe.add_argument("--min-nodes", type=int, default=1)
    pe.add_argument("--nodes", type=int, default=0, help="the job's exact node count (0: every member)")
    pe.add_argument("--wait-s", type=float, default=0.0)

    z = sub.add_parser("scale-to-zero", help="set the group's desired capacity to 0")
    common(z, bucket=False)
    z.add_argument("--group", required=True)

    ev = sub.add_parser("event", help="record a run event in the bucket (<prefix>/events/)")
    common(ev)
    ev.add_argument("--node", required=True, type=_argument(lambda t: check_name("--node", t)))
    ev.add_argument("--event", required=True, type=_argument(lambda t: check_name("--event", t)))
    ev.add_argument("--field", action="append", default=[], type=_argument(parse_field), metavar="KEY=VALUE",
                    help="a detail; VALUE is read as int, float, true/false or null when it looks like one")  # fmt: skip
    ev.add_argument("--json", type=_argument(parse_fields_json), metavar="OBJECT",
                    help="details as one JSON object of scalars (a script's summary line); --field adds to it")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        if a.cmd == "watch":
            w = Watcher(a)
            signal.signal(signal.SIGTERM, w.on_sigterm)
            return w.run()
        return {
            "restore": cmd_restore,
            "sync": cmd_sync,
            "peers": cmd_peers,
            "scale-to-zero": cmd_scale_to_zero,
            "event": cmd_event,
            "data": cmd_data,
        }[a.cmd](a)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - one clear line, never a traceback
        log("fatal", command=a.cmd, error=f"{type(e).__name__}: {e}"[:500])
        print(f"trainfleet_agent {a.cmd}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
