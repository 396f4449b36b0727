"""A small fake stack of our own, shaped like the upstream files the bundled patches edit.

The files are written by us (not upstream code): just enough structure for the real
patch definitions to find their sites, so engine behaviour can be tested in milliseconds.
Tests against the real upstream files live in test_upstream.py.
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
PATCHED = [
    ("verl", "verl/utils/device.py"),
    ("verl", "verl/trainer/ppo/ray_trainer.py"),
    ("verl", "recipe/dapo/dapo_ray_trainer.py"),
    ("torch", "torch/distributed/_shard/sharding_spec/_internals.py"),
    ("torch", "torch/distributed/checkpoint/default_planner.py"),
]


@dataclass
class Stack:
    verl: Path
    torch: Path

    def root(self, package: str) -> Path:
        return {"verl": self.verl, "torch": self.torch}[package]

    def file(self, package: str, rel: str) -> Path:
        return self.root(package) / rel

    def snapshot(self) -> dict[tuple[str, str], bytes]:
        return {(pkg, rel): self.file(pkg, rel).read_bytes() for pkg, rel in PATCHED if self.file(pkg, rel).exists()}

    def roots(self) -> dict[str, Path]:
        return {"verl": self.verl, "torch": self.torch}

    def root_args(self) -> list[str]:
        return ["--root", f"verl={self.verl}", "--root", f"torch={self.torch}"]


def make_stack(base: Path, checkout: bool = True) -> Stack:
    """Write the fake verl checkout (or site-packages layout) and torch site-packages under ``base``."""
    stack = Stack(base / ("verl-checkout" if checkout else "verl-site"), base / "site-packages")
    for package, files in FILES.items():
        for rel, data in files.items():
            if package == "verl" and not checkout and rel.startswith(("recipe/", "pyproject")):
                continue
            path = stack.root(package) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return stack
