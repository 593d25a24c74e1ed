"""What every checklist module shares: the problem collector (the fleet file's checks use it too), and the Triton server as the checks see it."""

from __future__ import annotations

import dataclasses

from tritonkit.deploy.objects import Obj, pod_labels, pod_spec, ref

__all__ = ["Problems", "Server"]


class Problems:
    """Problem lines of one source (an overlay, a fleet file), each ``<source>: <where>: <expected versus found>``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.lines.append(f"{self.source}: {where}: {message}")

    def expect(self, condition: bool, where: str, message: str) -> bool:
        """Record ``message`` unless ``condition`` holds; returns ``condition`` so callers can go on or stop."""
        if not condition:
            self.add(where, message)
        return condition


@dataclasses.dataclass
class Server:
    """The Triton Deployment, its server container, environment and parsed flags."""

    deployment: Obj
    container: Obj
    env: dict[str, str]
    flags: dict[str, list[str]]

    @property
    def pod(self) -> Obj:
        return pod_spec(self.deployment)

    @property
    def labels(self) -> dict[str, str]:
        return pod_labels(self.deployment)

    @property
    def where(self) -> str:
        return f"{ref(self.deployment)} container `{self.container.get('name')}`"
