"""lit-grpo's calculator served over MCP (stdio): ``python -m lit_grpo.envs.calculator_mcp``.

An MCP server with one tool, :func:`lit_grpo.envs.calculator.calculator` (the same parser, the same limits),
for :class:`~lit_grpo.envs.MCPToolEnvironment` (``configs/real/calculator_mcp.yaml``) or any other MCP client.
An expression the calculator refuses is an error result whose text says why. Needs
``pip install 'lit-grpo[mcp]'``.
"""

from typing import Annotated

from lit_grpo.envs.calculator import CalculatorError
from lit_grpo.envs.calculator import calculator as evaluate

#: the optional extra that serves the calculator (lit_grpo.extras)
EXTRA = "mcp"


def _described() -> tuple[str, str]:
    """The Python tool's description and its argument's, as ``ToolEnvironment`` shows them, so that the policy
    sees the same schema either way."""
    from transformers.utils import get_json_schema

    function = get_json_schema(evaluate)["function"]
    return function["description"], function["parameters"]["properties"]["expression"]["description"]


def build():
    """The MCP server (``mcp`` 2's ``MCPServer``, or 1's ``FastMCP``) offering ``calculator(expression)``."""
    try:
        from mcp.server.mcpserver import MCPServer as Server
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        try:
            from mcp.server.fastmcp import FastMCP as Server
            from mcp.server.fastmcp.exceptions import ToolError
        except ImportError:
            raise ImportError(
                "the calculator's MCP server needs the mcp package: pip install 'lit-grpo[mcp]'"
            ) from None

    # Field is read in the signature below: this module does without postponed annotations
    from pydantic import Field

    summary, argument = _described()
    server = Server("lit-grpo-calculator")

    @server.tool(description=summary)
    def calculator(expression: Annotated[str, Field(description=argument)]) -> str:
        try:
            return evaluate(expression)
        except CalculatorError as err:  # shown to the policy (an unexpected error's text stays on the server)
            raise ToolError(str(err)) from None

    return server


if __name__ == "__main__":
    build().run()
