"""Issue 40, class 1: ownership of output folders, tested as a class (cli.outputs, cli.publish).

A directory is ours only if it holds our marker: any other entry, hidden or not, makes it foreign; a home folder,
the repository root and a version-control working tree are never ours; publishing never swaps a directory that
holds entries we did not write (it writes into it, or refuses); cleanups delete only what they created, by recorded
identity. The issue's probes (a home folder of dotfiles given to `python -m evaluate --overwrite --output ~`, a fresh
`git init` project given to `evaluate curve --output`, an entry that cannot be moved back after a swap) are the
CLI cases below, on folders under tmp_path standing in for ~ and the project (HOME is pointed at the stand-in).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from cli import DirectoryLock, OutputLock, discard_staging, publish_dir, read_marker, staging_dir, write_marker
from cli.guard import run_failure_cleanups
from cli.outputs import (KINDS, MARKER, PROJECT_ROOT, VCS_FOLDERS, check_ours, check_output_dir, never_ours,
                         require_ours)
from cli.publish import STAGING_RECORD, remove_ours, stale_staging
from conftest import ROOT, one_error_line, run_cli

DOTFILES = (".bashrc", ".profile", ".env", ".gitconfig", ".vimrc", ".zshrc", ".npmrc", ".netrc", ".lesshst",
            ".viminfo", ".python_history")
"""The home folder of the issue's probe: only hidden entries."""


