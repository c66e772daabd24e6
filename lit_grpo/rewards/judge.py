"""JudgeReward: an LLM judge behind any OpenAI-compatible endpoint (vLLM's server, a hosted API) grades each
completion with a rubric template.

Each completion is one chat request: the template filled with the item's ``prompt``, ``completion``,
``reference`` and data columns, sent as the user turn. The reply's score is read with the ``parse`` regular
expression (its first group, a number) and divided by ``scale``. The requests of a call are awaited together
(:class:`~lit_grpo.rewards.concurrent.AsyncReward`: ``max_concurrency`` in flight, each under
``item_timeout_s``); a connection error, a timeout of the request, a rate limit or a server error (5xx) is
retried ``retries`` times with exponential back-off from ``backoff_s``; a reply that cannot be parsed is
unscorable (counted under ``unparsed``), never a silent 0; an item still failing after its retries is NaN
counted in ``errors``. Replies are cached by request (the model, the messages, the sampling settings,
``extra_body``), so the same completion of the same prompt is asked once a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any

from lit_grpo.checks import require
from lit_grpo.rewards.concurrent import AsyncReward
from lit_grpo.rewards.scoring import Unscorable

EXTRA = "judge"

#: A rubric that asks for a 0-10 score on a line of its own.
DEFAULT_TEMPLATE = (
    "You grade an answer to a question against a reference answer.\n\nQuestion:\n{prompt}\n\n"
    "Reference answer:\n{reference}\n\nAnswer to grade:\n{completion}\n\n"
    "How correct is the answer? Reply with one line `Score: N`, N from 0 (wrong) to 10 (fully correct)."
)


class JudgeReward(AsyncReward):
    """An LLM judge's grade of each completion, from an OpenAI-compatible chat endpoint.

    Args:
        base_url: The endpoint's URL up to ``/v1`` (``http://127.0.0.1:8000/v1`` for ``vllm serve``).
        model: The judge model's name at that endpoint.
        template: The rubric, a ``str.format`` template of ``{prompt}``, ``{completion}``, ``{reference}`` and
            the data's columns.
        parse: A regular expression whose first group is the score in the reply (the last match counts).
        scale: The score is divided by it (10 for the default rubric's 0-10).
        api_key_env: Environment variable holding the API key (a local server takes any).
        temperature: The judge's sampling temperature.
        max_tokens: The longest reply.
        retries: Times a failed request is sent again (connection, timeout, rate limit, 5xx).
        backoff_s: Seconds before the first retry, doubling each time.
        max_concurrency: Requests in flight at once.
        item_timeout_s: Wall-clock limit of one item, its retries included.
        request_timeout_s: Limit of one request.
        extra_body: More fields of each request, as the endpoint reads them (vLLM's structured outputs, e.g.
            ``{"structured_outputs": {"regex": "Score: (10|[0-9])"}}``, which makes every reply parse).
    """

    binary = False
    needs_prompts = True

    def __init__(
        self,
        base_url: str,
        model: str,
        template: str = DEFAULT_TEMPLATE,
        parse: str = r"(?i)score\s*[:=]\s*(-?\d+(?:\.\d+)?)",
        scale: float = 10.0,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 256,
        retries: int = 3,
        backoff_s: float = 1.0,
        max_concurrency: int = 16,
        item_timeout_s: float | None = 120.0,
        request_timeout_s: float = 60.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(max_concurrency=max_concurrency, item_timeout_s=item_timeout_s)
        require(base_url.startswith(("http://", "https://")),
                f"JudgeReward: base_url={base_url!r} must be an http(s) URL, e.g. http://127.0.0.1:8000/v1")
        pattern = re.compile(parse)
        require(pattern.groups >= 1, f"JudgeReward: parse={parse!r} needs a group around the score")
        require(scale > 0 and retries >= 0 and backoff_s >= 0 and request_timeout_s > 0 and max_tokens >= 1,
                "JudgeReward: scale and request_timeout_s must be > 0, retries and backoff_s >= 0, "
                "max_tokens >= 1")
        try:
            template.format(prompt="", completion="", reference="")
        except KeyError:
            pass  # a data column, filled in per item
        except (IndexError, ValueError) as err:
            raise ValueError(f"JudgeReward: template is not a str.format template ({err})") from None
        self.base_url, self.model, self.template, self.pattern = base_url, model, template, pattern
        self.scale, self.api_key_env = scale, api_key_env
        self.temperature, self.max_tokens = temperature, max_tokens
        self.retries, self.backoff_s, self.request_timeout_s = retries, backoff_s, request_timeout_s
        require(extra_body is None or isinstance(extra_body, dict),
                "JudgeReward: extra_body must be a mapping of request fields, got "
                f"{type(extra_body).__name__}")
        self.extra_body = dict(extra_body or {})
        self.cache: dict[tuple, str] = {}
        self._inflight: dict[tuple, asyncio.Future] = {}
        self.requests = 0  # requests sent, retries included

    async def score(self, completion: str, reference: str, prompt: str = "", conversation: Any = None,
                    **fields: Any) -> float:
        try:
            text = self.template.format(prompt=prompt, completion=completion, reference=reference, **fields)
        except KeyError as err:
            raise ValueError(f"JudgeReward: the template names {err}, which is no column of the data"
                             ) from None
        messages = ({"role": "user", "content": text},)
        asked = tuple(tuple(sorted(m.items())) for m in messages)
        extra = json.dumps(self.extra_body, sort_keys=True)
        key = (self.model, asked, self.temperature, self.max_tokens, extra)
        if key not in self.cache:
            # concurrent items of the same request share one request: the first asks, the others await it
            task = self._inflight.get(key)
            if task is None or task.get_loop() is not asyncio.get_running_loop():
                task = self._inflight[key] = asyncio.ensure_future(self._ask([dict(m) for m in messages]))
            try:
                self.cache[key] = await asyncio.shield(task)  # one item's timeout leaves the others' request
            finally:
                if self._inflight.get(key) is task:
                    del self._inflight[key]
        found = self.pattern.findall(self.cache[key])
        if not found:
            raise Unscorable("unparsed", f"no score in the judge's reply: {self.cache[key][:200]!r}")
        last = found[-1][0] if isinstance(found[-1], tuple) else found[-1]
        return float(last) / self.scale

    async def _ask(self, messages: list[dict]) -> str:
        import openai

        key = os.environ.get(self.api_key_env) or "none"  # a local server takes any
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=key, timeout=self.request_timeout_s,
                                    max_retries=0)
        retriable = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                     openai.InternalServerError)
        try:
            for attempt in range(self.retries + 1):
                self.requests += 1
                try:
                    reply = await client.chat.completions.create(
                        model=self.model, messages=messages, temperature=self.temperature,
                        max_tokens=self.max_tokens, extra_body=self.extra_body or None)
                    return reply.choices[0].message.content or ""
                except retriable:
                    if attempt == self.retries:
                        raise
                    await asyncio.sleep(self.backoff_s * 2**attempt)
        finally:
            await client.close()
        raise AssertionError("unreachable")
