"""Real conversions for ``ckpt verify``'s tests: a tiny random Hugging Face model, converted by verl's own
``scripts/converter_hf_to_mcore.py`` with megatron-core 0.12.1's own ``dist_checkpointing.save``, and merged
back by verl's own ``verl.model_merger`` (megatron backend), on CPU.

verl's tree comes at test time from PyPI (:func:`tests.upstream.verl_checkout`, the 0.5.0 source
distribution, into the test cache): its converter differs from the one at the profile's pin
(796871d7d092f7cbc6a64e7f4a3796f7a2217f5e) only in the pin's extra ``mindspeed`` import (inside
``try``, for NPUs) and its Qwen2.5-VL branch; ``convert_checkpoint_from_transformers_to_megatron``
(Qwen3-MoE) and ``verl/models/mcore/loader.py`` (dense) are byte-identical. The converting process
runs with :mod:`tests.mcore_standins` (``python -m tests.convert_main``); the test process imports
neither torch's distributed code nor megatron.

Also the damage the tests do, written with independent tools: torch's own ``FileSystemReader`` finds
a chunk's record, ``zipfile`` its data member, ``zlib`` the CRC-32 rewritten so ``ckpt check --bytes``
passes the changed bytes.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import io
import os
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest

from tests import cli, upstream

VERL = "0.5.0"
NEEDED = ["megatron.core", "transformers", "accelerate", "tensordict", "codetiming", "dill", "pandas", "triton"]

MOE = """
from transformers import Qwen3MoeConfig as Config, Qwen3MoeForCausalLM as Model
config = Config(vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8,
    num_experts_per_tok=2, max_position_embeddings=512, tie_word_embeddings=False)
"""
DENSE = """
from transformers import Qwen3Config as Config, Qwen3ForCausalLM as Model
config = Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
    tie_word_embeddings=False)
"""
SAVE = """
import sys, torch
torch.manual_seed(0)
Model(config).to(torch.bfloat16).save_pretrained(sys.argv[1], max_shard_size=sys.argv[2])
"""
TOKENIZER = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {f"t{i}": i for i in range(500)}
vocab["[UNK]"] = 500
tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


def require() -> None:
    """Skip, naming it, when a package the conversion needs is missing (the ``test`` extra installs them)."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name.split(".")[0]) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (pip install -e .[test])")
    if int(importlib.metadata.version("transformers").split(".")[0]) >= 5:
        pytest.skip("transformers 5.x fuses the experts: verl's converter needs a 4.x")
    if importlib.metadata.version("megatron-core") != "0.12.1":
        pytest.skip("megatron-core is not 0.12.1")


def hf_model(folder: Path, kind: str = "moe", shard: str = "2MB") -> Path:
    """A tiny random Qwen3-MoE (``moe``) or Qwen3 (``dense``) model saved by transformers into ``folder``."""
    code = (MOE if kind == "moe" else DENSE) + SAVE
    _python(["-c", code, str(folder), shard], timeout=300)
    return folder


def convert(hf: Path, out: Path, ranks: int = 1) -> Path:
    """verl's converter run on ``hf`` into ``out`` (``ranks`` > 1: torchrun, pipeline parallel)."""
    tree = upstream.verl_checkout(VERL)
    script = str(tree / "scripts" / "converter_hf_to_mcore.py")
    args = [script, "--hf_model_path", str(hf), "--output_path", str(out)]
    if "Moe" in (hf / "config.json").read_text():
        args.append("--use_cpu_initialization")
    # this checkout first: verl's source distribution has a tests/ package of its own
    env = {"PYTHONPATH": os.pathsep.join([str(cli.REPO), str(tree)]), "OMP_NUM_THREADS": "1"}
    if ranks == 1:
        _python(["-m", "tests.convert_main", *args], env=env, timeout=900)
    else:
        port = str(29500 + os.getpid() % 1000)
        launch = ["-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_port", port]
        _python([*launch, "-m", "tests.convert_main", *args], env=env, timeout=900)
    return out


_RECIPE_FILES = [cli.REPO / "tests" / "mcore_standins.py", cli.REPO / "tests" / "convert_main.py"]


