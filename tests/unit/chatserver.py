"""A local OpenAI-compatible Chat Completions server that answers from a script.

Each POST to /v1/chat/completions takes the next entry of the script: an answer's
content (a string, sent as the assistant message), an HTTP status to fail with, or a
delay before answering (slower than the client's timeout). It records every request
body, so a test can check what the hub asked. The response follows the Chat Completions
object the `openai` client parses (id, object, created, model, choices, usage).
"""

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    content: str | None = None
    status: int = 200
    delay: float = 0.0


@dataclass
class ChatServer:
    script: list[Answer] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)

    def __post_init__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(body | {"_path": self.path})
                answer = server.script.pop(0) if server.script else Answer(status=500)
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.status != 200:
                    payload = {"error": {"message": "scripted failure", "type": "server_error"}}
                else:
                    payload = {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": answer.content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                data = json.dumps(payload).encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
