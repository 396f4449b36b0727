"""A tree hand-edited as the guide's text says (5.1, 6.1, 6.2, 7.2): status names the edits, apply adopts them,
revert gives upstream's bytes back; anything short of the guide's edit, or more than it, is refused and named.

On real upstream files: verl 0.5.0's source distribution (its verl/utils/device.py is byte-identical to
796871d's; its ray_trainer.py has 796871d's three sites in other bytes, so, as the build tests do, this
test's copy of the GRPO patch file lists it as a known original) and the A2's own torch 2.7.1 files.
recipe/ is in no PyPI artefact: the DAPO trainer is a fixture shaped like 796871d's, made a known original
of this test's copy of the DAPO patch file the same way.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ascendfix.errors import RefusedError
from ascendfix.patching import engine, evaluate, proof
from ascendfix.profile import manifest
from ascendfix.resources import data_dir
from ascendfix.site import Site

from tests import upstream
from tests.upstream import PLANNER_DEF, SHARDS_DOC_END

pytestmark = pytest.mark.upstream

DEVICE = "verl/utils/device.py"
TRAINER = "verl/trainer/ppo/ray_trainer.py"
DAPO = "recipe/dapo/dapo_ray_trainer.py"
DAPO_TRAINER = b'''"""A DAPO trainer shaped like verl 796871d's recipe/dapo/dapo_ray_trainer.py (test fixture)."""


class RayDAPOTrainer:
    def fit(self):
        for batch_dict in self.train_dataloader:
            new_batch = DataProto.from_single_dict(batch_dict)
            gen_batch = new_batch.pop(batch_keys=["input_ids"])
            with marked_timer("gen", timing_raw, "red"):
                gen_batch = gen_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
                gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)
                if self.config.algorithm.adv_estimator == AdvantageEstimator.REMAX:
                    new_batch = new_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
            new_batch = new_batch.union(gen_batch_output)
