"""Each transform on small fixtures of our own: matching, idempotence, exact inverse, formatting kept."""

from __future__ import annotations

import pytest
from ascendfix.transforms import regions, registry
from ascendfix.transforms.base import TransformError
from hypothesis import given, settings
from hypothesis import strategies as st

PROBE = registry.build(
    "set-assignment", {"target": "is_cuda_available", "original": "torch.cuda.is_available()", "value": "False"}
)
REPEAT = registry.build(
    "set-keyword",
    {
        "method": "repeat",
        "keyword": "interleave",
        "original": "True",
        "value": "False",
        "when_keyword": "repeat_times",
        "when_suffix": ["rollout.n", "rollout_n", "val_kwargs.n"],
    },
)
EARLY = registry.build("return-early", {"function": "check"})

TRAINER = b"""class Trainer:
    def fit(self):
        rollout_n = self.config.rollout.n
        gen = gen.repeat(repeat_times=self.config.rollout.n, interleave=True)  # keep me
        batch = batch.repeat(
            repeat_times=rollout_n,
            interleave=True,
        )
        other = other.repeat(repeat_times=4, interleave=True)
        val = val.repeat(
            repeat_times=self.config.val_kwargs.n, interleave=True
        )
"""


def roundtrip(transform, source: bytes, patch_id: str = "p") -> bytes:
    once = transform.apply(source, patch_id)
    twice = transform.apply(once.code, patch_id)
    assert twice.code == once.code and twice.pending == 0 and twice.done == once.pending + once.done
    back = transform.revert(once.code, patch_id)
    assert back.code == source
    compile(once.code, "<patched>", "exec")
    return once.code


def test_set_keyword_edits_only_matching_calls_and_marks_each_line():
    out = roundtrip(REPEAT, TRAINER)
    assert REPEAT.apply(TRAINER, "p").pending == 3
    lines = out.decode().splitlines()
    assert lines[3].endswith("interleave=False)  # keep me  # ascendfix: p")
    assert lines[6] == "            interleave=False,  # ascendfix: p"
    assert "other.repeat(repeat_times=4, interleave=True)" in out.decode()
    assert lines[10].endswith("repeat_times=self.config.val_kwargs.n, interleave=False  # ascendfix: p")


def test_set_keyword_counts_unmarked_target_value_as_neither_form():
    source = b"x = x.repeat(repeat_times=rollout_n, interleave=False)\n"
    outcome = REPEAT.apply(source, "p")
    assert (outcome.pending, outcome.done, outcome.code) == (0, 0, source)


def test_set_keyword_suffix_matches_at_name_boundary_only():
    source = b"x = x.repeat(repeat_times=self.my_rollout_n, interleave=True)\n"
    assert REPEAT.apply(source, "p").pending == 0


def test_set_assignment_keeps_crlf_bom_and_tabs():
    source = b"\xef\xbb\xbfimport torch\r\n\r\nis_cuda_available = torch.cuda.is_available()\r\nif x:\r\n\ty = 1\r\n"
    out = roundtrip(PROBE, source)
    assert out.startswith(b"\xef\xbb\xbf")
    assert b"is_cuda_available = False  # ascendfix: p\r\n" in out
    assert b"\ty = 1\r\n" in out and out.count(b"\r\n") == source.count(b"\r\n")


def test_set_assignment_keeps_an_existing_comment():
    source = b"is_cuda_available = torch.cuda.is_available()  # probe\n"
    out = roundtrip(PROBE, source)
    assert out == b"is_cuda_available = False  # probe  # ascendfix: p\n"


def test_set_assignment_ignores_other_expressions_and_nested_assignments():
    source = b"is_cuda_available = probe()\ndef f():\n    is_cuda_available = torch.cuda.is_available()\n"
    outcome = PROBE.apply(source, "p")
    assert (outcome.pending, outcome.done, outcome.code) == (0, 0, source)


def test_syntax_error_is_a_transform_error():
    with pytest.raises(TransformError, match="not valid Python"):
        PROBE.apply(b"def broken(:\n", "p")


def test_markers_of_another_patch_do_not_count():
    out = PROBE.apply(b"is_cuda_available = torch.cuda.is_available()\n", "a").code
    assert PROBE.apply(out, "b").done == 0


