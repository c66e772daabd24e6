"""Environments as configured components: routing by a data column, class_path configuration."""

from __future__ import annotations

import pytest
import yaml
from jsonargparse import ArgumentParser

from lit_grpo.envs import (
    Environment,
    EnvironmentRouter,
    OpenEnvEnvironment,
    SingleTurn,
    ToolEnvironment,
    calculator,
    records_of,
)
from lit_grpo.types import PromptBatch


def _record(task=None, i="0"):
    return {"prompt": "Q", "reference": "", "id": i, "columns": {} if task is None else {"task": task}}


def test_router_chooses_by_column_and_keeps_the_choice_per_episode():
    calc, plain = ToolEnvironment(tools=[calculator]), SingleTurn(system_prompt="Be brief.")
    router = EnvironmentRouter(column="task", environments={"calc": calc, "plain": plain})
    a, b = router.reset(_record("calc")), router.reset(_record("plain"))
    assert a.tools and not b.tools and b.messages[0] == {"role": "system", "content": "Be brief."}
    assert not router.step(a, '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'
                           ).done
    assert router.step(b, "anything").done and a.tool_calls == 1 and b.tool_calls == 0
    assert router.reward(a) is None


def test_router_unknown_value_is_a_clear_error_unless_a_default_is_set():
    router = EnvironmentRouter(column="task", environments={"calc": ToolEnvironment(tools=[calculator])})
    with pytest.raises(ValueError, match=r"task='poetry'.*known values: \['calc'\].*default"):
        router.reset(_record("poetry"))
    fallback = SingleTurn()
    routed = EnvironmentRouter(column="task", environments={}, default=fallback)
    assert routed.reset(_record()).state["environment"] is fallback


def test_records_of_a_prompt_batch():
    batch = PromptBatch(prompts=["a", "b"], references=["1", "2"], ids=["x", "y"], columns={"task": ["c", "d"]})
    assert records_of(batch)[1] == {"prompt": "b", "reference": "2", "id": "y", "columns": {"task": "d"}}


def test_environments_build_from_class_path_config():
    config = yaml.safe_load("""
    env:
      class_path: lit_grpo.envs.EnvironmentRouter
      init_args:
        column: task
        environments:
          calc:
            class_path: ToolEnvironment
            init_args:
              tools: [lit_grpo.envs.calculator.calculator]
              timeout_s: 2.0
              call_format: tags
          plain:
            class_path: SingleTurn
    """)
    parser = ArgumentParser()
    parser.add_argument("--env", type=Environment)
    env = parser.instantiate(parser.parse_object(config)).env
    assert isinstance(env, EnvironmentRouter) and isinstance(env.environments["plain"], SingleTurn)
    calc = env.environments["calc"]
    assert calc.tools == {"calculator": calculator} and calc.timeout_s == 2.0


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="at least one tool"):
        ToolEnvironment(tools=[])
    with pytest.raises(ValueError, match="timeout_s=0"):
        ToolEnvironment(tools=[calculator], timeout_s=0)
    with pytest.raises(ValueError, match="unique"):
        ToolEnvironment(tools=[calculator, calculator])
    with pytest.raises(ValueError, match="must start with http"):
        OpenEnvEnvironment(base_url="localhost:8000")
    with pytest.raises(ValueError, match="reward='max'"):
        OpenEnvEnvironment(base_url="http://127.0.0.1:1", reward="max")
