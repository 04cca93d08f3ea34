"""One HTTP server on 127.0.0.1 on a free port, served from a daemon thread: the base of the API stand-ins."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler for a JSON API stand-in: quiet, and reads the request's JSON body."""

    def log_message(self, *args):
        pass

    def json_body(self) -> object:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")


def send_json(handler: BaseHTTPRequestHandler, code: int, answer: object, headers: dict | None = None) -> None:
    """Answer `handler`'s request with `answer` as JSON, status `code` and any extra `headers`."""
    raw = json.dumps(answer).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(raw)))
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(raw)


def arm_error(handler: BaseHTTPRequestHandler, code: int, err: str, message: str, headers: dict | None = None) -> None:
    """An Azure Resource Manager error answer: {"error": {"code", "message"}}."""
    send_json(handler, code, {"error": {"code": err, "message": message}}, headers)


def servers_fixture(make: type[LoopbackServer]):
    """A pytest fixture body: start(**kwargs) builds and starts a `make`, and every one started stops after."""
    servers: list[LoopbackServer] = []

    def start(**kwargs) -> LoopbackServer:
        server = make(**kwargs).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()