def built() -> dict[str, Path]:
    """The tiny Qwen3-MoE model, its conversions at 1 rank and at 2 (PP=2), the dense model and its conversion,
    and verl's merger's outputs from a trainer-style save of those (``*-actor``: at 1 rank, and for the MoE at 2):
    built once into the test cache (a folder named after what builds them), read-only to the tests."""
    require()
    recipe = hashlib.sha256()
    for text in (MOE, DENSE, SAVE, TOKENIZER, VERL, *(p.read_text() for p in _RECIPE_FILES)):
        recipe.update(text.encode())
    root = upstream.cache_dir() / "conversions" / recipe.hexdigest()[:16]
    names = ["moe", "moe-mcore", "moe-mcore-pp2", "moe-actor", "moe-merged", "moe-merged-pp2", "dense",
             "dense-mcore", "dense-actor", "dense-merged"]  # fmt: skip
    with open(upstream.cache_dir() / ".conversions.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test processes share the cache
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            moe = hf_model(root / "moe")
            dense = hf_model(root / "dense", "dense", shard="5GB")
            convert(moe, root / "moe-mcore")
            convert(moe, root / "moe-mcore-pp2", ranks=2)
            convert(dense, root / "dense-mcore")
            merge(root / "moe-mcore-pp2", moe, root / "moe-actor", root / "moe-merged")
            merge(root / "moe-mcore-pp2", moe, root / "moe-actor", root / "moe-merged-pp2", ranks=2)
            merge(root / "dense-mcore", dense, root / "dense-actor", root / "dense-merged")
            (root / ".complete").touch()
    return {name: root / name for name in names}


def merge(mcore: Path, hf: Path, actor: Path, out: Path, ranks: int = 1) -> Path:
    """verl's model merger (``python -m verl.model_merger merge --backend megatron``) run on a save laid out as
    verl's trainer writes it: ``actor/dist_ckpt`` (the conversion ``mcore``) and ``actor/huggingface``
    (``hf``'s config and a tokenizer, which the merger copies); into ``out``."""
    if not actor.exists():
        shutil.copytree(mcore, actor / "dist_ckpt")
        (actor / "huggingface").mkdir()
        shutil.copy(hf / "config.json", actor / "huggingface")
        _python(["-c", TOKENIZER, str(actor / "huggingface")])
    tree = upstream.verl_checkout(VERL)
    args = ["-m", "verl.model_merger", "merge", "--backend", "megatron", "--local_dir", str(actor)]
    args += ["--target_dir", str(out), "--use_cpu_initialization"]
    env = {"PYTHONPATH": os.pathsep.join([str(cli.REPO), str(tree)]), "OMP_NUM_THREADS": "1"}
    if ranks == 1:
        _python(["-m", "tests.convert_main", *args], env=env, timeout=900)
    else:
        port = str(29500 + (os.getpid() + 7) % 1000)
        launch = ["-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_port", port]
        _python([*launch, "-m", "tests.convert_main", *args], env=env, timeout=900)
    return out


def _python(args: list[str], env: dict | None = None, timeout: float = 300) -> None:
    result = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cli.REPO,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{args[:2]} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )


def copy(src: Path, dest: Path) -> Path:
    """A copy of a cached conversion for one test to damage."""
    shutil.copytree(src, dest)
    return dest


# damage, in torch's own terms


class Record:
    """One chunk's ``torch.save`` record in a ``.distcp``: where its tensor's bytes and CRC-32s lie."""

    def __init__(self, folder: Path, fqn: str, offsets: tuple):
        from torch.distributed.checkpoint import FileSystemReader
        from torch.distributed.checkpoint.metadata import MetadataIndex

        info = FileSystemReader(str(folder)).read_metadata().storage_data[MetadataIndex(fqn, offsets)]
        self.path = folder / info.relative_path
        self.start, self.length = info.offset, info.length
        with open(self.path, "rb") as f:
            f.seek(self.start)
            record = f.read(self.length)
        with zipfile.ZipFile(io.BytesIO(record)) as zf:
            member = next(i for i in zf.infolist() if "/data/" in i.filename)
        name_length, extra_length = struct.unpack_from("<2H", record, member.header_offset + 26)
        self.local = member.header_offset
        self.data = member.header_offset + 30 + name_length + extra_length
        self.size = member.file_size
        end = len(record) - 22
        central = struct.unpack_from("<L", record, end + 16)[0]
        while record[central + 46 : central + 46 + len(member.filename)] != member.filename.encode():
            n, e, c = struct.unpack_from("<3H", record, central + 28)
            central += 46 + n + e + c
        self.central = central

    def read(self) -> bytes:
        """The tensor's bytes."""
        with open(self.path, "rb") as f:
            f.seek(self.start + self.data)
            return f.read(self.size)

    def write(self, data: bytes) -> None:
        """Replace the tensor's bytes, and both CRC-32s torch stored for them (so the zip stays valid)."""
        assert len(data) == self.size
        crc = struct.pack("<L", zlib.crc32(data))
        with open(self.path, "r+b") as f:
            f.seek(self.start + self.data)
            f.write(data)
            f.seek(self.start + self.local + 14)
            f.write(crc)
            f.seek(self.start + self.central + 16)
            f.write(crc)
