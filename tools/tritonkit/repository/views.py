"""Repositories made from other repositories' models: a throwaway view that serves given versions under
given configs (the fleet plan's co-location and verification servers), and a folder of bare configs
laid out as a repository (``<folder>/<model>/config.pbtxt``) for overlays to carry.

The versions of a view are symlinks to the source versions: nothing is copied, nothing in the
sources is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tritonkit.config import ModelConfig, save
from tritonkit.repository.store import CONFIG_FILE

__all__ = ["link_view", "write_configs"]


def link_view(root: Path, models: Mapping[str, Path], configs: Mapping[str, ModelConfig]) -> Path:
    """``root/repo``, a new repository where each ``models[name]`` folder's numbered versions are
    linked and ``configs[name]`` is the config. ``root`` must exist; ``root/repo`` must not."""
    repo = root / "repo"
    repo.mkdir()
    for name, source in models.items():
        target = repo / name
        target.mkdir()
        for version in source.iterdir():
            if version.is_dir() and version.name.isdigit():
                (target / version.name).symlink_to(version.resolve(), target_is_directory=True)
        save(configs[name], target / CONFIG_FILE)
    return repo


def write_configs(folder: Path, configs: Mapping[str, ModelConfig]) -> dict[str, str]:
    """Each config as ``folder/<model>/config.pbtxt``; returns each model's path relative to
    ``folder.parent`` (what an overlay names)."""
    written: dict[str, str] = {}
    for model, config in configs.items():
        target = folder / model / CONFIG_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        save(config, target)
        written[model] = str(target.relative_to(folder.parent))
    return written