@pytest.mark.parametrize(
    ("source", "inserted"),
    [
        (
            b'def check(xs):\n    """Doc."""\n    for x in xs:\n        raise ValueError(x)\n',
            b"    return  # ascendfix: p\n",
        ),
        (
            b"def check(p) -> bool:\n    return len(p) > 0\n\ndef caller(p):\n    if not check(p):\n        raise E\n",
            b"    return True  # ascendfix: p\n",
        ),
        (
            b"def check(p) -> list[str]:\n    return []\n\ndef caller(p):\n    errors = check(p)\n    if errors:\n"
            b"        raise E\n",
            b"    return []  # ascendfix: p\n",
        ),
    ],
)
def test_return_early_value_follows_annotation_and_callers(source, inserted):
    out = roundtrip(EARLY, source)
    assert inserted in out


@pytest.mark.parametrize(
    "source",
    [
        b"def check(p) -> bool:\n    return True\n\nok = check(1)\n",  # caller does not negate
        b"def check(p) -> list[str]:\n    return []\n\nif not check(1):\n    pass\n",  # caller negates a list
        b"def check(p):\n    return p\n",  # no annotation but returns a value
        b"def check(p) -> int:\n    return 1\n",
    ],
)
def test_return_early_refuses_when_unsure(source):
    with pytest.raises(TransformError, match="cannot tell what check"):
        EARLY.apply(source, "p")


def test_return_early_with_tabs_and_crlf():
    source = b'def check(xs):\r\n\t"""Doc."""\r\n\tpass\r\n'
    out = roundtrip(EARLY, source)
    assert out == b'def check(xs):\r\n\t"""Doc."""\r\n\treturn  # ascendfix: p\r\n\tpass\r\n'


# Property: on any module made of filler statements around the sites, apply is idempotent and
# revert is its exact inverse, byte for byte, whatever the newlines and indentation.
filler = st.sampled_from(
    [
        "x = 1",
        "# a comment",
        "",
        "y = f(a, b)  # trailing",
        "z = [\n    1,\n    2,\n]",
        's = """multi\nline"""',
        "w = obj.repeat(repeat_times=4, interleave=True)",
    ]
)
site = st.sampled_from(
    [
        "a = a.repeat(repeat_times=self.config.rollout.n, interleave=True)",
        "b = b.repeat(\n    repeat_times=rollout_n,\n    interleave=True,\n)",
        "c = c.repeat(repeat_times=cfg.val_kwargs.n, interleave=True)  # note",
        "is_cuda_available = torch.cuda.is_available()",
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(st.one_of(filler, site), min_size=1, max_size=12),
    newline=st.sampled_from(["\n", "\r\n"]),
    indent=st.sampled_from(["    ", "\t", "  "]),
    bom=st.booleans(),
)
def test_apply_is_idempotent_and_revert_is_exact(parts, newline, indent, bom):
    body = "\n".join(parts).split("\n")
    text = (
        "def fn():\n"
        + indent
        + "pass\n"
        + "\n".join(indent + line if line else "" for line in body)
        + "\n"
        + "\n".join(parts)
        + "\n"
    )
    source = (b"\xef\xbb\xbf" if bom else b"") + text.replace("\n", newline).encode()
    for transform in (REPEAT, PROBE):
        roundtrip(transform, source)


# --- the region path: only the changed statements are parsed with libcst ----------------------


METHOD_SITE = b"""class Trainer:
    def fit(self):
        # a comment line above
        gen = gen.repeat(repeat_times=self.config.rollout.n, interleave=True)  # keep me
        if ready:
            batch = batch.repeat(
                repeat_times=rollout_n,
                interleave=True,
            )
        return gen
"""


def test_a_region_regenerates_its_own_bytes_under_its_wrapper():
    source = regions.Source.read(METHOD_SITE.replace(b"\n", b"\r\n"))
    region = regions.parse_lines(source, 6, 9)  # the multi-line batch.repeat(...) statement
    assert region.wrapper == "if 1:\r\n"
    assert region.code(region.module) == source.lines(6, 9)
    assert regions.splice(source, [(region, b"            pass\r\n")]) == source.source.replace(
        source.lines(6, 9), b"            pass\r\n"
    )
