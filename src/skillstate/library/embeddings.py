"""Embeddings over skill descriptions, from any OpenAI-compatible ``/embeddings`` endpoint.

``pip install 'skillstate[embeddings]'`` (the official ``openai`` SDK and numpy).
OpenAI itself, or a local server that speaks its protocol (vLLM, llama.cpp's
``llama-server --embeddings``, Ollama, text-embeddings-inference) chosen by
``base_url``. Relevance is the cosine similarity of the query's embedding and
each skill document's, clipped at 0, so a paraphrase that shares no word with
a description can still be found.

Costs: indexing embeds every skill document once per process, in batches of
``batch_size`` (3,000 skills: 12 requests at the default); a document already
embedded (same text) is not sent again when the skills change. Each decision
embeds its query (one request; the last 256 queries are remembered) and scores
every skill with one matrix product. The API key never goes into ``repr``, an
error message or a log line.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from skillstate.errors import MissingExtra, ProviderError, UsageError
from skillstate.library.retrieval import SkillDocument
from skillstate.llm.openai_compat import endpoint

__all__ = ["EmbeddingRetriever"]

_QUERIES = 256
_ERROR_CHARS = 300


def _imports() -> tuple[Any, Any]:
    try:
        import numpy
        import openai
    except ImportError as exc:
        raise MissingExtra(
            "the embeddings retriever needs: pip install 'skillstate[embeddings]'"
        ) from exc
    return openai, numpy


class EmbeddingRetriever:
    """A :class:`~skillstate.library.retrieval.Retriever` scoring skills by embedding similarity.

    ``api_key`` defaults to ``OPENAI_API_KEY``; a server named by ``base_url`` (or
    ``OPENAI_BASE_URL``) gets a placeholder when none is set. ``dimensions`` is sent
    to models that can shorten their vectors (OpenAI's ``text-embedding-3-*``).
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 256,
        timeout: float = 30,
        max_retries: int = 2,
    ) -> None:
        openai, self._np = _imports()
        if batch_size < 1:
            raise UsageError("batch_size must be >= 1")
        base_url, key = endpoint(base_url, api_key, what=f"embeddings from {model}")
        self.model = model
        self.base_url = base_url
        self.dimensions = dimensions
        self.batch_size = batch_size
        self._secret = key
        self._client = openai.OpenAI(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
        self._index: tuple[list[str], Any] | None = None
        """Names and their unit vectors as rows (``None`` when there are none), swapped whole."""
        self._vectors: dict[str, Any] = {}
        """Unit vectors of documents by their text's digest: unchanged ones are not re-sent."""
        self._queries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # the query cache and the count; no request under it
        self.requests = 0
        """Embedding requests made (the benchmark and the tests count them)."""

    def __repr__(self) -> str:  # never the key
        return f"EmbeddingRetriever(model={self.model!r}, base_url={self.base_url!r})"

    def index(self, documents: Sequence[SkillDocument]) -> None:
        digests = [_digest(d.text) for d in documents]
        missing = {digest: d.text for digest, d in zip(digests, documents, strict=True)}
        todo = [(digest, text) for digest, text in missing.items() if digest not in self._vectors]
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            vectors = self._embed([text for _, text in chunk])
            self._vectors.update(zip((digest for digest, _ in chunk), vectors, strict=True))
        np = self._np
        matrix = np.stack([self._vectors[digest] for digest in digests]) if documents else None
        self._index = ([d.name for d in documents], matrix)

    def scores(self, query: str) -> dict[str, float]:
        index = self._index
        if index is None:
            raise UsageError("EmbeddingRetriever.scores before index: index the skills first")
        names, matrix = index
        if not query.strip() or matrix is None:
            return dict.fromkeys(names, 0.0)
        with self._lock:
            vector = self._queries.get(query)
            if vector is not None:
                self._queries.move_to_end(query)
        if vector is None:
            vector = self._embed([query])[0]
            with self._lock:
                self._queries[query] = vector
                if len(self._queries) > _QUERIES:
                    self._queries.popitem(last=False)
        if vector.shape[0] != matrix.shape[1]:
            raise ProviderError(
                f"embeddings from {self.model} changed size "
                f"({matrix.shape[1]} then {vector.shape[0]})"
            )
        similarity = self._np.clip(matrix @ vector, 0.0, None)
        return {name: float(s) for name, s in zip(names, similarity, strict=True)}

    def _embed(self, texts: list[str]) -> list[Any]:
        """Unit vectors of ``texts``, in order (one request)."""
        openai, np = _imports()
        options: dict[str, Any] = {"model": self.model, "input": texts}
        if self.dimensions is not None:
            options["dimensions"] = self.dimensions
        try:
            with self._lock:
                self.requests += 1
            response = self._client.embeddings.create(**options)
        except openai.OpenAIError as exc:
            message = str(exc).replace(self._secret, "***")[:_ERROR_CHARS]
            raise ProviderError(
                f"embeddings from {self.model} failed: {type(exc).__name__}: {message}"
            ) from None  # the SDK's exception may carry the request, and the key with it
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise ProviderError(
                f"embeddings from {self.model}: asked for {len(texts)} vectors, got {len(data)}"
            )
        vectors = []
        for item in data:
            vector = np.asarray(item.embedding, dtype=np.float32)
            norm = float(np.linalg.norm(vector))
            if vector.ndim != 1 or not np.isfinite(norm) or norm == 0.0:
                raise ProviderError(
                    f"embeddings from {self.model}: a vector is empty or not finite"
                )
            vectors.append(vector / norm)
        return vectors


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
