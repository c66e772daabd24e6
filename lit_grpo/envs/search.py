"""A search agent's environment: a BM25 ``search(query)`` tool over a small document collection.

The collection is JSON lines with ``id``, ``title`` and ``text`` per document; lit-grpo ships one of invented
facts (``assets/search_corpus/documents.jsonl``, written by ``scripts/make_search_corpus.py``), whose
questions (:class:`~lit_grpo.data.SearchQuestions`) are answerable only from it. Retrieval is `bm25s
<https://github.com/xhluca/bm25s>`_ (the ``agents`` extra: ``pip install 'lit-grpo[agents]'``). A query is
only ever split into words and looked up: nothing in it is run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Literal

from lit_grpo.checks import require
from lit_grpo.envs.isolation import StartMethod
from lit_grpo.envs.tools import Isolation, ToolEnvironment

#: the optional extra this module's classes need (lit_grpo.extras)
EXTRA = "agents"
INSTALL_HINT = "SearchEnvironment needs bm25s: pip install 'lit-grpo[agents]' (or pip install bm25s)"
SYSTEM_PROMPT = ("Answer the question using the search tool to look up facts. "
                 "When you know the answer, reply with the answer only.")


def bm25s_module():
    """``bm25s`` with its numpy backend: imported while ``numba`` is blocked (unless numba is loaded already).

    bm25s imports numba when it is installed, and the numba/llvmlite objects that import leaves in
    ``sys.modules`` make the vLLM engine fail to start afterwards (vLLM 0.32 scans every loaded module at
    start-up and trips on them: "'_lib_fn_wrapper' object has no attribute 'get'"). The numpy backend is
    plenty for a few thousand documents.
    """
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    if importlib.util.find_spec("bm25s") is None:
        raise ImportError(INSTALL_HINT)
    block = "numba" not in sys.modules
    if block:
        sys.modules["numba"] = None  # type: ignore[assignment]  # `import numba` raises ImportError meanwhile
    try:
        import bm25s
    finally:
        if block:
            del sys.modules["numba"]
    return bm25s


def shipped_corpus() -> Path:
    """The document collection that ships with lit-grpo."""
    from lit_grpo.resources import asset

    return asset("search_corpus") / "documents.jsonl"


def read_documents(path: str | Path) -> list[dict[str, str]]:
    """The documents of a JSON-lines file, each checked to hold text ``id``, ``title`` and ``text``."""
    path = Path(path)
    require(path.is_file(), f"SearchEnvironment: corpus={str(path)!r}: no such file")
    documents = []
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        doc = json.loads(line)
        require(isinstance(doc, dict) and all(isinstance(doc.get(k), str) for k in ("id", "title", "text")),
                f"{path}:{line_no}: a document is a JSON object with text fields id, title and text")
        documents.append(doc)
    require(bool(documents), f"{path} holds no documents")
    return documents


class SearchEnvironment(ToolEnvironment):
    """Question answering with a ``search`` tool over a document collection (plus any further ``tools``).

    Args:
        corpus: JSON-lines file of documents (``id``, ``title``, ``text``); null: the shipped collection.
        k: Documents returned per search.
        max_doc_chars: Characters of each document shown in a result.
        tools: Further tools besides ``search``.
        system_prompt: The system message (the tool descriptions are added where the template has no tool
            format).
        call_format: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
        call_tags: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
        timeout_s: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
        max_calls_per_turn: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
        max_result_chars: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
        isolation: See :class:`~lit_grpo.envs.tools.ToolEnvironment` (isolated, each worker builds its own
            index on its first search).
        workers: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
        memory_mb: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
        start_method: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
        pass_env, log_path, log_bytes, calls_per_worker: See :class:`~lit_grpo.envs.tools.ToolEnvironment`.
    """

    def __init__(self, corpus: str | None = None, k: int = 3, max_doc_chars: int = 400,
                 tools: list | None = None, system_prompt: str | None = SYSTEM_PROMPT,
                 call_format: Literal["auto", "tags", "json"] = "auto",
                 call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>"), timeout_s: float = 5.0,
                 max_calls_per_turn: int = 4, max_result_chars: int = 2000, isolation: Isolation = "process",
                 workers: int = 4, memory_mb: int | None = 1024,
                 start_method: StartMethod = "forkserver", pass_env: list[str] | None = None,
                 log_path: str | None = None, log_bytes: int = 2**20,
                 calls_per_worker: int | None = None) -> None:
        require(k >= 1, f"SearchEnvironment: k={k} must be >= 1")
        require(max_doc_chars >= 1, f"SearchEnvironment: max_doc_chars={max_doc_chars} must be >= 1")
        if importlib.util.find_spec("bm25s") is None:
            raise ImportError(INSTALL_HINT)
        self.corpus, self.k, self.max_doc_chars = corpus, k, max_doc_chars
        self._index: Any = None
        self._documents: list[dict[str, str]] = []
        super().__init__(tools=tools, system_prompt=system_prompt, call_format=call_format,
                         call_tags=call_tags, timeout_s=timeout_s, max_calls_per_turn=max_calls_per_turn,
                         max_result_chars=max_result_chars, isolation=isolation, workers=workers,
                         memory_mb=memory_mb, start_method=start_method, pass_env=pass_env,
                         log_path=log_path, log_bytes=log_bytes, calls_per_worker=calls_per_worker)

    def reset(self, record):
        self._load()  # a bad collection is an error here, not a tool error in every episode
        return super().reset(record)

    def own_tools(self) -> list:
        return [self.search]

    def search(self, query: str) -> str:
        """Search the document collection and return the best matching documents.

        Args:
            query: Words to look for, e.g. a name and what you want to know about it.
        """
        bm25s = bm25s_module()
        index = self._load()
        words = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        if not words:
            return f"no document matches {query!r}: use names and other distinctive words"
        rows, scores = index.retrieve([words], k=min(self.k, len(self._documents)), show_progress=False)
        hits = [(int(i), float(s)) for i, s in zip(rows[0], scores[0], strict=True) if s > 0]
        if not hits:
            return f"no document matches {query!r}"
        return "\n".join(self._show(self._documents[i]) for i, _ in hits)

    def _show(self, doc: dict[str, str]) -> str:
        text = doc["text"]
        if len(text) > self.max_doc_chars:
            text = text[: self.max_doc_chars] + "..."
        return f"[{doc['id']}] {doc['title']}: {text}"

    def _load(self):
        """The BM25 index, built on first use (constructors stay cheap)."""
        if self._index is None:
            bm25s = bm25s_module()
            self._documents = read_documents(self.corpus or shipped_corpus())
            texts = [f"{d['title']}. {d['text']}" for d in self._documents]
            index = bm25s.BM25()
            index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
            self._index = index
        return self._index

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_index": None, "_documents": []}  # rebuilt where it is used
