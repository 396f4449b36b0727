"""Each transform on small fixtures of our own: matching, idempotence, exact inverse, formatting kept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ascendfix.profile import manifest
from ascendfix.transforms import cst_util, regions, registry
from ascendfix.transforms.base import TransformError
from ascendfix.transforms.fast_overlap import FastOverlapScan, fingerprint, source_fingerprint
from hypothesis import given
from hypothesis import strategies as st

from tests import upstream

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
# Each transform that locates its sites with ``ast`` first must give, byte for byte, what the
# whole-file path gives: same code, same counts, same refusal.


def _outcomes(transform, source: bytes, patch_id: str = "p") -> list:
    """apply, apply again, revert of that, and revert of the source: (code, pending, done) or the refusal."""
    results = []
    try:
        applied = transform.apply(source, patch_id)
        results.append((applied.code, applied.pending, applied.done))
        for outcome in (
            transform.apply(applied.code, patch_id),
            transform.revert(applied.code, patch_id),
            transform.revert(source, patch_id),
        ):
            results.append((outcome.code, outcome.pending, outcome.done))
    except TransformError as e:
        results.append(f"TransformError: {e}")
    return results


def _no_whole_file_parse(source):
    raise AssertionError("the whole file was parsed")


def assert_same_on_both_paths(monkeypatch, transform, source: bytes, region_only: bool = True) -> list:
    """:func:`_outcomes`, the same on the region path (with ``region_only``: without parsing the whole
    file) and on the whole-file path (the region path turned off)."""
    with monkeypatch.context() as m:
        if region_only:
            m.setattr(cst_util, "parse", _no_whole_file_parse)
        region = _outcomes(transform, source)
    with monkeypatch.context() as m:
        m.setattr(regions.Source, "read", staticmethod(lambda source: None))
        whole = _outcomes(transform, source)
    assert region == whole
    return region


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


@pytest.mark.parametrize(
    ("source", "pending"),
    [
        pytest.param(METHOD_SITE, 2, id="method"),
        pytest.param(METHOD_SITE.replace(b"\n", b"\r\n"), 2, id="crlf"),
        pytest.param(METHOD_SITE.replace(b"    ", b"\t"), 2, id="tabs"),
        pytest.param(METHOD_SITE.replace(b"\n", b"\r\n", 1), 2, id="first-line-crlf-rest-lf"),
        pytest.param(b"a = 1; x = x.repeat(repeat_times=rollout_n, interleave=True); b = 2\n", 1, id="semicolons"),
        pytest.param(
            b"def f():\n    a = g(\n        1); x.repeat(repeat_times=rollout_n, interleave=True)\n    return a\n",
            1,
            id="previous-statement-ends-on-its-line",
        ),
        pytest.param(
            b"def f():\n    x.repeat(repeat_times=rollout_n, interleave=True)\n"
            b"    y.repeat(repeat_times=rollout_n, interleave=True); z = 1\n",
            2,
            id="adjacent-statements",
        ),
        pytest.param(TRAINER, 3, id="trainer"),
        pytest.param(TRAINER.rstrip(b"\n"), 3, id="no-final-newline"),
        pytest.param(
            b"if x: obj.repeat(repeat_times=rollout_n, interleave=True)\n"
            b"for i in xs: obj.repeat(repeat_times=rollout_n, interleave=True); y = 1\n"
            b"while obj.repeat(repeat_times=rollout_n, interleave=True):\n    pass\n",
            0,
            id="suites-and-headers-are-not-sites",
        ),
        pytest.param(
            b"@obj.repeat(repeat_times=rollout_n, interleave=True)\n"
            b"def f(a=obj.repeat(repeat_times=rollout_n, interleave=True)):\n    pass\n",
            0,
            id="decorators-and-defaults-are-not-sites",
        ),
        pytest.param(b"x = x.repeat(repeat_times=rollout_n, interleave=True)\n# the end", 1, id="comment-last"),
    ],
)
def test_set_keyword_region_path_is_the_whole_file_path(monkeypatch, source, pending):
    (applied, *_) = assert_same_on_both_paths(monkeypatch, REPEAT, source)
    assert applied[1] == pending


@pytest.mark.parametrize(
    ("source", "refusal"),
    [
        pytest.param(b"x = x.repeat(repeat_times=rollout_n, interleave=True\n", "not valid Python", id="syntax-error"),
        pytest.param(
            b"def f():\n    # two comment lines\n    # above the statement\n"
            b"    x = x.repeat(repeat_times=rollout_n, interleave=True) \\\n        + 1\n",
            "cannot place the marker on line 3",  # counted from the statement's comment lines
            id="backslash-continuation",
        ),
    ],
)
def test_set_keyword_refuses_as_the_whole_file_path_does(monkeypatch, source, refusal):
    (outcome,) = assert_same_on_both_paths(monkeypatch, REPEAT, source, region_only=False)
    assert refusal in outcome


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(b"\xef\xbb\xbf" + METHOD_SITE, id="bom"),
        pytest.param(b"# -*- coding: latin-1 -*-\n" + METHOD_SITE + b"s = '\xe9'\n", id="latin-1"),
        pytest.param(METHOD_SITE + b"x = 1\rx.repeat(repeat_times=rollout_n, interleave=True)\n", id="lone-cr"),
        pytest.param(b"\x0c\n" + METHOD_SITE, id="form-feed"),
        pytest.param(b"if x: \\\n    y.repeat(repeat_times=rollout_n, interleave=True)\n", id="backslash-before-block"),
    ],
)
def test_set_keyword_falls_back_to_the_whole_file_when_unsure(monkeypatch, source):
    with monkeypatch.context() as m:
        m.setattr(cst_util, "parse", _no_whole_file_parse)
        with pytest.raises(AssertionError, match="the whole file was parsed"):
            REPEAT.apply(source, "p")
    assert_same_on_both_paths(monkeypatch, REPEAT, source, region_only=False)


SCAN = b"""def scan(xs):
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            if same(xs[i], xs[j]):
                return i, j
    return None
