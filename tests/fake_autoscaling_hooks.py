"""A stand-in for EC2 Auto Scaling's lifecycle-hook API, which moto does not implement: CompleteLifecycleAction
as the API reference describes it (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CompleteLifecycleAction.html).

It keeps hooks and instances waiting in Terminating:Wait, answers the Query API (form-encoded POST, SigV4
Authorization header required), and refuses what the service refuses: a missing required parameter or a bad
LifecycleActionResult is a 400 ValidationError; an instance with no pending action on that hook is the 400
ValidationError "No active Lifecycle Action found with instance ID ...". A completed action is recorded.
"""

from __future__ import annotations

import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler

from tests.loopback import LoopbackServer

XMLNS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"


class FakeAutoScalingHooks(LoopbackServer):
    def __init__(self):
        self.lock = threading.Lock()
        self.waiting: set[tuple[str, str, str]] = set()  # (group, hook, instance) in Terminating:Wait
        self.completed: list[dict[str, str]] = []
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

    def terminating(self, group: str, hook: str, instance: str) -> None:
        """The group decided to terminate `instance`: it waits on `hook` (target-lifecycle-state: Terminated)."""
        with self.lock:
            self.waiting.add((group, hook, instance))

    @staticmethod
    def _error(code: str, message: str) -> tuple[int, str]:
        return 400, (
            f'<ErrorResponse xmlns="{XMLNS}"><Error><Type>Sender</Type><Code>{code}</Code>'
            f"<Message>{message}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )

    def handle(self, params: dict[str, str], authorization: str) -> tuple[int, str]:
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            return 403, "<ErrorResponse><Error><Code>MissingAuthenticationToken</Code></Error></ErrorResponse>"
        if params.get("Action") != "CompleteLifecycleAction":
            return self._error("InvalidAction", f"{params.get('Action')} is not supported by this stand-in")
        for required in ("AutoScalingGroupName", "LifecycleHookName", "LifecycleActionResult"):
            if not params.get(required):
                return self._error("ValidationError", f"1 validation error detected: {required} is required")
        if params["LifecycleActionResult"] not in ("CONTINUE", "ABANDON"):
            return self._error("ValidationError", "LifecycleActionResult must be CONTINUE or ABANDON")
        key = (params["AutoScalingGroupName"], params["LifecycleHookName"], params.get("InstanceId", ""))
        with self.lock:
            if key not in self.waiting:
                return self._error(
                    "ValidationError", f"No active Lifecycle Action found with instance ID {key[2]}"
                )
            self.waiting.discard(key)
            self.completed.append(params)
        return 200, (
            f'<CompleteLifecycleActionResponse xmlns="{XMLNS}"><CompleteLifecycleActionResult/>'
            f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
            "</CompleteLifecycleActionResponse>"
        )
