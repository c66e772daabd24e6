"""The search agent: the shipped collection, BM25 search as a tool, questions answerable from the documents."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

# not importorskip: importing bm25s directly loads numba, after which vLLM cannot start in this process
# (lit_grpo.envs.search.bm25s_module imports it without numba)
if importlib.util.find_spec("bm25s") is None:
    pytest.skip("the search tool needs bm25s: pip install 'lit-grpo[agents]'", allow_module_level=True)

from lit_grpo.data import SearchQuestions  # noqa: E402
from lit_grpo.envs import run_episodes  # noqa: E402
from lit_grpo.envs.search import SearchEnvironment, shipped_corpus  # noqa: E402
from lit_grpo.types import SamplingParams  # noqa: E402
from tests.envs.scripted import PLAIN_TEMPLATE, ScriptedEngine, chat_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env():
    return SearchEnvironment()


def test_shipped_files_are_what_the_script_writes():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_search_corpus.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_questions_split_by_document_and_are_answerable_from_it():
    source = SearchQuestions(extra_fields=["doc_id"])
    splits = {s: source.load(s) for s in ("train", "val", "test")}
    assert [len(v) for v in splits.values()] == [840, 100, 500]
    docs = {s: {r["columns"]["doc_id"] for r in rows} for s, rows in splits.items()}
    assert not (docs["train"] & docs["test"]) and not (docs["train"] & docs["val"]) and not (docs["val"] & docs["test"])
    texts = {d["id"]: d["text"] for d in map(json.loads, shipped_corpus().read_text().splitlines())}
    assert len(texts) == 360
    for rows in splits.values():
        for r in rows:
            assert r["reference"] in texts[r["columns"]["doc_id"]]


def test_search_finds_the_document_of_a_question(env):
    rows = SearchQuestions(extra_fields=["doc_id"]).load("test")[:40]
    found = 0
    for r in rows:
        result = env.search(r["prompt"])
        found += f"[{r['columns']['doc_id']}]" in result and r["reference"] in result
    # the question names its entity, an invented word found in one document only: BM25 ranks it in the top k
    assert found == len(rows)


@pytest.mark.parametrize("query", ["__import__('os').system('touch /tmp/pwned_by_search')", "open('/etc/passwd')",
                                   "lambda: 1", "9 ** 9 ** 9", "", "the of a"])
def test_code_like_queries_are_only_words(env, query, tmp_path):
    result = env.search(query)
    assert isinstance(result, str) and not Path("/tmp/pwned_by_search").exists()
    assert result.startswith("no document matches") or result.startswith("[doc-")


def test_search_episode_with_a_scripted_policy(env):
    record = SearchQuestions(extra_fields=["doc_id"]).load("test")[0]
    call = "<tool_call>" + json.dumps({"name": "search", "arguments": {"query": record["prompt"]}}) + "</tool_call>"

    def respond(prompt, k):
        if "<tool_response>" not in prompt:
            return call + "<eos>"
        return record["reference"] + "<eos>"

    tok = chat_tokenizer(PLAIN_TEMPLATE)
    r = run_episodes(ScriptedEngine(tok, respond), tok, [record], env, n=2, sampling=SamplingParams(max_new_tokens=400),
                     max_turns=3)
    assert r.texts == [record["reference"]] * 2 and all(ep.done and ep.tool_calls == 1 for ep in r.episodes)
    assert record["reference"] in r.episodes[0].messages[-2]["content"]  # the search result
    assert r.episodes[0].messages[0]["role"] == "system"


def test_bad_corpus_is_a_clear_error(tmp_path):
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"id": "1", "text": "no title"}\n')
    env = SearchEnvironment(corpus=str(bad))
    with pytest.raises(ValueError, match="id, title and text"):
        env.reset({"prompt": "Q", "reference": "", "id": "0", "columns": {}})
    with pytest.raises(ValueError, match="no such file"):
        SearchEnvironment(corpus=str(tmp_path / "missing.jsonl")).search("x")


def test_bm25s_is_imported_without_numba():
    # numba's llvmlite objects in sys.modules make vLLM 0.32 fail to start in the same process
    code = ("import sys; from lit_grpo.envs.search import bm25s_module; bm25s_module(); "
            "loaded = [m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')]; "
            "assert not loaded, loaded; import bm25s; assert bm25s.BM25().backend == 'numpy'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_isolation_options_reach_the_search_tools_workers():
    env = SearchEnvironment(pass_env=["HF_TOKEN"], log_bytes=4096, calls_per_worker=1)
    assert (env.pass_env, env.log_bytes, env.calls_per_worker) == (["HF_TOKEN"], 4096, 1)
    with pytest.raises(ValueError, match="calls_per_worker"):
        SearchEnvironment(calls_per_worker=0)
