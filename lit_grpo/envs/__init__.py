"""Environments and tools for multi-turn episodes: the interface, tool use, and the token-exact rollout.

See docs/agents.md. Importing this package registers its environments for ``class_path`` short names; the
optional libraries (bm25s for search, openenv-core for OpenEnv servers, mcp for MCP tools) are imported only
when such an environment is built.
"""

from lit_grpo.envs.base import Environment, EnvironmentRouter, Episode, SingleTurn, StepResult
from lit_grpo.envs.calculator import calculator
from lit_grpo.envs.chat import ChatFormat
from lit_grpo.envs.concurrent import ConcurrentSteps
from lit_grpo.envs.engine import EpisodeEngine
from lit_grpo.envs.mcp_tools import MCPToolEnvironment
from lit_grpo.envs.openenv_adapter import OpenEnvEnvironment
from lit_grpo.envs.rollout import episode_metrics, records_of, run_episodes
from lit_grpo.envs.search import SearchEnvironment
from lit_grpo.envs.tools import ToolEnvironment

__all__ = [
    "Environment", "EnvironmentRouter", "Episode", "EpisodeEngine", "SingleTurn", "StepResult",
    "ToolEnvironment", "SearchEnvironment", "OpenEnvEnvironment", "MCPToolEnvironment", "ChatFormat",
    "ConcurrentSteps", "calculator",
    "episode_metrics",
    "records_of", "run_episodes",
]  # fmt: skip