'''
# The guide's text, section by section: (file, the line as upstream has it, the line as the guide writes it).
GUIDE_5_1 = (DEVICE, "is_cuda_available = torch.cuda.is_available()\n",
             "#is_cuda_available = torch.cuda.is_available()\nis_cuda_available = False\n")  # fmt: skip
GUIDE_7_2 = [
    (TRAINER, "repeat_times=self.config.actor_rollout_ref.rollout.val_kwargs.n, interleave=True\n"),
    (TRAINER, "gen_batch = gen_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)\n"),
    (TRAINER, "batch = batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)\n"),
    (DAPO, "gen_batch = gen_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)\n"),
    (DAPO, "new_batch = new_batch.repeat(repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)\n"),
]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def edit(path: Path, old: str, new: str) -> None:
    """Replace the one line ``old`` (as a whole line, any indentation) with ``new``, as a team does in an editor."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.strip() == old.strip() and old.strip()]
    assert len(at) == 1, (path, old, at)
    indent = lines[at[0]][: len(lines[at[0]]) - len(lines[at[0]].lstrip())]
    lines[at[0]] = "".join(indent + line if line.strip() else line for line in new.splitlines(keepends=True))
    path.write_text("".join(lines))


def hand_edit_as_the_guide_says(verl: Path, site: Path, skip: tuple[int, ...] = ()) -> None:
    """The guide's 5.1, 6.1, 6.2 and 7.2 edits (``skip``: indexes of 7.2's sites left as they are)."""
    rel, old, new = GUIDE_5_1
    edit(verl / rel, old, new)
    shards = site / upstream.SHARD_INTERNALS
    shards.write_text(shards.read_text().replace(SHARDS_DOC_END, SHARDS_DOC_END + "    return\n", 1))
    planner = site / upstream.DEFAULT_PLANNER
    planner.write_text(planner.read_text().replace(PLANNER_DEF, PLANNER_DEF + "    return True\n", 1))
    for i, (rel, line) in enumerate(GUIDE_7_2):
        if i not in skip:
            edit(verl / rel, line, line.replace("interleave=True", "interleave=False"))


@pytest.fixture
def trees(tmp_path):
    """(profile path, verl checkout, torch site-packages, sha256 of every pristine file by path)."""
    verl = tmp_path / "verl"
    shutil.copytree(upstream.verl_checkout("0.5.0"), verl)
    (verl / DAPO).parent.mkdir(parents=True)
    (verl / DAPO).write_bytes(DAPO_TRAINER)
    site = tmp_path / "site"
    shutil.copytree(upstream.torch_tree("2.7.1"), site, ignore=shutil.ignore_patterns(".complete"))
    (site / "torch-2.7.1.dist-info").mkdir()
    team = tmp_path / "team"
    (team / "patches").mkdir(parents=True)
    for pid, rel in (("verl-grpo-no-interleave", TRAINER), ("verl-dapo-no-interleave", DAPO)):
        text = (data_dir("patches") / f"{pid}.toml").read_text()
        known = f'\n[[files.preimages]]\nsha256 = "{sha(verl / rel)}"\nlabel = "verl 0.5.0 sdist (this test)"\n'
        (team / "patches" / f"{pid}.toml").write_text(text + known)
    profile = team / "team.toml"
    profile.write_text('extends = "verl-796871d"\nname = "team"\n')
    pristine = {rel: sha(verl / rel) for rel in (DEVICE, TRAINER, DAPO)}
    pristine |= {rel: sha(site / rel) for rel in (upstream.SHARD_INTERNALS, upstream.DEFAULT_PLANNER)}
    return profile, verl, site, pristine


def select(profile: Path, verl: Path, site: Path, device: str | None = "npu") -> evaluate.Selection:
    return engine.select(Site(manifest.load_profile(str(profile)), device, roots={"verl": verl, "torch": site}))


def shas(verl: Path, site: Path, pristine: dict[str, str]) -> dict[str, str]:
    return {rel: sha((verl if rel.startswith(("verl/", "recipe/")) else site) / rel) for rel in pristine}


def test_status_names_the_guides_five_edits_apply_adopts_them_and_revert_gives_upstream_back(trees):
    profile, verl, site, pristine = trees
    hand_edit_as_the_guide_says(verl, site)
    edited = shas(verl, site, pristine)
    assert all(edited[rel] != pristine[rel] for rel in pristine)
    guided = {pid for pid, patch in manifest.load_profile(str(profile)).patches.items() if patch.hand_edits}
    statuses = {s.id: s for s in engine.status(select(profile, verl, site))}
    assert {pid: (s.state, s.guide, s.hint) for pid, s in statuses.items() if pid in guided} == {
        "verl-cuda-probe-off": ("hand-edited", "5.1", "ascendfix apply"),
        "torch-shard-overlap-check": ("hand-edited", "6.1", "ascendfix apply"),
        "torch-global-plan-check": ("hand-edited", "6.2", "ascendfix apply"),
        "verl-grpo-no-interleave": ("hand-edited", "7.2", "ascendfix apply"),
        "verl-dapo-no-interleave": ("hand-edited", "7.2", "ascendfix apply"),
    }
    assert statuses["verl-cuda-probe-off"].reason.startswith("hand-edited (the guide's 5.1): verl/utils/device.py")
    assert "over torch 2.7.0, 2.7.1" in statuses["torch-shard-overlap-check"].reason
    assert statuses["verl-grpo-no-interleave"].to_json()["guide"] == "7.2"

    result = engine.apply(select(profile, verl, site), strict=True)
    assert [(s.state, s.action) for s in result if s.id in guided] == [("applied", "adopted")] * len(guided)
    assert {s.id: s.state for s in engine.status(select(profile, verl, site))} == dict.fromkeys(statuses, "applied")
    shards = (site / upstream.SHARD_INTERNALS).read_text()
    planner = (site / upstream.DEFAULT_PLANNER).read_text()
    assert SHARDS_DOC_END + "    return\n" not in shards and "def _ascendfix_" in shards  # validation runs again
    assert PLANNER_DEF + "    return True\n" not in planner and "def _ascendfix_" in planner
    device = (verl / DEVICE).read_text()
    assert (
        "#is_cuda_available" not in device and "is_cuda_available = False  # ascendfix: verl-cuda-probe-off" in device
    )

    reverted = engine.revert(select(profile, verl, site, device=None))
    assert {s.action for s in reverted} == {"reverted"}
    assert shas(verl, site, pristine) == pristine  # upstream's bytes, not the hand-edited ones


def test_the_cli_says_hand_edited_with_apply_as_the_fix(trees, ascendfix_cli):
    profile, verl, site, pristine = trees
    hand_edit_as_the_guide_says(verl, site)
    roots = ["--root", f"verl={verl}", "--root", f"torch={site}"]

    def cli(*args: str) -> subprocess.CompletedProcess:
        return ascendfix_cli(*args, "--profile", profile, *roots, env={"COLUMNS": "200"}, timeout=600)

    shown = cli("status", "--device", "npu")
    assert shown.returncode == 1, shown.stderr
    assert "hand-edited     verl-cuda-probe-off (the guide's 5.1)\n" in shown.stdout
    assert "hand-edited     torch-global-plan-check (the guide's 6.2)\n" in shown.stdout
    hand_edited = [p for p in manifest.load_profile(str(profile)).patches.values() if p.hand_edits]
    assert shown.stdout.count("fix: ascendfix apply\n") == len(hand_edited)
    applied = cli("apply", "--device", "npu", "--json")
    assert applied.returncode == 0, applied.stderr
    assert {p["action"] for p in json.loads(applied.stdout)["patches"]} == {"adopted"}
    assert cli("revert").returncode == 0
    assert shas(verl, site, pristine) == pristine


def test_a_partial_hand_edit_is_refused_naming_the_site_left(trees):
    profile, verl, site, pristine = trees
    hand_edit_as_the_guide_says(verl, site, skip=(2,))  # fit()'s batch site left at interleave=True
    before = shas(verl, site, pristine)
    (status,) = [s for s in engine.status(select(profile, verl, site)) if s.id == "verl-grpo-no-interleave"]
    assert (status.state, status.reason_code) == ("partial", "partial-hand-edit")
    line = 1 + (verl / TRAINER).read_text().splitlines().index("                    " + GUIDE_7_2[2][1].strip())
    assert "the guide's 7.2 hand edit at 2 of 3 sites" in status.reason and f"not at line {line})" in status.reason
    assert status.hint == f"edit line {line} as the guide's 7.2 says, or restore the file; then ascendfix apply"
    with pytest.raises(RefusedError, match="verl-grpo-no-interleave: partial: .*2 of 3 sites"):
        engine.apply(select(profile, verl, site))
    assert shas(verl, site, pristine) == before


def test_a_hand_edit_and_another_change_is_refused_naming_the_other_change(trees):
    profile, verl, site, pristine = trees
    git = ["git", "-C", str(verl), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(verl)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "upstream"], check=True)
    hand_edit_as_the_guide_says(verl, site)
    edit(verl / DEVICE, "def get_device_name() -> str:", "def get_device_name() -> str:  # ours\n")
    shards = site / upstream.SHARD_INTERNALS
    shards.write_text(shards.read_text() + "# a local note\n")
    before = shas(verl, site, pristine)
    statuses = {s.id: s for s in engine.status(select(profile, verl, site))}
    device, internals = statuses["verl-cuda-probe-off"], statuses["torch-shard-overlap-check"]
    line = 1 + (verl / DEVICE).read_text().splitlines().index("def get_device_name() -> str:  # ours")
    assert (device.state, device.reason_code) == ("drifted", "hand-edit-and-more")
    assert "holds the guide's 5.1 hand edit (lines 28, 29) and something else" in device.reason
    assert (
        f"differs at line {line}: 'def get_device_name() -> str:' -> 'def get_device_name() -> str:  # ours'"
        in device.reason
    )
    assert device.hint.startswith(f"git -C {verl} diff -- {DEVICE}")
    # site-packages holds no upstream copy to compare with: the hand edit's lines are named, and the rest is
    # said to differ from every known original
    assert (internals.state, internals.reason_code) == ("drifted", "hand-edit-and-more")
    assert "holds the guide's 6.1 hand edit (line 82) and something else" in internals.reason
    assert "still not a known original" in internals.reason and "torch 2.7.0, 2.7.1" in internals.reason
    assert internals.hint == "pip install --force-reinstall --no-deps torch==2.7.1; then ascendfix apply"
    with pytest.raises(RefusedError, match="verl-cuda-probe-off: drifted: .*hand edit .* and something else"):
        engine.apply(select(profile, verl, site))
    assert shas(verl, site, pristine) == before


def test_a_hand_return_above_the_docstring_is_the_guides_edit_too(trees):
    profile, verl, site, pristine = trees
    shards = site / upstream.SHARD_INTERNALS
    head = "def validate_non_overlapping_shards_metadata(shards: list[ShardMetadata]):\n"
    text = shards.read_text()
    assert head in text
    shards.write_text(text.replace(head, head + "    return\n", 1))
    (status,) = [s for s in engine.status(select(profile, verl, site)) if s.id == "torch-shard-overlap-check"]
    assert (status.state, status.guide) == ("hand-edited", "6.1")
    site_of = Site(manifest.load_profile(str(profile)), "npu", roots={"verl": verl, "torch": site})
    engine.apply(engine.select(site_of, ("torch-shard-overlap-check",)))
    engine.revert(select(profile, verl, site, device=None))
    assert sha(shards) == pristine[upstream.SHARD_INTERNALS]


def test_status_never_calls_applied_a_function_a_hand_return_still_skips(trees):
    profile, verl, site, pristine = trees
    only = ("torch-shard-overlap-check",)
    selection = engine.select(Site(manifest.load_profile(str(profile)), "npu", roots={"torch": site}), only)
    engine.apply(selection)  # fast-validate, then a hand edit under it
    shards = site / upstream.SHARD_INTERNALS
    shards.write_text(shards.read_text().replace(SHARDS_DOC_END, SHARDS_DOC_END + "    return\n", 1))
    (status,) = engine.status(selection)
    assert (status.state, status.reason_code) == ("drifted", "hand-edit-and-more")
    assert "holds ascendfix's torch-shard-overlap-check and the guide's 6.1 hand edit" in status.reason
    with pytest.raises(RefusedError):
        engine.apply(selection)
    line = 1 + shards.read_text().splitlines().index("    return")
    assert status.hint == f"delete line {line} of {upstream.SHARD_INTERNALS} (the hand edit): " + (
        "ascendfix's patch is then applied as it wrote it"
    )
    shards.write_text(shards.read_text().replace(SHARDS_DOC_END + "    return\n", SHARDS_DOC_END, 1))
    assert (engine.status(selection)[0].state, engine.status(selection)[0].variant) == ("applied", "fast-validate")
    engine.revert(selection)
    assert sha(shards) == pristine[upstream.SHARD_INTERNALS]


def test_an_interrupted_adoption_may_roll_the_hand_edit_back(trees):
    """The undo copy of an adoption is the hand-edited file: provable, as exactly the guide's edit of a known
    original; the same edit with anything else is not."""
    profile, verl, site, _ = trees
    prove = proof.prover(manifest.load_profile(str(profile)))
    hand_edit_as_the_guide_says(verl, site)
    for root, rel in ((verl, DEVICE), (site, upstream.SHARD_INTERNALS), (site, upstream.DEFAULT_PLANNER)):
        edited = (root / rel).read_bytes()
        assert prove(rel, edited)
        assert not prove(rel, edited + b"# more\n")


# Every spelling of the guide's text a team may type: (patch, file, where it goes, the hand edit).
SPELLINGS = [
    ("torch-shard-overlap-check", upstream.SHARD_INTERNALS, SHARDS_DOC_END, "    return None\n"),
    ("torch-shard-overlap-check", upstream.SHARD_INTERNALS, SHARDS_DOC_END, "    pass\n    return\n"),
    ("torch-shard-overlap-check", upstream.SHARD_INTERNALS, SHARDS_DOC_END, "    return  # guide 6.1\n"),
    ("torch-shard-overlap-check", upstream.SHARD_INTERNALS, SHARDS_DOC_END, "    # guide 6.1\n    return None\n"),
    ("torch-global-plan-check", upstream.DEFAULT_PLANNER, PLANNER_DEF, "    return True  # guide 6.2\n"),
    ("torch-global-plan-check", upstream.DEFAULT_PLANNER, PLANNER_DEF, "    pass\n    return True\n"),
]
PROBE_LINE = "is_cuda_available = torch.cuda.is_available()\n"
SPELLINGS_5_1 = [
    "is_cuda_available = False\n",
    "# is_cuda_available = torch.cuda.is_available()\nis_cuda_available = False\n",
    "is_cuda_available = False  # torch.cuda.is_available()\n",
]


def adopt_and_revert(profile: Path, verl: Path, site: Path, pid: str, pristine: dict[str, str], guide: str) -> None:
    """status says hand-edited (the guide's section), apply adopts it, status then applied, revert gives upstream's
    bytes back."""
    selection = engine.select(
        Site(manifest.load_profile(str(profile)), "npu", roots={"verl": verl, "torch": site}), (pid,)
    )
    (status,) = engine.status(selection)
    assert (status.state, status.guide, status.hint) == ("hand-edited", guide, "ascendfix apply"), status.reason
    (applied,) = engine.apply(selection)
    assert (applied.state, applied.action) == ("applied", "adopted")
    assert engine.status(selection)[0].state == "applied"
    (reverted,) = engine.revert(selection)
    assert reverted.action == "reverted"
    assert shas(verl, site, pristine) == pristine


@pytest.mark.parametrize(("pid", "rel", "anchor", "hand"), SPELLINGS)
def test_every_spelling_of_the_guides_early_return_is_adopted(trees, pid, rel, anchor, hand):
    profile, verl, site, pristine = trees
    path = site / rel
    path.write_text(path.read_text().replace(anchor, anchor + hand, 1))
    adopt_and_revert(profile, verl, site, pid, pristine, "6.1" if "shard" in pid else "6.2")


@pytest.mark.parametrize("hand", SPELLINGS_5_1)
def test_every_spelling_of_the_guides_5_1_is_adopted(trees, hand):
    profile, verl, site, pristine = trees
    path = verl / DEVICE
    assert path.read_text().count(PROBE_LINE) == 1
    path.write_text(path.read_text().replace(PROBE_LINE, hand))
    adopt_and_revert(profile, verl, site, "verl-cuda-probe-off", pristine, "5.1")


@pytest.mark.parametrize("hand", ["    return None\n", "    pass\n    return\n", "    return  # guide 6.1\n"])
def test_a_hand_return_above_what_ascendfix_wrote_is_never_applied(trees, hand):
    profile, verl, site, pristine = trees
    selection = engine.select(
        Site(manifest.load_profile(str(profile)), "npu", roots={"torch": site}), ("torch-shard-overlap-check",)
    )
    engine.apply(selection)
    shards = site / upstream.SHARD_INTERNALS
    shards.write_text(shards.read_text().replace(SHARDS_DOC_END, SHARDS_DOC_END + hand, 1))
    (status,) = engine.status(selection)
    assert (status.state, status.reason_code) == ("drifted", "hand-edit-and-more")
    with pytest.raises(RefusedError):
        engine.apply(selection)


def test_a_hand_return_of_another_value_is_refused_naming_the_line_and_the_value(trees):
    profile, verl, site, pristine = trees
    planner = site / upstream.DEFAULT_PLANNER
    planner.write_text(planner.read_text().replace(PLANNER_DEF, PLANNER_DEF + "    return False\n", 1))
    line = 1 + planner.read_text().splitlines().index("    return False")
    (status,) = [s for s in engine.status(select(profile, verl, site)) if s.id == "torch-global-plan-check"]
    assert (status.state, status.reason_code) == ("drifted", "hand-edit-and-more")
    assert (
        f"line {line} returns False before _validate_global_plan() runs, where its callers need True" in status.reason
    )
    assert status.hint == f"in {upstream.DEFAULT_PLANNER}: make line {line} `return True`; then ascendfix apply"


def test_a_tab_indented_hand_return_names_its_line_and_revert_leaves_it(trees, ascendfix_cli):
    profile, verl, site, pristine = trees
    shards = site / upstream.SHARD_INTERNALS
    shards.write_text(shards.read_text().replace(SHARDS_DOC_END, SHARDS_DOC_END + "\treturn\n", 1))
    line = 1 + shards.read_text().splitlines().index("\treturn")
    (status,) = [s for s in engine.status(select(profile, verl, site)) if s.id == "torch-shard-overlap-check"]
    assert status.state == "drifted"
    assert f"line {line}: inconsistent use of tabs and spaces in indentation" in status.reason
    assert status.hint == (
        f"in {upstream.SHARD_INTERNALS}: indent line {line} with spaces, as the lines around it; then ascendfix apply"
    )
    before = sha(shards)
    reverted = ascendfix_cli("revert", "--profile", profile, "--root", f"torch={site}", "--root", f"verl={verl}")
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert sha(shards) == before  # nothing of ascendfix's was there


def test_a_hand_edit_saved_with_crlf_is_refused_saying_line_endings(trees):
    profile, verl, site, pristine = trees
    shards = site / upstream.SHARD_INTERNALS
    text = shards.read_text().replace(SHARDS_DOC_END, SHARDS_DOC_END + "    return\n", 1)
    shards.write_bytes(text.replace("\n", "\r\n").encode())
    (status,) = [s for s in engine.status(select(profile, verl, site)) if s.id == "torch-shard-overlap-check"]
    assert (status.state, status.reason_code) == ("drifted", "hand-edit-and-more")
    assert "saved with CRLF line endings" in status.reason and "no line differs but the line endings" in status.reason
    assert status.hint.startswith(f"convert {upstream.SHARD_INTERNALS} to LF line endings")


def test_a_hand_return_with_the_body_deleted_says_more_than_the_return_differs(trees):
    profile, verl, site, pristine = trees
    shards = site / upstream.SHARD_INTERNALS
    text = shards.read_text()
    start = text.index(SHARDS_DOC_END) + len(SHARDS_DOC_END)
    shards.write_text(text[:start] + "    return\n" + text[text.index("\ndef ", start) :])
    (status,) = [s for s in engine.status(select(profile, verl, site)) if s.id == "torch-shard-overlap-check"]
    assert (status.state, status.reason_code) == ("drifted", "hand-edit-and-more")
    assert "so something other than line 82 differs from upstream's (a line changed, added or deleted)" in status.reason
    assert "not exactly its text" not in status.reason


def test_status_of_upstreams_own_bytes_parses_nothing(trees):
    """A fresh node's first status: every file a known original, told from its hash alone (libcst never loads)."""
    profile, verl, site, pristine = trees
    code = (
        "import sys\nfrom ascendfix.patching import engine\nfrom ascendfix.profile import manifest\n"
        "from pathlib import Path\nfrom ascendfix.site import Site\n"
        f"site = Site(manifest.load_profile({str(profile)!r}), 'npu', roots={{'verl': Path({str(verl)!r}), "
        f"'torch': Path({str(site)!r})}})\n"
        "print(sorted({s.state for s in engine.status(engine.select(site))}), 'libcst' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # not-applied everywhere but the DAPO trainer, which the sdist does not hold; nothing parsed
    assert done.stdout.split("] ")[1].strip() == "False", done.stdout
    assert "'not-applied'" in done.stdout


def test_a_reinstall_without_a_dist_info_names_the_profiles_version(trees):
    """A bare ``pip install --force-reinstall torch`` would take the latest release over the profile's 2.7.1."""
    profile, verl, site, pristine = trees
    shutil.rmtree(site / "torch-2.7.1.dist-info")
    shards = site / upstream.SHARD_INTERNALS
    text = shards.read_text().replace(SHARDS_DOC_END, SHARDS_DOC_END + "    return\n", 1)
    shards.write_text(text + "# a local note\n")
    (status,) = [s for s in engine.status(select(profile, verl, site)) if s.id == "torch-shard-overlap-check"]
    assert (status.state, status.reason_code) == ("drifted", "hand-edit-and-more")
    assert status.hint == "pip install --force-reinstall --no-deps torch==2.7.1; then ascendfix apply"


def test_a_return_at_the_top_of_the_function_fast_validate_patches_is_never_applied(trees):
    """Whatever put it there, and with no record left to compare with: the marked patch below it never runs."""
    profile, verl, site, pristine = trees
    only = ("torch-shard-overlap-check",)
    selection = engine.select(Site(manifest.load_profile(str(profile)), "npu", roots={"torch": site}), only)
    engine.apply(selection)
    shutil.rmtree(site / ".ascendfix")
    shards = site / upstream.SHARD_INTERNALS
    head = ") -> Optional[tuple[int, int]]:\n"
    text = shards.read_text()
    at = text.index(head, text.index("def _find_nd_overlapping_shards(")) + len(head)
    shards.write_text(text[:at] + "    return None\n" + text[at:])
    line = 1 + shards.read_text()[:at].count("\n")
    (status,) = engine.status(selection)
    assert (status.state, status.reason_code) == ("drifted", "hand-edit-and-more")
    assert f"line {line} returns before _find_nd_overlapping_shards() runs, so fast-validate never runs" in (
        status.reason
    )
    assert status.hint == f"delete line {line} of {upstream.SHARD_INTERNALS}: the patch then runs as ascendfix wrote it"
