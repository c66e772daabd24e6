"""A hand-written MCP server over stdio, JSON-RPC lines on stdin and stdout without the ``mcp`` package, for what
a server built on it cannot send: ``python tests/envs/mcp_raw_server.py``.

Tools: ``shout(text)``, ``garble()`` (a reply cut short, naming its request id, and no other), ``noisy(text)`` (a
stray line that is not JSON-RPC and names no request, then its answer). Each call is appended to the file named
by ``MCP_TEST_LOG`` when set, as tests/envs/mcp_server.py does.
"""

from __future__ import annotations

import json
import os
import sys

TOOLS = [
    {"name": "shout", "description": "Repeat a text in capitals.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "garble", "description": "Reply with a line cut short, then with nothing.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "noisy", "description": "Write a stray line, then answer with a text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
]


def _log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {line}\n")


def _write(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _reply(request_id, result: dict) -> None:
    _write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}))


def _text(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def main() -> None:
    _log("started")
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:  # a notification: nothing to answer
            continue
        params = message.get("params") or {}
        if method == "initialize":
            _reply(request_id, {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                                "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}})
        elif method == "tools/list":
            _reply(request_id, {"tools": TOOLS})
        elif method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            _log(name)
            if name == "garble":
                _write(f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "result": {{"cont')
            elif name == "noisy":
                _write("a stray print from the tool")
                _reply(request_id, _text(arguments["text"]))
            else:
                _reply(request_id, _text(arguments["text"].upper()))
        elif method == "ping":
            _reply(request_id, {})
        else:
            _write(json.dumps({"jsonrpc": "2.0", "id": request_id,
                               "error": {"code": -32601, "message": f"no method {method}"}}))


if __name__ == "__main__":
    main()
