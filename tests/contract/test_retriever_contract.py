"""The :class:`~skillstate.library.retrieval.Retriever` contract, over every implementation.

BM25 (the ``library`` extra) and embeddings from an OpenAI-compatible endpoint (the
``embeddings`` extra, here a local fake server whose vectors are hashed bags of
words). An implementation that is not installed is skipped with the extra to install.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest

from skillstate.errors import ProviderError, UsageError
from skillstate.library.retrieval import Retriever, SkillDocument
from tests.contract.fake_embeddings import FakeEmbeddings, serving

SECRET = "sk-test-0123456789abcdefghijklmnop"

DOCS = [
    SkillDocument(
        "compute_channel_agg", "Sum the sales of each channel with month-on-month ratios"
    ),
    SkillDocument("render_chart", "Draw a bar chart of a table and save it as an image"),
    SkillDocument("refund_order", "Refund a customer's order and notify the payment provider"),
    SkillDocument("parse_request", "Read the user's request: scope, dimensions and output format"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeEmbeddings]:
    with serving() as fake:
        yield fake


def _bm25() -> Retriever:
    pytest.importorskip("bm25s", reason="the library extra is not installed")
    from skillstate.library.bm25 import BM25Retriever

    return BM25Retriever()


def _embeddings(server: FakeEmbeddings) -> Retriever:
    pytest.importorskip("openai", reason="the embeddings extra is not installed")
    pytest.importorskip("numpy", reason="the embeddings extra is not installed")
    from skillstate.library.embeddings import EmbeddingRetriever

    return EmbeddingRetriever("fake-embed", base_url=server.base_url, api_key=SECRET, max_retries=0)


@pytest.fixture(params=["bm25", "embeddings"])
def make(request: pytest.FixtureRequest, server: FakeEmbeddings) -> Callable[[], Retriever]:
    """Builds a fresh retriever of one implementation."""
    if request.param == "bm25":
        return _bm25
    return lambda: _embeddings(server)


def test_it_is_a_retriever(make: Callable[[], Retriever]) -> None:
    assert isinstance(make(), Retriever)


def test_scoring_before_indexing_is_a_usage_error(make: Callable[[], Retriever]) -> None:
    with pytest.raises(UsageError, match="index"):
        make().scores("sales by channel")


def test_every_indexed_skill_gets_a_finite_non_negative_score(
    make: Callable[[], Retriever],
) -> None:
    retriever = make()
    retriever.index(DOCS)
    scores = retriever.scores("refund the order of this customer")
    assert set(scores) == {d.name for d in DOCS}
    assert all(math.isfinite(s) and s >= 0 for s in scores.values())


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("sum the sales by channel", "compute_channel_agg"),
        ("draw a chart as an image", "render_chart"),
        ("the customer wants a refund for the order", "refund_order"),
    ],
)
def test_the_skill_that_shares_the_query_words_ranks_first(
    make: Callable[[], Retriever], query: str, expected: str
) -> None:
    retriever = make()
    retriever.index(DOCS)
    scores = retriever.scores(query)
    assert max(scores, key=lambda name: scores[name]) == expected
    assert scores[expected] > 0


def test_an_empty_query_scores_every_skill_zero(make: Callable[[], Retriever]) -> None:
    retriever = make()
    retriever.index(DOCS)
    assert retriever.scores("") == dict.fromkeys((d.name for d in DOCS), 0.0)


def test_scores_are_deterministic(make: Callable[[], Retriever]) -> None:
    retriever = make()
    retriever.index(DOCS)
    assert retriever.scores("chart of the sales") == retriever.scores("chart of the sales")


def test_indexing_again_replaces_the_skills(make: Callable[[], Retriever]) -> None:
    retriever = make()
    retriever.index(DOCS)
    retriever.index(DOCS[:2])
    assert set(retriever.scores("refund the order")) == {"compute_channel_agg", "render_chart"}
    retriever.index([])
    assert retriever.scores("refund the order") == {}


# ---------------------------------------------------------------- embeddings only


def test_embeddings_send_each_document_once_in_batches(server: FakeEmbeddings) -> None:
    """Indexing batches the documents; re-indexing sends only the new ones; a repeated
    query is not embedded again."""
    retriever = _embeddings(server)
    retriever.batch_size = 3  # type: ignore[attr-defined]
    before = len(server.requests)
    retriever.index(DOCS)
    sent = server.requests[before:]
    assert [len(r["input"]) for r in sent] == [3, 1]
    assert sent[0]["model"] == "fake-embed"
    retriever.index([*DOCS, SkillDocument("archive", "Archive the finished report")])
    assert server.requests[-1]["input"] == ["Archive the finished report"]
    count = len(server.requests)
    retriever.scores("sales per channel")
    retriever.scores("sales per channel")
    assert len(server.requests) == count + 1


def test_embeddings_errors_are_one_line_without_the_key(server: FakeEmbeddings) -> None:
    retriever = _embeddings(server)
    server.fail_with = (500, f"upstream exploded (key {SECRET})")
    try:
        with pytest.raises(ProviderError) as caught:
            retriever.index(DOCS)
    finally:
        server.fail_with = None
    message = str(caught.value)
    assert "\n" not in message
    assert SECRET not in message
    assert "upstream exploded" in message
    assert caught.value.__cause__ is None
    assert SECRET not in repr(retriever)
    assert server.headers[-1]["authorization"] == f"Bearer {SECRET}"


def test_embeddings_without_a_key_or_server_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai", reason="the embeddings extra is not installed")
    from skillstate.library.embeddings import EmbeddingRetriever

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ProviderError, match="API key"):
        EmbeddingRetriever()
