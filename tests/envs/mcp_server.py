"""A small MCP server over stdio for the MCP tool tests: ``python tests/envs/mcp_server.py``.

Tools: ``multiply(a, b)``, ``shout(text)``, ``fail(message)`` (raises), ``sleep(seconds)`` (blocks the call),
``die()`` (the process exits mid-call), ``hold(path)`` (answers once a file exists), ``die_when(path)`` (exits
once a file exists). Each call is appended to the file named by ``MCP_TEST_LOG`` when set. (A malformed reply is
sent by tests/envs/mcp_raw_server.py: mcp's own servers keep stray output off the wire.)
"""

from __future__ import annotations

import os
import time

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server

server = Server("lit-grpo-test-tools")


def _log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {line}\n")


@server.tool()
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    _log(f"multiply {a} {b}")
    return a * b


@server.tool()
def shout(text: str) -> str:
    """Repeat a text in capitals.

    Args:
        text: The text to repeat.
    """
    _log(f"shout {text}")
    return text.upper()


@server.tool()
def fail(message: str) -> str:
    """Raise an error with a message.

    Args:
        message: The error message.
    """
    raise ValueError(message)


@server.tool()
def sleep(seconds: float) -> str:
    """Block the whole server for some seconds.

    Args:
        seconds: How long to block.
    """
    _log(f"sleep {seconds}")
    time.sleep(seconds)
    return "awake"


@server.tool()
def die() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


def _wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.05)


@server.tool()
def hold(path: str) -> str:
    """Answer "released" once a file exists.

    Args:
        path: The file to wait for.
    """
    _log(f"hold {path}")
    _wait_for(path)
    return "released"


@server.tool()
def die_when(path: str) -> str:
    """Exit the server process once a file exists, in the middle of the call.

    Args:
        path: The file to wait for.
    """
    _log(f"die_when {path}")
    _wait_for(path)
    os._exit(3)


if __name__ == "__main__":
    _log("started")
    server.run()
