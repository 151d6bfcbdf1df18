"""BM25 over skill descriptions, with the ``bm25s`` package (``pip install 'skillstate[library]'``).

Lexical relevance: a skill scores by the query words its document shares,
weighted by how rare each word is among the skills. No model, no network
(``benchmarks/skill_library.py`` measures the index and the queries). Words are
split by :func:`~skillstate.library.retrieval.words` (``snake_case`` and
``camelCase`` apart, Chinese as character bigrams) and reduced to their stem with
PyStemmer's Snowball stemmer (``duplicated`` and ``duplicates`` both ``duplic``),
so a request matches a description in another inflection; a paraphrase that
shares no stem with a description is not found: that is what the embeddings
retriever is for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skillstate.errors import MissingExtra, UsageError
from skillstate.library.retrieval import SkillDocument, words

__all__ = ["BM25Retriever"]


def _bm25s() -> Any:
    try:
        import bm25s
    except ImportError as exc:
        raise MissingExtra("the BM25 retriever needs: pip install 'skillstate[library]'") from exc
    return bm25s


def _stemmer(language: str) -> Any:
    try:
        import Stemmer
    except ImportError as exc:
        raise MissingExtra("the BM25 retriever needs: pip install 'skillstate[library]'") from exc
    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        known = ", ".join(Stemmer.algorithms())
        raise UsageError(f"no stemmer for {language!r} (known: {known})") from None


class BM25Retriever:
    """A :class:`~skillstate.library.retrieval.Retriever` scoring skills by BM25.

    ``k1`` and ``b`` are BM25's usual parameters (term-frequency saturation and
    length normalisation); ``language`` names the Snowball stemmer (``None``: words
    are matched as they are written).
    """

    def __init__(
        self, *, k1: float = 1.5, b: float = 0.75, language: str | None = "english"
    ) -> None:
        _bm25s()  # a missing extra fails when the agent is defined, not at its first decision
        self.k1 = k1
        self.b = b
        self.language = language
        self._stem = _stemmer(language).stemWords if language is not None else list
        self._index: tuple[list[str], Any, Mapping[str, int]] | None = None
        """Names, the bm25s model (``None``: nothing to index) and its vocabulary: swapped
        whole, so a query in another thread never mixes two indexes."""

    def index(self, documents: Sequence[SkillDocument]) -> None:
        corpus = [self._stem(words(d.text)) for d in documents]
        model, vocab = None, {}
        if any(corpus):  # bm25s cannot index nothing
            model = _bm25s().BM25(k1=self.k1, b=self.b)
            model.index(corpus, show_progress=False)
            vocab = model.vocab_dict
        self._index = ([d.name for d in documents], model, vocab)

    def scores(self, query: str) -> dict[str, float]:
        index = self._index
        if index is None:
            raise UsageError("BM25Retriever.scores before index: index the skills first")
        names, model, vocab = index
        known = [w for w in self._stem(words(query)) if w in vocab]
        if model is None or not known:
            return dict.fromkeys(names, 0.0)
        raw = model.get_scores(known)
        return {name: float(value) for name, value in zip(names, raw, strict=True)}

    def __repr__(self) -> str:
        return f"BM25Retriever(k1={self.k1}, b={self.b}, language={self.language!r})"
