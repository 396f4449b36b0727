"""A built-in demo workspace: the main job end to end, without Ascend hardware.

The files are written by ascendfix itself (not upstream code): small modules shaped like
the upstream files the bundled patches edit, so every patch finds its sites, laid out as
a verl source checkout and a torch site-packages folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEVICE = b"""import torch


def is_torch_npu_available() -> bool:
    return False


is_cuda_available = torch.cuda.is_available()
is_npu_available = is_torch_npu_available()
"""

TRAINER = b"""class RayPPOTrainer:
    def _validate(self):
        test_batch = test_batch.repeat(
            repeat_times=self.config.actor_rollout_ref.rollout.val_kwargs.n, interleave=True
        )

    def fit(self):
        gen_batch = gen_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
        batch = batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
        batch = batch.union(gen_batch_output)
"""

DAPO = b"""class RayDAPOTrainer:
    def fit(self):
        gen_batch = gen_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
        new_batch = new_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
"""

SHARDS = b'''def validate_non_overlapping_shards_metadata(shards):
    """
    Ensures none of the shards overlap with each other.
    """
    if not shards or len(shards) == 1:
        return
    raise ValueError("overlap")
'''

PLANNER = b"""class DefaultSavePlanner:
    def create_global_plan(self, global_plan, metadata):
        if not _validate_global_plan(global_plan, metadata):
            raise ValueError("Failed to validate global plan")


def _validate_global_plan(global_plan, metadata) -> bool:
    all_good = True
    return all_good
"""

FILES = {
    "verl": {
        "verl/__init__.py": b"",
        "verl/utils/device.py": DEVICE,
        "verl/trainer/ppo/ray_trainer.py": TRAINER,
        "recipe/dapo/dapo_ray_trainer.py": DAPO,
        "pyproject.toml": b"[project]\nname = 'verl'\n",
    },
    "torch": {
        "torch/__init__.py": b"",
        "torch/distributed/_shard/sharding_spec/_internals.py": SHARDS,
        "torch/distributed/checkpoint/default_planner.py": PLANNER,
    },
}


@dataclass(frozen=True)
class Workspace:
    """Where the demo's package roots are."""

    folder: Path
    verl: Path
    torch: Path

    def roots(self) -> dict[str, Path]:
        """The ``--root`` mapping for the engine."""
        return {"verl": self.verl, "torch": self.torch}


def build(folder: Path, checkout: bool = True) -> Workspace:
    """Write the demo verl checkout (or a site-packages layout) and torch folder under ``folder``."""
    workspace = Workspace(folder, folder / ("verl-checkout" if checkout else "verl-site"), folder / "site-packages")
    for package, files in FILES.items():
        root = workspace.verl if package == "verl" else workspace.torch
        for rel, data in files.items():
            if package == "verl" and not checkout and rel.startswith(("recipe/", "pyproject")):
                continue
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return workspace
