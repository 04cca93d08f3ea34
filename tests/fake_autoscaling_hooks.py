"""A stand-in for EC2 Auto Scaling's lifecycle-hook API, which moto does not implement: CompleteLifecycleAction
and RecordLifecycleActionHeartbeat as the API reference describes them
(https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CompleteLifecycleAction.html,
.../API_RecordLifecycleActionHeartbeat.html: "Records a heartbeat for the lifecycle action ... This extends the
timeout by the length of time defined using the PutLifecycleHook API call").

It keeps hooks and instances waiting in Terminating:Wait, answers the Query API (form-encoded POST, SigV4
Authorization header required), and refuses what the service refuses: a missing required parameter or a bad
LifecycleActionResult is a 400 ValidationError; an instance with no pending action on that hook is the 400
ValidationError "No active Lifecycle Action found with instance ID ...". A wait given a heartbeat timeout ends
when it runs out (the group goes on with the termination: `timed_out`), unless a heartbeat restarted it; no
heartbeat keeps it past 100 timeouts or 48 hours ("whichever is smaller", lifecycle-hooks-overview.html).
Completed actions and heartbeats are recorded.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler

from tests.loopback import LoopbackServer

XMLNS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"


class FakeAutoScalingHooks(LoopbackServer):
    def __init__(self):
        self.lock = threading.Lock()
        # (group, hook, instance) in Terminating:Wait -> (when its timeout runs out, the latest it may, the timeout)
        self.waiting: dict[tuple[str, str, str], tuple[float, float, float]] = {}
        self.completed: list[dict[str, str]] = []
        self.heartbeats: list[dict[str, str]] = []
        self.timed_out: list[tuple[str, str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                params = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                status, body = fake.handle(params, self.headers.get("Authorization", ""))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)

    def terminating(self, group: str, hook: str, instance: str, heartbeat_timeout_s: float = float("inf")) -> None:
        """The group decided to terminate `instance`: it waits on `hook` (target-lifecycle-state: Terminated) for
        the hook's heartbeat timeout."""
        now = time.time()
        with self.lock:
            self.waiting[(group, hook, instance)] = (now + heartbeat_timeout_s,
                                                     now + min(100 * heartbeat_timeout_s, 48 * 3600.0),
                                                     heartbeat_timeout_s)  # fmt: skip

    def _expire(self) -> None:
        """Waits whose timeout ran out end: the group terminates those instances."""
        now = time.time()
        for key, (until, _, _) in list(self.waiting.items()):
            if now >= until:
                del self.waiting[key]
                self.timed_out.append(key)

    @staticmethod
    def _error(code: str, message: str) -> tuple[int, str]:
        return 400, (
            f'<ErrorResponse xmlns="{XMLNS}"><Error><Type>Sender</Type><Code>{code}</Code>'
            f"<Message>{message}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )

    def handle(self, params: dict[str, str], authorization: str) -> tuple[int, str]:
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            return 403, "<ErrorResponse><Error><Code>MissingAuthenticationToken</Code></Error></ErrorResponse>"
        action = params.get("Action")
        if action not in ("CompleteLifecycleAction", "RecordLifecycleActionHeartbeat"):
            return self._error("InvalidAction", f"{action} is not supported by this stand-in")
        required = ["AutoScalingGroupName", "LifecycleHookName"]
        if action == "CompleteLifecycleAction":
            required.append("LifecycleActionResult")
        for name in required:
            if not params.get(name):
                return self._error("ValidationError", f"1 validation error detected: {name} is required")
        if action == "CompleteLifecycleAction" and params["LifecycleActionResult"] not in ("CONTINUE", "ABANDON"):
            return self._error("ValidationError", "LifecycleActionResult must be CONTINUE or ABANDON")
        key = (params["AutoScalingGroupName"], params["LifecycleHookName"], params.get("InstanceId", ""))
        with self.lock:
            self._expire()
            if key not in self.waiting:
                return self._error(
                    "ValidationError", f"No active Lifecycle Action found with instance ID {key[2]}"
                )
            if action == "CompleteLifecycleAction":
                del self.waiting[key]
                self.completed.append(params)
            else:
                _, latest, timeout = self.waiting[key]
                self.waiting[key] = (min(time.time() + timeout, latest), latest, timeout)
                self.heartbeats.append({**params, "at": str(time.time())})
        return 200, (
            f'<{action}Response xmlns="{XMLNS}"><{action}Result/>'
            f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
            f"</{action}Response>"
        )

    def expired(self) -> list[tuple[str, str, str]]:
        """The waits whose timeout has run out by now."""
        with self.lock:
            self._expire()
            return list(self.timed_out)
