"""Demonstration episodes: given assistant turns played through an environment, as supervised training rows.

A model whose chat template has no tool format (SmolLM2) may never call a tool on its own; a short supervised
stage on demonstrations of the call format gives RL a start that does. A demonstration is a list of assistant
turns, ``str.format`` templates over the record (``{prompt}``, ``{reference}``, ``{id}`` and its columns, e.g.
``{a}``); the environment answers each turn as it answers the policy (the tool really runs), and the row is
laid out token for token as :func:`~lit_grpo.envs.run_episodes` lays out a sampled episode: the prompt, each
turn followed by the end-of-turn token, and the template's bridge tokens. Only the turns are labelled.
"""

from __future__ import annotations

from collections.abc import Sequence

from lit_grpo.checks import require
from lit_grpo.envs.base import Environment, Record
from lit_grpo.envs.chat import ChatFormat

IGNORE = -100  # the label of a token that is not trained (Hugging Face's ignore_index)


def render_turns(turns: Sequence[str], record: Record) -> list[str]:
    """The demonstration turns for ``record``: each template formatted with its fields and columns."""
    fields = {**record.get("columns", {}), "prompt": record["prompt"], "reference": record["reference"],
              "id": record.get("id")}
    out = []
    for template in turns:
        try:
            out.append(template.format(**fields))
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"demonstration turn {template!r} does not format with record {record.get('id')!r} "
                f"({err!r}); the fields are {sorted(fields)}, and literal braces are written {{{{ and }}}}"
            ) from None
    return out


def demonstration_row(environment: Environment, chat: ChatFormat, record: Record, turns: Sequence[str],
                      end_of_turn: int) -> tuple[list[int], list[int]]:
    """``(ids, labels)`` of the episode in which the policy says ``turns`` (already formatted) for ``record``.

    ``end_of_turn`` is the token that ends an assistant turn (the policy's EOS). The environment must go on
    after every turn but the last and end the episode after the last, as it would for a sampled episode.
    """
    require(len(turns) >= 1, "a demonstration needs at least one assistant turn")
    tokenizer = chat.tokenizer
    episode = environment.reset(record)
    ids = chat.prompt_ids(episode.messages, episode.tools, episode.tool_instructions)
    labels = [IGNORE] * len(ids)
    for k, text in enumerate(turns):
        history = list(episode.messages)
        turn = [*tokenizer.encode(text, add_special_tokens=False), end_of_turn]
        ids, labels = ids + turn, labels + turn
        episode.messages.append({"role": "assistant", "content": text})
        result = environment.step(episode, text)
        last = k == len(turns) - 1
        require(result.done == last,
                f"demonstration of record {record.get('id')!r}: the environment "
                + (f"ended the episode after turn {k + 1} of {len(turns)} ({text!r})" if result.done else
                   f"did not end the episode after the last turn ({text!r}); the last turn must be a "
                   "final answer"))
        answer = result.observations[-1]["content"] if result.observations else ""
        require(episode.tool_errors == 0 and episode.tool_timeouts == 0,
                f"demonstration of record {record.get('id')!r}: turn {k + 1} ({text!r}) got an error from "
                f"the environment ({answer!r}); fix the turn")
        episode.messages.extend(result.observations)
        if not last:
            bridge = chat.bridge_ids(history, result.observations, episode.tools, episode.tool_instructions,
                                     end_of_turn)
            ids, labels = ids + bridge, labels + [IGNORE] * len(bridge)
    return ids, labels
