"""Every relative link in the repository's Markdown files leads to a file or folder that exists in it.

Documents used to point at files outside the repository (a sibling folder of notes) that readers of the
repository cannot open. Checked: inline links and images ``[text](target)`` and reference definitions
``[id]: target`` in every tracked ``*.md``, outside code blocks and code spans; external links
(``scheme:``), mail and pure anchors are skipped, ``#fragment`` and ``?query`` are cut off.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)


def _markdown_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "*.md", "**/*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return sorted({ROOT / line for line in out.stdout.split()})


def links(text: str) -> list[str]:
    """The relative link targets of a Markdown text (no fragment, no query)."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = [m.group(1) for m in _INLINE.finditer(text)] + [m.group(1) for m in _REFERENCE.finditer(text)]
    relative = []
    for target in targets:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith(("#", "//")):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path:
            relative.append(path)
    return relative


@pytest.mark.parametrize("doc", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    broken = []
    for target in links(doc.read_text(encoding="utf-8")):
        path = (ROOT / target.lstrip("/")) if target.startswith("/") else (doc.parent / target)
        resolved = path.resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(target)
    assert broken == [], f"{doc.relative_to(ROOT)} links to files not in the repository: {broken}"


def test_link_extraction() -> None:
    text = (
        '[a](docs/deploy.md#x) ![img](k8s/x.png "t") [web](https://example.com) [anchor](#top)\n'
        "`[code](nope.md)`\n```\n[fenced](nope2.md)\n```\n[ref]: ../outside/notes.md\n"
    )
    assert links(text) == ["docs/deploy.md", "k8s/x.png", "../outside/notes.md"]


# Assembled from parts so that this file does not match its own pattern.
_OUTSIDE_DOCS = re.compile("shared" + r"/docs|\b(?:ENVIRONMENT|REFERENCE|STYLE)" + r"\.md\b")


def test_docs_and_manifests_cite_no_document_outside_the_repository() -> None:
    # The documents of the project's workspace are not in the repository: state the fact instead.
    out = subprocess.run(
        ["git", "ls-files", "*.md", "k8s"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    hits = [
        f"{name}:{number}"
        for name in out.stdout.split()
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
        if _OUTSIDE_DOCS.search(line)
    ]
    assert hits == []