def state(path: Path) -> dict:
    """{relative path: (kind, mode, sha256 or link target)} of everything under `path`, plus the inode of `path`
    itself (a directory replaced by another shows): what 'unchanged' means here."""
    if not os.path.lexists(path):
        return {}
    out = {"": ("inode", os.lstat(path).st_ino)}
    for p in sorted(path.rglob("*")):
        st = os.lstat(p)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out[str(p.relative_to(path))] = ("link", mode, os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[str(p.relative_to(path))] = ("dir", mode, None)
        else:
            out[str(p.relative_to(path))] = ("file", mode, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def fake_home(root: Path, extra: bool = True) -> Path:
    """A stand-in home folder holding only dotfiles (and a hidden folder with a read-only file)."""
    home = root / "home"
    home.mkdir()
    for name in DOTFILES:
        (home / name).write_text(f"{name} of the user\n")
    if extra:
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_ed25519").write_text("key\n")
        (home / ".ssh" / "id_ed25519").chmod(0o400)
    return home


def git_project(root: Path) -> Path:
    """A fresh `git init` project with a .env (a .git folder made by hand where git is not installed)."""
    proj = root / "proj"
    proj.mkdir()
    if shutil.which("git"):
        env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}  # not the stand-in ~
        subprocess.run(["git", "init", "-q", str(proj)], check=True, env=env)
    else:
        (proj / ".git").mkdir()
        (proj / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (proj / ".env").write_text("SECRET=1\n")
    return proj


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def marked(path: Path, kind: str = "report", files=("report.json", "report.md")) -> Path:
    """An output directory of ours (its marker and an earlier set)."""
    path.mkdir(parents=True, exist_ok=True)
    write_marker(path, kind)
    for name in files:
        (path / name).write_text(f"old {name}\n")
    return path


# =========================================================================== what is ours


@pytest.mark.parametrize("entry", [".env", ".config/", ".DS_Store", ".l2e-staging", ".write-probe-x", "notes.txt"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_any_entry_without_our_marker_makes_a_folder_foreign(entry, kind, tmp_path):
    """Hidden or not, one entry in an unmarked folder: every check refuses it, naming the entry."""
    out = tmp_path / "out"
    out.mkdir()
    (out / entry.rstrip("/")).mkdir() if entry.endswith("/") else (out / entry).write_text("theirs")
    before = state(tmp_path)
    for check in (lambda: check_ours(out, kind, ValueError), lambda: check_ours(out, None, ValueError),
                  lambda: check_output_dir(out, kind, "own.json", True, ValueError),
                  lambda: OutputLock(out, ValueError), lambda: OutputLock(out, ValueError, kind)):
        with pytest.raises(ValueError, match="is not marked as") as e:
            check()
        assert entry.rstrip("/") in str(e.value) and "\n" not in str(e.value)
    assert state(tmp_path) == before


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_empty_folder_or_one_with_our_marker_is_ours(kind, tmp_path):
    empty, ours = tmp_path / "empty", marked(tmp_path / "ours", kind, (".hidden-note", "own.json"))
    empty.mkdir()
    for out in (empty, ours, tmp_path / "new"):
        check_ours(out, kind, ValueError)
        check_ours(out, None, ValueError)
        check_output_dir(out, kind, "own.json", True, ValueError)
    OutputLock(ours, ValueError, kind).release(failed=True)
    assert (ours / "own.json").exists() and read_marker(ours) == kind  # a folder it did not create stays
    other = next(k for k in KINDS if k != kind)
    with pytest.raises(ValueError, match=KINDS[other]):
        check_ours(ours, other, ValueError)


def test_never_ours_names_the_home_folder_the_repository_root_and_working_trees(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    link = tmp_path / "link-to-home"
    link.symlink_to(home)
    assert never_ours(home) == never_ours(link) == never_ours(f"{home}/.") == "your home folder ($HOME)"
    assert never_ours("/") == "the filesystem root"
    assert never_ours(ROOT) == "the root of this project's repository" and PROJECT_ROOT == ROOT
    for vcs in (".git", ".hg", ".svn"):
        tree = tmp_path / f"tree{vcs}"
        tree.mkdir()
        (tree / vcs).mkdir()
        assert never_ours(tree) == f"a version-control working tree (it holds {vcs})"
    worktree = tmp_path / "worktree"  # a linked git worktree or submodule: .git is a file
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: /elsewhere\n")
    assert never_ours(worktree) is not None
    assert never_ours(tmp_path) is None and never_ours(tmp_path / "new") is None and ".git" in VCS_FOLDERS


@pytest.mark.parametrize("where", ["home", "empty home", "git project", "marked git project", "repository root"])
def test_a_folder_that_is_never_ours_is_refused_even_empty_or_marked(where, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    if where == "home":
        out = fake_home(tmp_path)
    elif where == "empty home":
        out = home
        out.mkdir()
    elif where == "repository root":
        out = ROOT  # checks only: each refuses before it writes anything
    else:
        out = git_project(tmp_path)
        if where == "marked git project":
            write_marker(out, "report")
    before = state(out) if out != ROOT else None
    for kind in KINDS:
        for check in (lambda: check_ours(out, kind, ValueError), lambda: require_ours(out, kind, ValueError),
                      lambda: check_output_dir(out, kind, "own.json", True, ValueError),
                      lambda: OutputLock(out, ValueError, kind), lambda: OutputLock(out, ValueError)):
            with pytest.raises(ValueError, match="never an output directory of ours"):
                check()
    if out != ROOT:
        assert state(out) == before


# =========================================================================== publishing


def test_a_folder_of_ours_holding_only_its_set_is_swapped_in_as_a_whole(tmp_path):
    out = marked(tmp_path / "out")
    out.chmod(0o750)
    stage = staging_dir(out)
    assert sorted(p.name for p in stage.iterdir()) == [STAGING_RECORD]
    (stage / "report.json").write_text("new")
    publish_dir(stage, out, ("report.json", "report.md"), kind="report")
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "report.json"]  # report.md: replaced, not carried
    assert (out / "report.json").read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o750
    assert siblings(out) == ["out"]
    discard_staging(stage)  # what evaluate.run does after publishing: a no-op now
    run_failure_cleanups()
    assert (out / "report.json").read_text() == "new" and siblings(out) == ["out"]


def test_a_folder_holding_entries_of_others_is_written_into_never_swapped(tmp_path):
    """Hidden, visible and read-only entries that are not ours stay as they are (same directory, same inode); the
    old set's entries are replaced; an old entry of the set that the new one lacks is dropped when `replaced`."""
    out = marked(tmp_path / "out", files=("report.json", "ess.png"))
    (out / ".git-crypt").mkdir()
    (out / "notes.md").write_text("mine")
    (out / "ro.txt").write_text("read-only")
    (out / "ro.txt").chmod(0o444)
    (out / "ro-dir").mkdir()
    (out / "ro-dir" / "x").write_text("x")
    (out / "ro-dir").chmod(0o555)
    theirs = {k: v for k, v in state(out).items() if k.split("/")[0] in (".git-crypt", "notes.md", "ro.txt", "ro-dir")}
    inode = out.stat().st_ino
    stage = staging_dir(out)
    (stage / "report.json").write_text("new")
    (stage / "samples").mkdir()
    (stage / "samples" / "a.nc").write_text("draws")
    publish_dir(stage, out, ("report.json", "ess.png", "samples"), kind="report")
    after = state(out)
    assert out.stat().st_ino == inode and {k: after[k] for k in theirs} == theirs
    assert (out / "report.json").read_text() == "new" and (out / "samples" / "a.nc").read_text() == "draws"
    assert not (out / "ess.png").exists() and read_marker(out) == "report" and siblings(out) == ["out"]
    (out / "ro-dir").chmod(0o755)


def test_a_set_without_a_marker_keeps_the_folders_marker(tmp_path):
    out = marked(tmp_path / "out", "card", ("card.json",))
    stage = staging_dir(out)
    (stage / "card.json").write_text("new")
    publish_dir(stage, out, ("card.json",))  # kind None: the set has no marker of its own
    assert read_marker(out) == "card" and (out / "card.json").read_text() == "new" and siblings(out) == ["out"]


def _failing_rename(monkeypatch, name: str, calls: list | None = None):
    """os.rename failing with EBUSY (a mount point's error) whenever its source is named `name`."""
    real = os.rename

    def rename(src, dst, *a, **k):
        if calls is not None:
            calls.append(Path(src).name)
        if Path(src).name == name:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(src))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "rename", rename)


def test_an_entry_that_cannot_be_moved_is_never_touched(tmp_path, monkeypatch):
    """The issue's data loss: a foreign entry that cannot be moved (a mount point) in a folder we publish into. It
    is never moved (nor deleted by any cleanup), and the publish succeeds around it."""
    out = marked(tmp_path / "out")
    for name in DOTFILES:
        (out / name).write_text(name)
    (out / ".mnt").mkdir()
    (out / ".mnt" / "data.bin").write_text("on another filesystem")
    theirs = {k: v for k, v in state(out).items() if k.startswith((".mnt", *DOTFILES))}
    calls: list = []
    _failing_rename(monkeypatch, ".mnt", calls)
    stage = staging_dir(out)
    (stage / "report.json").write_text("new")
    publish_dir(stage, out, ("report.json",), kind="report")
    discard_staging(stage)
    run_failure_cleanups()
    assert ".mnt" not in calls and not set(calls) & set(DOTFILES)
    after = state(out)
    assert {k: after[k] for k in theirs} == theirs and (out / "report.json").read_text() == "new"
    assert siblings(out) == ["out"]


@pytest.mark.parametrize("stuck", ["report.md", "report.json"])
def test_a_set_entry_that_cannot_be_moved_undoes_the_publish(stuck, tmp_path, monkeypatch):
    """One of our own entries cannot be moved (report.md: the old one, moved aside; report.json: the new one, moved
    in): the publish raises, every move is undone, and the failure cleanups remove only the staging folder."""
    out = marked(tmp_path / "out")
    (out / ".env").write_text("theirs")
    before = state(out)
    stage = staging_dir(out)
    (stage / "report.json").write_text("new")
    (stage / "report.md").write_text("new")
    if stuck == "report.json":  # the new one: stuck in the staging folder
        _failing_rename(monkeypatch, "report.json")
    else:
        real = os.rename
        monkeypatch.setattr(os, "rename", lambda s, d, *a, **k: (
            (_ for _ in ()).throw(OSError(errno.EBUSY, "busy", str(s)))
            if Path(s).name == "report.md" and Path(s).parent == out else real(s, d, *a, **k)))
    with pytest.raises(OSError):
        publish_dir(stage, out, ("report.json", "report.md"), kind="report")
    monkeypatch.undo()
    assert state(out) == before and (out / "report.json").read_text() == "old report.json\n"
    discard_staging(stage)
    run_failure_cleanups()
    assert state(out) == before and siblings(out) == ["out"]


def test_a_foreign_entry_added_during_a_swap_is_kept(tmp_path, monkeypatch):
    """A user's file written into the folder between the check and the swap (a race) lands in the swapped-out
    directory; it is moved back, or, when that fails, the directory is kept (without its record) and named."""
    import cli.publish as publish

    real_exchange = publish._exchange

    def exchange(a, b):
        (b / ".late").write_text("written meanwhile")
        return real_exchange(a, b)

    monkeypatch.setattr(publish, "_exchange", exchange)
    out = marked(tmp_path / "out", files=("report.json",))
    stage = staging_dir(out)
    (stage / "report.json").write_text("new")
    publish_dir(stage, out, ("report.json",), kind="report")
    assert (out / ".late").read_text() == "written meanwhile" and siblings(out) == ["out"]

    (out / ".late").unlink()
    _failing_rename(monkeypatch, ".late")
    stage = staging_dir(out)
    (stage / "report.json").write_text("newer")
    with pytest.raises(OSError, match="could not be moved back"):
        publish_dir(stage, out, ("report.json",), kind="report")
    run_failure_cleanups()
    kept = [p for p in out.parent.iterdir() if p.name != "out"]
    assert (out / "report.json").read_text() == "newer" and len(kept) == 1
    assert (kept[0] / ".late").read_text() == "written meanwhile" and not (kept[0] / STAGING_RECORD).exists()
    assert stale_staging(out) == [] and kept[0].is_dir()  # without its record, never removed as stale


def test_two_renames_where_the_filesystem_cannot_exchange(tmp_path, monkeypatch):
    import cli.publish as publish

    monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    out = marked(tmp_path / "out", files=("report.json",))
    stage = staging_dir(out)
    (stage / "report.json").write_text("new")
    real = os.rename
    monkeypatch.setattr(os, "rename", lambda s, d, *a, **k: (
        (_ for _ in ()).throw(OSError(errno.EIO, "I/O error", str(s))) if Path(s) == stage else real(s, d, *a, **k)))
    before = state(out)
    with pytest.raises(OSError):  # the second rename fails: the old directory is put back
        publish_dir(stage, out, ("report.json",), kind="report")
    monkeypatch.setattr(os, "rename", real)
    run_failure_cleanups()
    assert state(out) == before and siblings(out) == ["out"]
    stage = staging_dir(out)
    (stage / "report.json").write_text("new")
    publish_dir(stage, out, ("report.json",), kind="report")
    assert (out / "report.json").read_text() == "new" and siblings(out) == ["out"]


def test_publishing_refuses_folders_that_are_not_ours_and_set_entries_that_are_mount_points(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for out in (fake_home(tmp_path), git_project(tmp_path)):
        before = state(out)
        stage = staging_dir(out)
        (stage / "report.json").write_text("new")
        with pytest.raises(ValueError, match="refusing to publish into it"):
            publish_dir(stage, out, ("report.json",), kind="report")
        discard_staging(stage)
        assert state(out) == before and not [n for n in siblings(out) if n.startswith(".")]
    out = marked(tmp_path / "out", files=("report.json",))
    (out / "samples").mkdir()
    before = state(out)
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out / "samples" or real(p))
    stage = staging_dir(out)
    (stage / "samples").mkdir()
    with pytest.raises(ValueError, match="is a mount point"):
        publish_dir(stage, out, ("samples",), kind="report")
    discard_staging(stage)
    assert state(out) == before
    with pytest.raises(ValueError, match="not a staging directory"):
        publish_dir(tmp_path / "proj", out, ())


# =========================================================================== cleanups delete only their own


def test_remove_ours_stays_on_its_filesystem_and_off_links(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    tree = tmp_path / "tree"
    (tree / "a" / "mnt").mkdir(parents=True)
    (tree / "a" / "mnt" / "data").write_text("mounted")
    (tree / "a" / "file").write_text("ours")
    (tree / "link").symlink_to(outside)
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == tree / "a" / "mnt" or real(p))
    assert remove_ours(tree) is False  # the mount point and the folders above it stay
    assert (tree / "a" / "mnt" / "data").read_text() == "mounted" and not (tree / "a" / "file").exists()
    assert not (tree / "link").exists() and (outside / "keep").read_text() == "keep"
    monkeypatch.undo()
    assert remove_ours(tree) is True and not tree.exists()


def test_discarding_a_staging_folder_removes_only_the_folder_it_created(tmp_path):
    out = tmp_path / "out"
    stage = staging_dir(out)
    shutil.rmtree(stage)
    stage.mkdir()  # another directory at the same path: not the one staging_dir created
    (stage / "theirs").write_text("x")
    discard_staging(stage)
    assert (stage / "theirs").read_text() == "x"
    stage2 = staging_dir(out)
    (stage2 / "half.json").write_text("x")
    run_failure_cleanups()  # the guard's cleanups: the staging folder it created goes
    assert not stage2.exists()


def test_the_output_lock_removes_only_the_directory_it_created(tmp_path):
    out = tmp_path / "out"
    lock = OutputLock(out, ValueError, "report")
    lock.lock.release()
    out.rmdir()
    out.mkdir()  # replaced meanwhile by someone else's directory
    (out / "theirs").write_text("x")
    lock.release(failed=True)
    assert (out / "theirs").read_text() == "x"
    new = tmp_path / "new"
    lock = OutputLock(new, ValueError, "report")
    write_marker(new, "report")
    lock.release(failed=True)
    assert not new.exists()


# =========================================================================== the command lines (the probes)


def _cases(tmp_path: Path) -> dict:
    merge = ["--merge", ROOT / "results" / "curve_transient", "--merge", ROOT / "results" / "curve_smile"]
    return {
        "evaluate": ("evaluate", ["--preset", "smoke", "--set", "methods=sghmc", "--quiet", "--overwrite"]),
        "reference": ("evaluate", ["reference", "--preset", "smoke", "--quiet", "--overwrite"]),
        "card": ("evaluate", ["card", "--quiet", "--overwrite"]),
        "curve": ("evaluate", ["curve", *merge, "--overwrite", "--quiet"]),
        "meta_train": ("meta_train", ["--preset", "smoke", "--no-progress", "--overwrite"]),
    }


@pytest.mark.parametrize("where", ["home", "hidden-only", "git project", "empty home"])
@pytest.mark.parametrize("which", ["evaluate", "reference", "card", "curve", "meta_train"])
def test_every_cli_refuses_a_folder_that_is_not_ours(which, where, tmp_path, monkeypatch):
    """`--overwrite --output ~` (a home folder of dotfiles, or an empty one), a folder of hidden files, a fresh git
    project: one error line, exit 2, nothing changed (the inode of the folder included)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if where == "home":
        out = fake_home(tmp_path)
    elif where == "empty home":
        out = tmp_path / "home"
        out.mkdir()
    elif where == "git project":
        out = git_project(tmp_path)
    else:
        out = tmp_path / "dotfiles"
        out.mkdir()
        (out / ".env").write_text("SECRET=1\n")
    tool, argv = _cases(tmp_path)[which]
    before = state(tmp_path)
    line = one_error_line(run_cli(tool, *argv, "--output", out))
    why = {"home": "your home folder", "empty home": "your home folder", "git project": "version-control working tree",
           "hidden-only": "is not empty" if which == "meta_train" else ".env"}[where]  # meta_train's own rule
    assert str(out) in line and why in line, line
    assert state(tmp_path) == before


def test_the_selection_check_refuses_hidden_only_folders(tmp_path, monkeypatch):
    from base.io import ConfigError
    from evaluate.select_cli import check_selection_output

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for out in (fake_home(tmp_path), git_project(tmp_path)):
        with pytest.raises(ConfigError):
            check_selection_output(out, True, tmp_path / "run")


@pytest.mark.slow
def test_a_curve_merge_into_a_folder_of_ours_with_other_entries_writes_into_it(tmp_path):
    """Succeeds as documented: a folder of ours with a user's notes and hidden files gets the new set in place."""
    out = marked(tmp_path / "curves", "curve", ("curve.json", "curve.md"))
    (out / "NOTES.md").write_text("mine")
    (out / ".keep").write_text("")
    inode = out.stat().st_ino
    proc = run_cli("evaluate", "curve", "--merge", ROOT / "results" / "curve_power_plant_long_merged", "--reference",
                   ROOT / "results" / "references", "--overwrite", "--quiet", "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_ino == inode and (out / "NOTES.md").read_text() == "mine" and (out / ".keep").exists()
    assert json.loads((out / "curve.json").read_text())["merged"] and siblings(out) == ["curves"]
