"""A model API stand-in on 127.0.0.1: records every request and answers from a script.

The real ``openai`` and ``anthropic`` clients are pointed at it with ``base_url``; each POST
takes the next scripted answer for its path (a JSON body, or a server-sent event stream as the
providers stream), so a test plays whole model turns and then reads exactly what the SDK sent.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Event = tuple[str | None, dict[str, Any] | str]
"""One server-sent event: its ``event:`` name (``None`` for none) and its data (JSON or text)."""


class RecordingServer:
    """The script (``answer(path, body)``, ``stream(path, events)``) and the record
    (``requests``) of one server."""

    def __init__(self) -> None:
        self._answers: defaultdict[str, deque[dict[str, Any] | list[Event]]] = defaultdict(deque)
        self._lock = threading.Lock()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.base_url = ""

    def answer(self, path: str, body: dict[str, Any]) -> None:
        """Queue ``body`` as the answer to the next POST to ``path``."""
        with self._lock:
            self._answers[path].append(body)

    def stream(self, path: str, events: list[Event]) -> None:
        """Queue ``events`` as the event stream that answers the next POST to ``path``."""
        with self._lock:
            self._answers[path].append(events)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        """The JSON bodies posted to ``path``, in arrival order."""
        with self._lock:
            return [body for seen, body in self.requests if seen == path]

    def _take(self, path: str, body: dict[str, Any]) -> dict[str, Any] | list[Event] | None:
        with self._lock:
            self.requests.append((path, body))
            queue = self._answers.get(path)
            return queue.popleft() if queue else None


def _handler(server: RecordingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            answer = server._take(self.path.split("?", 1)[0], body)
            if isinstance(answer, list):
                self._send_events(answer)
                return
            status = 200 if answer is not None else 404
            payload = json.dumps(
                answer if answer is not None else {"error": f"nothing scripted for {self.path}"}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _send_events(self, events: list[Event]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for name, data in events:
                text = data if isinstance(data, str) else json.dumps(data)
                head = f"event: {name}\n" if name is not None else ""
                self.wfile.write(f"{head}data: {text}\n\n".encode())
            self.close_connection = True  # the end of the stream is the end of the connection

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            return

    return Handler


@contextmanager
def recording_server() -> Iterator[RecordingServer]:
    """A started server on an ephemeral 127.0.0.1 port, shut down on exit."""
    record = RecordingServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(record))
    httpd.daemon_threads = True
    record.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    # A short poll interval: shutdown() waits for the loop to notice it.
    thread = threading.Thread(
        target=httpd.serve_forever, args=(0.02,), name="recording-server", daemon=True
    )
    thread.start()
    try:
        yield record
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
