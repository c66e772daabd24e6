"""JudgeReward against a local OpenAI-compatible test server on 127.0.0.1: the grade read from the reply, the
rubric filled in, replies cached by request, and the faults counted, never a silent 0: a slow judge (item
timeout), server errors (retried with back-off, then an error), a reply without a score (unscorable), a dead
endpoint (connection errors, retried, then an error)."""

from __future__ import annotations

import importlib.util
import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lit_grpo.rewards import RewardGuard

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openai") is None,
                                reason="needs openai: pip install 'lit-grpo[judge]'")


class Judge(BaseHTTPRequestHandler):
    """Grades by what the answer says: "right" 10, "half" 5, "slow" after 5 s, "500" a server error the first
    two times it is asked, "mute" a reply without a score, "always500" a server error every time."""

    seen: list[str] = []
    failures: dict[str, int] = {}

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        answer = prompt.split("Answer to grade:\n")[1].split("\n")[0]
        Judge.seen.append(answer)
        if answer == "slow" and self.server.stopping.wait(5):  # the test ended first: no reply
            return
        if answer in ("500", "always500"):
            count = Judge.failures.get(prompt, 0)
            Judge.failures[prompt] = count + 1
            if answer == "always500" or count < 2:
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b'{"error": "boom"}')
                return
        text = {"right": "Score: 10", "half": "Reasoning first.\nScore: 5", "mute": "I cannot say."}.get(
            answer, "Score: 7")
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": text}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    Judge.seen, Judge.failures = [], {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    # the handler threads are joined when the server closes, the slow one told to stop first: none outlives the
    # test (a later test that counts threads would see it)
    httpd.daemon_threads, httpd.stopping = False, threading.Event()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.stopping.set()
    httpd.shutdown()
    httpd.server_close()


def _judge(url, **kwargs):
    from lit_grpo.rewards import JudgeReward

    return JudgeReward(url, "judge-model", backoff_s=0.01, **kwargs)


def _score(reward, completions):
    n = len(completions)
    return RewardGuard()(reward, completions, ["ref"] * n, prompts=["What?"] * n,
                         conversations=[[]] * n)


def test_the_grade_is_read_from_the_reply_and_scaled(server):
    out = _score(_judge(server), ["right", "half", "other"])
    assert out.scores.tolist() == pytest.approx([1.0, 0.5, 0.7], abs=1e-6)  # float32 scores


def test_the_same_request_is_asked_once(server):
    reward = _judge(server)
    _score(reward, ["right", "right"])
    _score(reward, ["right"])
    assert Judge.seen.count("right") == 1 and reward.requests == 1  # concurrent duplicates share the request
    assert len(reward.cache) == 1


def test_server_errors_are_retried_then_counted(server):
    reward = _judge(server, retries=3)
    out = _score(reward, ["500", "always500"])
    assert out.scores[0] == 0.7 and math.isnan(out.scores[1])  # the first succeeded at its third request
    assert out.counters["errors"] == 1 and Judge.seen.count("always500") == 4  # 1 + 3 retries


def test_a_reply_without_a_score_is_unscorable_not_zero(server):
    out = _score(_judge(server), ["mute", "right"])
    assert math.isnan(out.scores[0]) and out.scores[1] == 1.0
    assert out.counters["unparsed"] == 1 and out.counters["unscorable"] >= 1


def test_a_slow_judge_is_a_timeout_for_its_item_only(server):
    out = _score(_judge(server, item_timeout_s=1.0, retries=0), ["slow", "right"])
    assert math.isnan(out.scores[0]) and out.scores[1] == 1.0 and out.counters["timeouts"] == 1


def test_a_dead_endpoint_is_an_error_for_every_item_after_its_retries():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reward = _judge(f"http://127.0.0.1:{port}/v1", retries=2)
    out = _score(reward, ["right", "half"])
    assert out.counters["errors"] == 2 and reward.requests == 6


def test_the_template_and_its_columns(server):
    from lit_grpo.rewards import JudgeReward

    with pytest.raises(ValueError, match="needs a group around the score"):
        JudgeReward(server, "m", parse="Score")
    with pytest.raises(ValueError, match="must be an http"):
        JudgeReward("localhost:8000", "m")
    reward = _judge(server, template="Rubric {rubric}\nAnswer to grade:\n{completion}\n")
    out = RewardGuard()(reward, ["right"], ["r"], rubric=["be strict"], prompts=["q"], conversations=[[]])
    assert out.scores.tolist() == [1.0]
    out = RewardGuard()(_judge(server, template="{missing}"), ["right"], ["r"], prompts=["q"], conversations=[[]])
    assert out.counters["errors"] == 1  # the item names the column it lacks
