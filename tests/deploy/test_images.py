"""The images the overlays run, read statically (no Docker here): k8s/images/Dockerfile and the Triton
image's pinned Python packages, checked against what the python-backend models import.

NVIDIA's ``tritonserver:24.10-py3`` ships neither ``tokenizers`` nor ``onnxruntime``, and the pods' root
filesystem is read-only: the text ensemble's tokenizer model could not start there. The overlays now run
the project's image (target ``triton``), built FROM the pinned NVIDIA image with those packages pinned.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import yaml

from tritonkit import deploy
from tritonkit.backends import runners
from tritonkit.deploy.checks.server import TRITON_UID

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "k8s" / "images" / "Dockerfile"
REQUIREMENTS = ROOT / "k8s" / "images" / "triton-requirements.txt"
#: What NVIDIA's image provides to python-backend models without any install.
BASE_PROVIDES = frozenset({"numpy", "triton_python_backend_utils"})


def _stages(text: str) -> dict[str, list[tuple[str, str]]]:
    """Instructions per stage name: ``{stage: [(INSTRUCTION, arguments), ...]}``, continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            match = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", args.strip(), flags=re.IGNORECASE)
            assert match, f"every stage is named: {line}"
            current = stages.setdefault(match.group(2), [])
        current.append((instruction.upper(), args.strip()))
    return stages


def _pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rpartition(":")[2] not in ("", "latest")


def _requirements() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in REQUIREMENTS.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][A-Za-z0-9.+-]*)", line)
            assert match, f"{REQUIREMENTS.name}: `{line}` is not pinned as name==version"
            pins[match.group(1).lower().replace("-", "_")] = match.group(2)
    return pins


def test_every_stage_is_pinned_and_runs_as_non_root() -> None:
    stages = _stages(DOCKERFILE.read_text())
    assert {"triton", "tools", "engine-builder"} <= set(stages)
    for name, instructions in stages.items():
        base = instructions[0][1].split()[0]
        assert _pinned(base), f"stage {name}: FROM {base} is not pinned by tag or digest"
        users = [args for instruction, args in instructions if instruction == "USER"]
        assert users, f"stage {name}: no USER"
        uid = users[-1].split(":")[0]
        assert uid.isdigit() and int(uid) > 0, f"stage {name}: runs as {users[-1]}"
        for instruction, args in instructions:
            if instruction == "COPY" and "--from=" in args:
                assert _pinned(args.split("--from=")[1].split()[0]), f"stage {name}: {args}"


def test_triton_stage_is_the_pinned_nvidia_image_with_the_pods_uid() -> None:
    instructions = _stages(DOCKERFILE.read_text())["triton"]
    base = instructions[0][1].split()[0]
    kustomization = yaml.safe_load((ROOT / "k8s" / "base" / "kustomization.yaml").read_text())
    tag = next(i["newTag"] for i in kustomization["images"] if i["name"] == deploy.TRITON_IMAGE)
    assert base == f"{deploy.TRITON_IMAGE}:{tag}"  # the release the base overlay names (server 2.51)
    assert [a for i, a in instructions if i == "USER"][-1] == f"{TRITON_UID}:{TRITON_UID}"
    runs = " ".join(a for i, a in instructions if i == "RUN")
    assert f"-r /tmp/{REQUIREMENTS.name}" in runs
    assert any(i == "COPY" and a.startswith(f"k8s/images/{REQUIREMENTS.name} ") for i, a in instructions)


@pytest.mark.parametrize("overlay", deploy.SERVER_OVERLAYS)
def test_server_overlays_run_the_project_triton_image(
    rendered_all: dict[str, list[dict]], overlay: str
) -> None:
    for obj in rendered_all[overlay]:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == "triton":
            images = {c["image"] for c in obj["spec"]["template"]["spec"]["containers"]}
            assert all(deploy.arguments.is_project_triton_image(i) for i in images), images


def _required_imports(path: Path, *, numpy_major: int) -> set[str]:
    """Top-level names of every import in ``path`` (function-level too), except optional ones: those
    inside a ``try`` whose handler catches ImportError, and with NumPy 1 those under an
    ``if _NUMPY_MAJOR >= 2`` branch (the runners' DLPack path through torch)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    optional: set[int] = set()
    for node in ast.walk(tree):
        if (
            numpy_major < 2
            and isinstance(node, ast.If)
            and any(isinstance(n, ast.Name) and n.id == "_NUMPY_MAJOR" for n in ast.walk(node.test))
        ):
            optional.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
            for h in node.handlers
        ):
            optional.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__"}


def _model_files() -> list[Path]:
    """The python-backend runners (copied into versions as model.py) and any committed model.py."""
    runner_dir = Path(runners.__file__).parent
    # The GPU runners (torch CUDA graphs, ONNX Runtime CUDA) serve on the embedded server of a GPU host; in
    # NVIDIA's image the same models run on its TensorRT/ONNX Runtime backends, so the image need not carry torch.
    embedded_only = {"__init__.py", "torch_runner.py", "onnx_cuda_runner.py", "gpu_requests.py"}
    files = [p for p in sorted(runner_dir.glob("*.py")) if p.name not in embedded_only]
    return files + sorted((ROOT / "model_repository").glob("*/*/model.py"))


def test_triton_image_installs_what_the_python_models_import() -> None:
    pins = _requirements()
    files = _model_files()
    assert {p.name for p in files} >= {"text_embedding.py", "onnx_runner.py"}
    numpy_major = int(pins["numpy"].split(".")[0])
    needed = {name: path.name for path in files for name in _required_imports(path, numpy_major=numpy_major)}
    assert {"tokenizers", "onnxruntime"} <= set(needed)  # the text ensemble's tokenizer model
    missing = sorted(f"{n} ({f})" for n, f in needed.items() if n not in pins and n not in BASE_PROVIDES)
    assert missing == [], f"imported by the python-backend models but not in {REQUIREMENTS.name}: {missing}"


def test_import_scan_sees_function_level_imports(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text(
        "import json\nimport numpy as np\n"
        "def initialize():\n    from tokenizers import Tokenizer\n    import sentencepiece.x\n"
        "    try:\n        import torch\n    except ImportError:\n        torch = None\n"
        "    if _NUMPY_MAJOR >= 2:\n        import cupy\n"
    )
    assert _required_imports(model, numpy_major=1) == {"numpy", "tokenizers", "sentencepiece"}
    assert _required_imports(model, numpy_major=2) == {"numpy", "tokenizers", "sentencepiece", "cupy"}
