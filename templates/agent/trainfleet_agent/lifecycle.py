"""The Auto Scaling group's termination lifecycle hook (infra/aws/fleet.py): the group holds an instance it
terminates in Terminating:Wait for the hook's heartbeat timeout (ASG_HOOK_S), then goes on. The agent completes the
action once the node's checkpoint is safe, and while that checkpoint is still going up it records heartbeats, each
of which restarts the timeout (RecordLifecycleActionHeartbeat: "extends the timeout by the length of time defined
using the PutLifecycleHook API call"), up to the most AWS allows: "48 hours or 100 times the heartbeat timeout,
whichever is smaller" (docs.aws.amazon.com/autoscaling/ec2/userguide/lifecycle-hooks-overview.html, read
2026-11-28). A 70B part on node 0 takes minutes longer than its share: without the heartbeat the group would
terminate the node mid-upload at the timeout (issue 29 #11)."""

from __future__ import annotations

import os
import threading
import time

from .common import ASG_HOOK_NAME, ASG_HOOK_S, log
from .membership import aws_client
from .metadata import AwsMetadata, metadata_base

MAX_WAIT_S = min(100 * ASG_HOOK_S, 48 * 3600.0)
HEARTBEAT_EVERY_S = ASG_HOOK_S / 3  # two beats may fail before the timeout runs out


def _call(send, logged: tuple[str, str], metadata_url: str | None) -> bool:
    """`send(client, ids)`: one lifecycle call for this instance on the fleet's hook, logged as logged[0] (taken)
    or logged[1]; True when the group took it. Best effort: the hook's default result (CONTINUE) goes on with the
    termination anyway."""
    group = os.environ.get("TRAINFLEET_GROUP", "")
    try:
        instance = (AwsMetadata(metadata_base("aws", metadata_url)).get("instance-id") or "").strip()
        ids = {"AutoScalingGroupName": group, "LifecycleHookName": ASG_HOOK_NAME, "InstanceId": instance}
        send(aws_client("autoscaling", metadata_url), ids)
        log(logged[0], group=group, instance=instance)
        return True
    except Exception as e:  # noqa: BLE001
        log(logged[1], group=group, error=" ".join(f"{type(e).__name__}: {e}".split())[:300])
        return False


def complete_lifecycle_action(metadata_url: str | None) -> bool:
    """Let the group finish terminating this instance now (else it waits out the timeout, GPUs billing)."""
    return _call(lambda client, ids: client.complete_lifecycle_action(**ids, LifecycleActionResult="CONTINUE"),
                 ("lifecycle_action_completed", "lifecycle_action_failed"), metadata_url)  # fmt: skip


def record_heartbeat(metadata_url: str | None) -> bool:
    """Restart the hook's timeout: the group keeps this instance ASG_HOOK_S more."""
    return _call(lambda client, ids: client.record_lifecycle_action_heartbeat(**ids),
                 ("lifecycle_heartbeat", "lifecycle_heartbeat_failed"), metadata_url)  # fmt: skip


class HookKeeper:
    """Records a heartbeat now and every HEARTBEAT_EVERY_S until the `with` block ends, while the action's whole wait
    (from `noticed_at`) stays within MAX_WAIT_S. `on_extended(deadline)` hears each new timeout the group took."""

    POLL_S = 0.2  # how soon the keeper notices the block ended (sleeps, not an Event: the scale simulation's clock)

    def __init__(self, metadata_url: str | None, noticed_at: float, on_extended):
        self.metadata_url, self.noticed_at, self.on_extended = metadata_url, noticed_at, on_extended
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True, name="lifecycle-heartbeat")

    def __enter__(self) -> HookKeeper:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped = True
        self.thread.join()

    def _run(self) -> None:
        while not self.stopped:
            now = time.time()
            if now + ASG_HOOK_S > self.noticed_at + MAX_WAIT_S:
                log("lifecycle_heartbeat_limit", waited_s=round(now - self.noticed_at, 1), max_s=MAX_WAIT_S)
                return
            if record_heartbeat(self.metadata_url):
                self.on_extended(now + ASG_HOOK_S)
            until = now + HEARTBEAT_EVERY_S
            while not self.stopped and time.time() < until:
                time.sleep(min(self.POLL_S, max(0.0, until - time.time())))
