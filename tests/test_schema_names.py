"""The profile's name shapes (ids, Hydra overrides, commands, hex digests) as plain string tests: each agrees
with the regular expression it replaced, except that a trailing line break (which ``$`` let through) is refused."""

from __future__ import annotations

import re

import pytest
from ascendfix.profile.schema import is_command, is_hex, is_id, is_override
from hypothesis import example, given
from hypothesis import strategies as st

# The expressions these tests replaced, anchored at the true end (\Z rather than $)
ID = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
OVERRIDE = re.compile(r"\+{0,2}[A-Za-z_][\w-]*(\.[\w-]+)+(=\S.*)?\Z")
COMMAND = re.compile(r"[A-Za-z_][\w-]*([./][\w-]+)*(\.py)?\Z")
COMMIT = re.compile(r"[0-9a-f]{7,40}\Z")
SHA256 = re.compile(r"[0-9a-f]{64}\Z")

# text made mostly of the characters the shapes turn on, and now and then any other
PIECES = st.sampled_from(["a", "Z", "_", "-", ".", "/", "+", "=", "0", "9", " ", "\n", "\r", "é", "٣", "py", "f"])
TEXT = st.one_of(st.lists(PIECES, max_size=12).map("".join), st.text(max_size=12))


@given(TEXT)
@example("actor_rollout_ref.rollout.name=vllm")
@example("++trainer.device=npu")
@example("+++a.b")
@example("a.b= x")
@example("a.b=x\n")
@example("verl.trainer.main_ppo")
@example("recipe/dapo/main_dapo.py")
@example("a..b")
@example("torch-shard-overlap-check")
def test_each_shape_agrees_with_its_old_expression(text: str) -> None:
    assert is_id(text) == bool(ID.match(text))
    assert is_override(text) == bool(OVERRIDE.match(text) and "\r" not in text)
    assert is_command(text) == bool(COMMAND.match(text))


@given(st.text(alphabet="0123456789abcdefABCDEFg\n", max_size=70))
def test_hex_agrees_with_its_old_expressions(text: str) -> None:
    assert is_hex(text, 7, 40) == bool(COMMIT.match(text))
    assert is_hex(text, 64, 64) == bool(SHA256.match(text))


@pytest.mark.parametrize("text", ["abc\n", "verl.x\n", "a.b=c\n"])
def test_a_trailing_line_break_is_refused(text: str) -> None:
    assert not (is_id(text) or is_override(text) or is_command(text))
