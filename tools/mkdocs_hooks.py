"""MkDocs hooks for the documentation site (``mkdocs.yml``): the pages made from the code, and links out of docs/.

Owns what the site shows that no committed page holds: the CLI reference, rendered
from the program's own parsers (``queryloop --help`` and each command's ``--help``,
:func:`queryloop.frontends.cli.build_parser`), into ``docs/cli-reference.md`` where
its marker is; and ``docs/recovery.md`` rendered again from the shipped machines by
the function ``queryloop docs`` runs (:func:`queryloop.fsm.cli.recovery_document`),
so the site never shows a stale ladder. It also serves the repository files the pages
link to outside docs/ (a diagram, a machine, a module): each is copied under
``repo/`` in the site and the link pointed there, so a page reads the same on GitHub
and on the site. It does not write into the repository: ``queryloop docs`` does.
"""

from __future__ import annotations

import argparse
import atexit
import os
import posixpath
import re
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- cli-reference: generated at build time by tools/mkdocs_hooks.py -->"
REPO = "repo"  # where the site serves repository files the pages link to
# A link to a repository folder goes to the page that shows what it holds.
FOLDER_PAGES = {"diagrams": "graph.md#the-pictures"}
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)

_served: dict[str, str] = {}  # a repository path → its place in the site
_tree = tempfile.TemporaryDirectory(prefix="queryloop-docs-")
atexit.register(_tree.cleanup)  # removed when the build's process exits, said so (not left to the collector)


@event_priority(100)  # before mkdocstrings' own on_config builds its handler
def on_config(config: Any) -> Any:
    """Let mkdocstrings read ``queryloop`` as it installs: one package, its engine, handlers and machines inside.

    setuptools maps ``queryloop.fsm``, ``.handlers`` and ``.machines`` to their own top-level
    folders, which griffe cannot follow; a tree of symlinks lays them out as the wheel does
    (as tests/test_typing.py does for mypy), and griffe reads the sources there, importing nothing.
    """
    package = Path(_tree.name) / "queryloop"
    if not package.exists():
        package.mkdir()
        for entry in (ROOT / "queryloop").iterdir():
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        for folder in ("fsm", "handlers", "machines"):
            (package / folder).symlink_to(ROOT / folder)
    config.plugins["mkdocstrings"].config["handlers"].setdefault("python", {})["paths"] = [_tree.name]
    return config


def _outside_links(page: Path, text: str) -> list[tuple[str, Path]]:
    """The relative links of ``page`` (outside code blocks) to files outside docs/, with where they point."""
    found = []
    for match in LINK.finditer(FENCE.sub("", text)):
        target = match.group(2).split("#", 1)[0]
        if not target or "://" in target or target.startswith(("mailto:", "/")):
            continue
        path = (page.parent / target).resolve()
        if not path.is_relative_to(ROOT / "docs"):
            found.append((target, path))
    return found


def on_files(files: Any, config: Any) -> Any:
    """Add, under ``repo/``, every repository file a page links to outside docs/."""
    from mkdocs.structure.files import File

    docs = Path(config["docs_dir"])
    for page in sorted(docs.rglob("*.md")):
        for target, path in _outside_links(page, page.read_text(encoding="utf-8")):
            rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None
            if rel is None or not path.exists():
                raise PluginError(f"{page}: the link {target!r} leaves the repository or names nothing")
            if path.is_dir() or rel in _served:
                continue
            if path.suffix == ".md":
                raise PluginError(f"{page}: the link {target!r} names a Markdown file outside docs/: link its page")
            _served[rel] = f"{REPO}/{rel}"
            files.append(File.generated(config, _served[rel], abs_src_path=str(path)))
    return files


def _point_into_site(page_uri: str, page: Path, text: str) -> str:
    """``text`` with each link out of docs/ pointed at the file's copy in the site (or a folder's page)."""

    def point(match: re.Match[str]) -> str:
        target, _, anchor = match.group(2).partition("#")
        if not target or "://" in target or target.startswith(("mailto:", "/")):
            return match.group(0)
        path = (page.parent / target).resolve()
        if path.is_relative_to(ROOT / "docs"):
            return match.group(0)
        rel = path.relative_to(ROOT).as_posix()
        if path.is_dir():
            if rel not in FOLDER_PAGES:
                raise PluginError(f"{page}: the link {target!r} names a folder no page shows (add it to FOLDER_PAGES)")
            place = FOLDER_PAGES[rel]
        else:
            place = _served[rel] + (f"#{anchor}" if anchor else "")
        return match.group(1) + posixpath.relpath(place, posixpath.dirname(page_uri) or ".") + match.group(3)

    parts, last = [], 0
    for fence in FENCE.finditer(text):  # code blocks are shown as they are
        parts += [LINK.sub(point, text[last : fence.start()]), fence.group(0)]
        last = fence.end()
    return "".join([*parts, LINK.sub(point, text[last:])])


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the generated pages; point links out of docs/ into the site."""
    if page.file.src_uri == "cli-reference.md":
        markdown = markdown.replace(MARKER, cli_reference())
    elif page.file.src_uri == "recovery.md":
        markdown = recovery_reference()
    return _point_into_site(page.file.src_uri, Path(page.file.abs_src_path), markdown)


def recovery_reference() -> str:
    """``docs/recovery.md`` as ``queryloop docs`` writes it now, from the shipped machines."""
    from queryloop.fsm.cli import recovery_document
    from queryloop.machines import shipped_machines

    return recovery_document(list(shipped_machines()))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    """A parser's help at a fixed width, so the page does not depend on the terminal that built it."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help().rstrip()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def cli_reference() -> str:
    """``queryloop --help`` and every command's ``--help``, as Markdown sections."""
    from queryloop.frontends.cli import build_agent_parser, build_parser

    commands = _subcommands(build_parser())
    sections = [f"## `queryloop`\n\n```text\n{_help(build_agent_parser(tuple(commands)))}\n```"]
    for name, parser in commands.items():
        sections.append(f"## `queryloop {name}`\n\n```text\n{_help(parser)}\n```")
    return "\n\n".join(sections)
