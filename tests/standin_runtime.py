"""A stand-in runtime for tests: a real process serving the OpenAI API that dies as told.

`python standin_runtime.py --port P --mode MODE [--after K] [--say TEXT]`, started by the suite's
local launcher from a runtime definition written into a temporary images folder
(`standin_images`). Modes:

- `segv-start`: prints a few start-up lines (an INFO line that mentions an error among them), then
  kills itself with SIGSEGV before it is ready, as llama-server did on an AMX CPU;
- `segv-after`: serves, and kills itself with SIGSEGV on completion number K+1 (K answered);
- `vary`: serves, every answer different (a runtime whose gate finds more than one answer);
- `same`: serves, every answer the same;
- `trickle`: serves /health, and answers every completion with a head at once and then one
  comment line (`: ping`) every 0.2 s, without end: every read on time, no answer ever.

The death is real (`os.kill(os.getpid(), SIGSEGV)`): the suite sees a process ended by a signal,
exactly as for a native crash.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def crash() -> None:
    """Die by SIGSEGV, and go no further meanwhile: the signal may reach the process a moment
    after `kill` returns (another thread takes it), and this thread must not answer before then."""
    os.kill(os.getpid(), signal.SIGSEGV)
    while True:
        time.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", required=True, choices=["segv-start", "segv-after", "vary", "same", "trickle"])
    ap.add_argument("--after", type=int, default=0)
    ap.add_argument("--say", default="")
    ap.add_argument("rest", nargs="*")
    args = ap.parse_args()
    print("build: 1 (0c1e570) with cc (GCC) for x86_64-linux-gnu", flush=True)
    print("system_info: n_threads = 2 | CPU : AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |", flush=True)
    print("INFO 12-01 18:00:00 [server.py:12] error_handler registered, loading model", flush=True)
    if args.say:
        print(args.say, flush=True)
    if args.mode == "segv-start":
        time.sleep(0.3)
        print("srv  load_model: loading model 'model.gguf'", flush=True)
        crash()
    served = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *a: object) -> None:
            print("srv  log_server_r: request: " + fmt % a, flush=True)

        def _json(self, code: int, data: object) -> None:
            body = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": "standin", "object": "model"}]})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if args.mode == "segv-after" and served["n"] >= args.after:
                print(f"slot launch_slot_: id 0 | task {served['n']} | processing task", flush=True)
                crash()
            served["n"] += 1
            if args.mode == "trickle":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(b": ping\n")
                        self.wfile.flush()
                        time.sleep(0.2)
                except OSError:
                    return
            words = ["the", "answer", "is", str(served["n"]) if args.mode == "vary" else "same"]
            chat = self.path.endswith("/chat/completions")
            usage = {"prompt_tokens": 5, "completion_tokens": len(words), "total_tokens": 5 + len(words)}
            if not req.get("stream"):
                text = " ".join(words)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                          if chat else {"index": 0, "text": text, "finish_reason": "stop"})
                self._json(200, {"id": "x", "object": "text_completion", "model": "standin", "choices": [choice],
                                 "usage": usage})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i, w in enumerate(words):
                piece = ("" if i == 0 else " ") + w
                choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                choice["finish_reason"] = "stop" if i == len(words) - 1 else None
                self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"main: server is listening on http://127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
