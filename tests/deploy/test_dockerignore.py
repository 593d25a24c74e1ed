""".dockerignore keeps built artifacts out of the images' build context.

Without it ``docker build ... .`` sent the whole working tree, and ``COPY model_repository`` put every
built version (weights, TensorRT plans: hundreds of MB) into both images. Each artifact pattern of
.gitignore must be ignored by .dockerignore too, and what the Dockerfile copies must not be. Matching
follows Docker's rules: patterns relative to the context root, ``*`` within one path segment, ``**`` any
number of segments, a match on a folder excludes everything under it, ``!`` re-includes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _patterns(path: Path) -> list[str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def docker_ignores(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` (relative, /-separated) out of the build context."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        regex = _regex(pattern.strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            ignored = not negate
    return ignored


def _example(pattern: str) -> str:
    """A file the .gitignore pattern ignores, nested one folder deep when the pattern is unanchored."""
    anchored = "/" in pattern.rstrip("/")
    path = pattern.strip("/").replace("**", "a/b").replace("[0-9]*", "3").replace("*", "x")
    path = path if anchored else f"sub/{path}"
    return path + "/file" if pattern.endswith("/") else path


GITIGNORE = _patterns(ROOT / ".gitignore")
DOCKERIGNORE = _patterns(ROOT / ".dockerignore")


def _tracked_folders() -> set[str]:

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {part for path in files.split() for part in path.split("/")[:-1]}


@pytest.mark.parametrize("pattern", GITIGNORE)
def test_dockerignore_covers_what_gitignore_ignores(pattern: str) -> None:
    examples = [_example(pattern).removeprefix("sub/")]
    # An unanchored folder pattern also ignores nested folders of that name, unless the name is a source
    # folder (tools/tritonkit/convert/ is a package, not setuptools' build/): the images need those.
    if pattern.strip("/") not in _tracked_folders():
        examples.append(_example(pattern))
    for example in examples:
        assert docker_ignores(example, DOCKERIGNORE), f".gitignore `{pattern}`: {example} goes into the image"


@pytest.mark.parametrize(
    "path",
    [
        "model_repository/minilm_fp32/1/model.onnx",
        "model_repository/resnet50_int8/2/model.plan",
        "model_repository/minilm_fp32/1/tokenizer.json",
        ".venv-checkov/bin/checkov",
        "reports/run/summary.json",
        "model_repository/.cache/tensorrt/timing.cache",
        "tools/tritonkit/__pycache__/cli.cpython-311.pyc",
    ],
)
def test_built_artifacts_stay_out(path: str) -> None:
    assert docker_ignores(path, DOCKERIGNORE)


def _copied() -> list[str]:
    """Files the Dockerfile's COPY lines take from the context (folders: each file in them, tracked)."""

    sources: list[str] = []
    for line in (ROOT / "k8s" / "images" / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from=") for w in words):
            sources += words[1:-1]
    tracked = subprocess.run(
        ["git", "ls-files", *sources], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked, sources
    return tracked


def test_what_the_images_copy_is_in_the_context() -> None:
    copied = _copied()
    assert "model_repository/minilm.yaml" in copied and "k8s/images/triton-requirements.txt" in copied
    left_out = [path for path in copied if docker_ignores(path, DOCKERIGNORE)]
    assert left_out == []


def test_matcher_follows_docker_rules() -> None:
    assert docker_ignores("build/x", ["build"]) and not docker_ignores("a/build/x", ["build"])
    assert docker_ignores("a/build/x", ["**/build"])
    assert docker_ignores("m/x/1/w.onnx", ["m/*/[0-9]*"]) and not docker_ignores(
        "m/x/config.pbtxt", ["m/*/[0-9]*"]
    )
    assert not docker_ignores("a.onnx", ["**/*.onnx", "!a.onnx"])
