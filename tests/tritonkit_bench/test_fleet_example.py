"""The fleet plan's worked example: its MLP builds and serves, and the fleet file it writes is valid."""

from __future__ import annotations

from pathlib import Path

from tritonkit.config import load
from tritonkit.fleet.spec import load_fleet
from tritonkit_bench.fleet import CPU_MODELS, build_mlp, fleet_file


def test_the_example_writes_a_valid_fleet_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    build_mlp(repo)
    assert load(repo / "mlp").max_batch_size == 64 and (repo / "mlp" / "1").is_dir()
    models = {"mlp": CPU_MODELS["mlp"]}
    fleet = load_fleet(fleet_file({"mlp": repo}, tmp_path, models, "cpu", {"cpu": 0.1}))
    assert fleet.model("mlp").rate == CPU_MODELS["mlp"].rate and fleet.gpu("cpu").price_per_hour == 0.1
    assert fleet.model("mlp").tune["cpu"] == (tmp_path / "tune" / "mlp").resolve()
