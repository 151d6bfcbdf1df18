"""The documentation site (mkdocs.yml) builds without a warning, and its links resolve.

``mkdocs build --strict`` builds the site into a temporary folder once for the whole
module (a few seconds); the tests then read the built HTML: the API reference pages
document every public name, and every relative link in every page (``href``/``src``
to a file of the site, with its ``#anchor``) lands on a file and an ``id`` that
exist. The build needs the ``docs`` extra (``pip install -e '.[docs]'``): without it
the tests skip, unless ``SKILLSTATE_REQUIRE_SERVICES=1`` (CI), where they fail.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "mkdocs.yml"
REFERENCE = ROOT / "docs" / "reference"
BUILD_TIMEOUT = 300  # seconds; the build takes a few
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PROBLEM = re.compile(r"^\s*(WARNING|ERROR|CRITICAL)\b")
IDENTIFIER_BLOCK = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
# The docs extra: importable module -> the package that provides it.
DOCS_TOOLS = {
    "mkdocs": "mkdocs",
    "material": "mkdocs-material",
    "mkdocstrings": "mkdocstrings",
    "mkdocstrings_handlers.python": "mkdocstrings-python",
}
# Names each reference page must document (as an anchor of the page).
EXPECTED = {
    "agent.html": ["Agent", "load_agent"],
    "runtime.html": ["Runtime", "RunResult", "StepReport", "rollback_task", "fork_task"],
    "actions.html": [
        "Action",
        "CallSkill",
        "AskUser",
        "WaitUntil",
        "WaitFor",
        "Finish",
        "Fail",
        "parse_action",
    ],
    "policies.html": ["Policy", "ScriptedPolicy"],
    "skills.html": ["SkillRegistry", "Skill", "SkillContext", "Outcome"],
    "state.html": ["AgentState", "StateMachine", "Event", "Verdict", "migration"],
    "views.html": ["View", "render_view"],
    "errors.html": ["SkillstateError", "StaleState", "UsageError"],
    "stores.html": ["Store", "Checkpoint", "open_store", "SQLiteStore"],
    "providers.html": ["Provider", "open_provider", "OpenAIProvider", "ReplayProvider"],
    "limits.html": ["Limits"],
    "config.html": ["Config", "load_config"],
    "redaction.html": ["RedactionPolicy", "Redactor", "Sensitive"],
    "effects.html": ["once", "append_once", "write_once", "idempotent_request", "read_back"],
}


def docs_tools_missing() -> str | None:
    """Which package of the ``docs`` extra is not installed, if any."""
    for module, package in DOCS_TOOLS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return package
    return None


@dataclass
class Page:
    """What the link check needs from one built HTML file."""

    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)


class _PageParser(HTMLParser):
    def __init__(self, page: Page) -> None:
        super().__init__(convert_charrefs=True)
        self.page = page

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (name == "name" and tag == "a"):
                self.page.ids.add(value)
            elif name in {"href", "src"} and tag != "base":
                self.page.links.append(value)


@dataclass
class Site:
    root: Path
    output: str
    returncode: int
    pages: dict[Path, Page] = field(default_factory=dict)

    def page(self, path: Path) -> Page:
        if path not in self.pages:
            page = Page()
            _PageParser(page).feed(path.read_text(encoding="utf-8"))
            self.pages[path] = page
        return self.pages[path]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The site, built once with ``mkdocs build --strict`` by this interpreter."""
    missing = docs_tools_missing()
    if missing is not None:
        message = f"{missing} is not installed: pip install -e '.[docs]' to build the docs"
        if os.environ.get("SKILLSTATE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{message} (SKILLSTATE_REQUIRE_SERVICES=1)")
        pytest.skip(message)
    out = tmp_path_factory.mktemp("site").resolve()
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONWARNINGS="")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean"]
    proc = subprocess.run(
        [*command, "--config-file", str(CONFIG), "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    output = ANSI.sub("", proc.stdout + proc.stderr)
    return Site(root=out, output=output, returncode=proc.returncode)


@pytest.fixture(scope="module")
def built(site: Site) -> Site:
    """The site, for the tests that read it: only once the build has succeeded."""
    if site.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{site.output}")
    return site


def test_build_is_clean(site: Site) -> None:
    """Exit 0 and not one warning: strict mode turns each into an error."""
    problems = [line for line in site.output.splitlines() if PROBLEM.match(line)]
    assert site.returncode == 0, site.output
    assert not problems, "\n".join(problems)


def test_every_reference_page_is_built(built: Site) -> None:
    """Each docs/reference/*.md becomes a page; each page documents its names."""
    sources = sorted(p.stem for p in REFERENCE.glob("*.md"))
    assert sources, "docs/reference/ has no pages"
    for stem in sources:
        assert (built.root / "reference" / f"{stem}.html").is_file(), stem
    for name, expected in EXPECTED.items():
        path = built.root / "reference" / name
        ids = built.page(path).ids
        text = path.read_text(encoding="utf-8")
        for symbol in expected:
            anchors = [i for i in ids if i.startswith("skillstate.") and i.endswith(f".{symbol}")]
            assert anchors, f"reference/{name} has no anchor for {symbol}"
            assert symbol in text


def test_top_level_exports_are_documented(built: Site) -> None:
    """Every name ``skillstate`` exports has an entry where it is defined."""
    exported = module_exports(ROOT / "src" / "skillstate" / "__init__.py")
    ids = reference_ids(built)
    missing = [
        name
        for name in exported
        if not name.startswith("__") and not any(i.endswith(f".{name}") for i in ids)
    ]
    assert not missing, f"not in the API reference: {missing}"


def test_documented_modules_are_complete(built: Site) -> None:
    """A module shown on a reference page documents every name in its ``__all__``.

    A name the module defines gets an entry under the module's path; a name it
    re-exports gets one wherever it is defined. A page that lists ``members:``
    explicitly must list a new public name too.
    """
    ids = reference_ids(built)
    missing: list[str] = []
    for page in sorted(REFERENCE.glob("*.md")):
        for module in IDENTIFIER_BLOCK.findall(page.read_text(encoding="utf-8")):
            source = module_source(module)
            if source is None:  # a class or function block, not a module
                continue
            defined = module_definitions(source)
            for name in module_exports(source):
                if name.startswith("__"):
                    continue
                if name in defined:
                    found = f"{module}.{name}" in ids
                else:
                    found = any(i.endswith(f".{name}") for i in ids)
                if not found:
                    missing.append(f"{module}.{name} ({page.relative_to(ROOT)})")
    assert not missing, f"public names missing from the API reference: {missing}"


def test_internal_links_resolve(built: Site) -> None:
    """Every relative href/src lands on a built file, and its #anchor on an id there."""
    broken: list[str] = []
    html_files = sorted(built.root.rglob("*.html"))
    assert len(html_files) > 10
    for path in html_files:
        for link in built.page(path).links:
            problem = check_link(built, path, link)
            if problem:
                broken.append(f"{path.relative_to(built.root)}: {link!r}: {problem}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_links_resolve(built: Site) -> None:
    """The README's relative links name files of the repository; into docs/, anchors too."""
    readme = ROOT / "README.md"
    broken: list[str] = []
    for link in MARKDOWN_LINK.findall(readme.read_text(encoding="utf-8")):
        parts = urlsplit(link)
        if parts.scheme or parts.netloc:
            continue
        target = ROOT / unquote(parts.path) if parts.path else readme
        if not target.exists():
            broken.append(f"{link}: no such file")
            continue
        docs = ROOT / "docs"
        if parts.fragment and target.suffix == ".md" and target.is_relative_to(docs):
            page = built.root / target.relative_to(docs).with_suffix(".html")
            if parts.fragment not in built.page(page).ids:
                broken.append(f"{link}: no id {parts.fragment!r} in the built page")
    assert not broken, "broken README links:\n" + "\n".join(broken)


def check_link(site: Site, page: Path, link: str) -> str | None:
    """Why a link from ``page`` is broken, or None (external links are not checked)."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("/", "mailto:", "data:")):
        return None
    path, anchor = unquote(parts.path), unquote(parts.fragment)
    target = page if not path else (page.parent / path).resolve()
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    if not target.is_relative_to(site.root):
        return "outside the site"
    if not target.is_file():
        return "no such file"
    if anchor and target.suffix == ".html" and anchor not in site.page(target).ids:
        return f"no id {anchor!r} in {target.name}"
    return None


def reference_ids(site: Site) -> set[str]:
    ids: set[str] = set()
    for path in (site.root / "reference").glob("*.html"):
        ids |= site.page(path).ids
    return ids


def module_source(module: str) -> Path | None:
    base = ROOT / "src" / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_exports(source: Path) -> list[str]:
    """The literal ``__all__`` of a module (empty when it has none)."""
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                return [str(name) for name in ast.literal_eval(node.value)]
    return []


def module_definitions(source: Path) -> set[str]:
    """Names a module binds at its top level other than by importing them."""
    names: set[str] = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names