"""
SAME = b"""def same(a, b):
    return a == b
"""
SCAN_MODULE = (
    b'''"""A module of our own with a pairwise scan."""

import os


class Before:
    def method(self):
        return os.sep


# comment above same
'''
    + SAME
    + b"\n\n"
    + SCAN
    + b"""

def after():
    return scan([])
"""
)
DECORATED = SCAN_MODULE.replace(b"def scan", b"@decorate\ndef scan")


@pytest.fixture
def scan_transform(tmp_path):
    """A fast-overlap-scan of ``scan()`` above (plain or decorated), with a template of our own whose
    helper changes nothing."""
    return FastOverlapScan("scan", str(_scan_template(tmp_path / "scan_template.py")))


def _scan_template(template: Path) -> Path:
    """A template at ``template`` that knows ``scan()`` above (plain or decorated), whose helper changes nothing."""
    import libcst as cst

    form = {"loop": "for i in range(len(xs))", "helper": "_ascendfix_pairs", "args": "xs", "index": "i"}
    replaces = {}
    for known in (SCAN_MODULE, DECORATED):
        module = cst.parse_module(known)
        func = next(s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == "scan")
        replaces[fingerprint(module, func)] = {**form, "narrow_outer": False}
    template.write_text(
        f"REPLACES = {replaces!r}\n\n\n"
        "def _ascendfix_pairs(xs):\n    return _ascendfix_none()\n\n\n"
        "def _ascendfix_none():\n    return None\n"
    )
    return template


def _tabs(source: bytes) -> bytes:
    return re.sub(rb"(?m)^((?:    )+)", lambda m: b"\t" * (len(m.group(1)) // 4), source)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(SCAN_MODULE, id="module"),
        pytest.param(SCAN_MODULE.replace(b"\n", b"\r\n"), id="crlf"),
        pytest.param(_tabs(SCAN_MODULE), id="tabs"),
        pytest.param(SCAN + b"\n\n" + SAME, id="first-line"),
        pytest.param(b"# a header comment\n\n# the lead\n" + SCAN + b"\n\n" + SAME, id="first-statement"),
        pytest.param(SCAN_MODULE[: SCAN_MODULE.index(b"\n\ndef after")], id="last-without-newline"),
        pytest.param(DECORATED, id="decorated"),
        pytest.param(SCAN_MODULE.replace(b"\n\n\ndef scan", b"\nx = 1; y = 2\n\n\ndef scan"), id="after-semicolons"),
        pytest.param(SCAN_MODULE.replace(b"        return a", b"        return a  # footer"), id="trailing-comment"),
    ],
)
def test_fast_overlap_scan_region_path_is_the_whole_file_path(monkeypatch, scan_transform, source):
    applied, again, reverted, _ = assert_same_on_both_paths(monkeypatch, scan_transform, source)
    assert applied[1:] == (1, 0) and again[1:] == (0, 1) and reverted[1:] == (0, 1)
    if not source.startswith((b"def scan", b"# a header")):  # helpers inserted first leave two blank lines
        assert reverted[0] == source
    assert b"def _ascendfix_pairs(xs):  # ascendfix: p" in applied[0]
    if b"\t" in source:
        assert b"\n\treturn _ascendfix_none()  # ascendfix: p" in applied[0]  # the file's own indent


def test_fast_overlap_scan_with_a_template_indented_otherwise_is_the_whole_file_path(monkeypatch, tmp_path):
    """A template whose functions are indented with tabs (or two spaces): libcst re-indents its helpers to the
    file's four spaces, and the region path writes what libcst writes, not the template's own bytes."""
    from ascendfix.transforms import fast_overlap

    (tmp_path / "t").mkdir()
    for indent in ("\t", "  "):
        four = _scan_template(tmp_path / "t" / "four.py")
        text = four.read_text().replace("\n    return", f"\n{indent}return")
        other = tmp_path / "t" / f"other-{len(indent)}.py"
        other.write_text(text)
        assert fast_overlap._load_template(str(four)).four_spaces
        assert not fast_overlap._load_template(str(other)).four_spaces
        transform = FastOverlapScan("scan", str(other))
        applied, *_ = assert_same_on_both_paths(monkeypatch, transform, SCAN_MODULE)
        assert b"\n    return _ascendfix_none()  # ascendfix: p" in applied[0]


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(b"\xef\xbb\xbf" + SCAN_MODULE, id="bom"),
        pytest.param(SCAN_MODULE.replace(b"\n", b"\r\n", 1), id="first-line-crlf-rest-lf"),
        pytest.param(b"if TYPE_CHECKING:\n  import os\n" + SCAN_MODULE, id="another-default-indent"),
        pytest.param(SCAN_MODULE.replace(b"\n\n\ndef scan", b"\n    # footer of same()\n\ndef scan"), id="footer"),
        pytest.param(SCAN_MODULE + b"\n\ndef _ascendfix_other():\n    pass\n", id="another-helper"),
        pytest.param(SCAN_MODULE + b"\n\ndef scan():\n    pass\n", id="defined-twice"),
        pytest.param(SCAN_MODULE.replace(b"return i, j", b"return j, i"), id="unknown-version"),
        pytest.param(SCAN_MODULE + b"\ndef broken(:\n", id="syntax-error"),
    ],
)
def test_fast_overlap_scan_falls_back_to_the_whole_file_when_unsure(monkeypatch, scan_transform, source):
    with monkeypatch.context() as m:
        m.setattr(cst_util, "parse", _no_whole_file_parse)
        with pytest.raises(AssertionError, match="the whole file was parsed"):
            scan_transform.apply(source, "p")
    assert_same_on_both_paths(monkeypatch, scan_transform, source, region_only=False)


def test_fast_overlap_scan_refusals_are_the_whole_file_ones(monkeypatch, scan_transform):
    (unknown,) = assert_same_on_both_paths(
        monkeypatch, scan_transform, SCAN_MODULE.replace(b"return i, j", b"return j, i"), region_only=False
    )
    assert "scan() is not a version that" in unknown
    applied = scan_transform.apply(SCAN_MODULE, "p").code
    partial = b"\n".join(line for line in applied.split(b"\n") if b"_ascendfix_overlaps = " not in line)
    (refusal,) = assert_same_on_both_paths(monkeypatch, scan_transform, partial, region_only=False)
    assert "carries only part of this patch" in refusal
    (syntax,) = assert_same_on_both_paths(monkeypatch, scan_transform, SCAN_MODULE + b"def (:\n", region_only=False)
    assert "not valid Python" in syntax


# Every real file the bundled profile patches, from every cached release (downloaded, never committed).
PROFILE = manifest.load_profile("verl-796871d")


@pytest.mark.upstream
@pytest.mark.parametrize("version", upstream.VERL_VERSIONS)
def test_real_verl_trainer_region_path_is_the_whole_file_path(monkeypatch, version):
    source = (upstream.verl_tree(version) / "verl/trainer/ppo/ray_trainer.py").read_bytes()
    transform = PROFILE.variant("verl-grpo-no-interleave").build()
    applied, *_ = assert_same_on_both_paths(monkeypatch, transform, source)
    assert applied[1:] == ((2, 0) if version.startswith("0.4") else (3, 0))


@pytest.mark.upstream
@pytest.mark.parametrize("version", upstream.TORCH_RELEASES)
@pytest.mark.parametrize("pid", ["torch-shard-overlap-check", "torch-global-plan-check"])
def test_real_torch_region_path_is_the_whole_file_path(monkeypatch, version, pid):
    import libcst as cst

    patch = PROFILE.patches[pid]
    transform = PROFILE.variant(pid).build()
    source = (upstream.torch_tree(version) / patch.files[0].path).read_bytes()
    applied, *_ = assert_same_on_both_paths(monkeypatch, transform, source)
    assert applied[1:] == (1, 0)
    module, lines = cst.parse_module(source), regions.Source.read(source)
    (func,) = [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == transform.function]
    (node,) = [s for s in lines.tree.body if getattr(s, "name", None) == transform.function]
    assert source_fingerprint(lines, node) == fingerprint(module, func)


def test_a_template_function_a_marker_would_change_is_refused_for_every_patch_that_inserts_it():
    """The markers land only in comments: a template function with a line inside a multi-line string is
    refused, whichever patch inserts it (checked once per function); any other is inserted with every
    non-blank line carrying the patch's own marker."""
    import libcst as cst
    from ascendfix.transforms import fast_overlap
    from ascendfix.transforms.base import marker
    from ascendfix.transforms.cst_util import code_of

    text = 'def _ascendfix_doc():\n    return """one\n    two"""'
    spread = "def _ascendfix_sum(x):\n    return (x +\n            1)\n\n    # a comment"
    functions = {"_ascendfix_doc": text, "_ascendfix_sum": spread}
    template = fast_overlap._Template({}, functions, {name: set() for name in functions})
    for pid in ("verl-a", "torch-b"):
        with pytest.raises(TransformError, match=r"_ascendfix_doc\(\) has a multi-line string a marker would land"):
            fast_overlap._helper_texts(template, "_ascendfix_doc", pid)
        (marked,) = fast_overlap._helper_texts(template, "_ascendfix_sum", pid)
        (inserted,) = fast_overlap._helper_defs([marked])
        # what an apply on the region path writes without libcst is what libcst regenerates
        assert cst.Module(body=[inserted]).bytes == fast_overlap._helpers_as_written([marked])
        lines = code_of(inserted).strip("\n").splitlines()
        assert [line.endswith(f"  {marker(pid)}") for line in lines] == [True, True, True, False, True]
        assert "\n".join(line.replace(f"  {marker(pid)}", "") for line in lines) == spread
