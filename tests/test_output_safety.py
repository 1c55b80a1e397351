"""No data loss through the output path, and clear messages where the file system says no.

The output may only be a regular file or a new path, and never one of the inputs, however it is
spelled; replacing a file keeps its owner, group and permissions (or replaces nothing); names the
OS refuses and inputs that shrink while they are copied are one clean line naming the file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from cli_runner import invoke
from conftest import CORPUS
from pte_devconst.util.atomic import TEMP_PREFIX

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(result, *fragments: str) -> str:
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.stderr, result.stdout)
    assert lines[0].startswith("pte-devconst: error: ") and "internal error" not in lines[0], lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _no_temporary_files(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.startswith(TEMP_PREFIX)]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    pte = tmp_path / "model.pte"
    shutil.copyfile(CORPUS / "v_g_external_copy.pte", pte)
    shutil.copyfile(CORPUS / "v_g_external_copy.ptd", tmp_path / "model.ptd")
    return pte


# --- the output must be a regular file or a new path ----------------------------------------------------

def _make_node(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        try:  # a null device of our own: never /dev/null itself, which a buggy tool would replace
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except (PermissionError, AttributeError):
            pytest.skip("creating a device node needs root")
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        os.chdir(path.parent)  # AF_UNIX paths are limited to about 100 bytes
        try:
            server.bind(path.name)
        finally:
            os.chdir(cwd)
        server.close()
    else:
        path.mkdir()


@pytest.mark.parametrize("kind, described", [("fifo", "a FIFO"), ("device", "a device"), ("socket", "a socket"),
                                             ("directory", "a directory")])
def test_an_output_that_is_not_a_regular_file_is_refused(kind: str, described: str, model: Path) -> None:
    node = model.parent / "node"
    _make_node(kind, node)
    before = os.lstat(node)
    _one_line(invoke("rewrite", model, "--ptd", model.with_suffix(".ptd"), "-o", node),
                     f"{node}: the output is {described}, not a regular file; refusing to replace it")
    after = os.lstat(node)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode) and after.st_ino == before.st_ino
    _no_temporary_files(model.parent)


def test_the_library_writer_refuses_a_non_regular_destination(tmp_path: Path) -> None:
    from pte_devconst.util.errors import OutputError
    from pte_devconst.schema.pte_file import open_pte
    from pte_devconst.schema.pte_writer import unchanged_segments, write_pte
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with open_pte(CORPUS / "v_a_dtypes_copy.pte") as pte, pytest.raises(OutputError, match="is a FIFO"):
        write_pte(fifo, pte.program, unchanged_segments(pte))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


# --- the output must not be an input, however it is spelled -----------------------------------------------

def _spellings(target: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    folder = target.parent
    monkeypatch.chdir(folder)
    (folder / "link").symlink_to(target.name)
    os.link(target, folder / "hard")
    (folder / "sub").mkdir()
    return [str(target), target.name, f"./{target.name}", f"sub/../{target.name}", "link", "hard"]


@pytest.mark.parametrize("which", ["ptd", "pte"])
def test_the_output_may_not_be_an_input(which: str, model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ptd = model.with_suffix(".ptd")
    target = ptd if which == "ptd" else model
    before = {p: _digest(p) for p in (model, ptd)}
    for spelling in _spellings(target, monkeypatch):
        result = invoke("rewrite", model, "--ptd", ptd, "-o", spelling)
        expected = "the output is the .ptd input" if which == "ptd" else "the output is the input"
        _one_line(result, f"{os.path.normpath(spelling)}: {expected} ", "; refusing to overwrite it")
        if which == "pte":
            assert result.stderr.rstrip().endswith("(pass --in-place to replace it)")
        assert {p: _digest(p) for p in (model, ptd)} == before, spelling
    _no_temporary_files(model.parent)


def test_in_place_may_not_write_over_the_ptd_either(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--in-place replaces the .pte; a .pte named like the .ptd (a hard link) is refused."""
    ptd = model.with_suffix(".ptd")
    twin = model.parent / "twin.pte"
    os.link(ptd, twin)
    before = _digest(ptd)
    _one_line(invoke("rewrite", "--in-place", twin, "--ptd", ptd), "the output is the .ptd input")
    assert _digest(ptd) == before


# --- replacing a file keeps its owner, group and mode ----------------------------------------------------

@pytest.mark.skipif(not IS_ROOT, reason="changing a file's owner needs root")
@pytest.mark.parametrize("how", ["--in-place", "-o"])
def test_replacing_keeps_owner_group_and_mode(how: str, model: Path) -> None:
    target = model if how == "--in-place" else model.parent / "out.pte"
    if how == "-o":
        shutil.copyfile(model, target)
    os.chown(target, 4321, 8765)
    os.chmod(target, 0o640)
    before = _digest(target)
    args = ["--in-place", model] if how == "--in-place" else [model, "-o", target]
    result = invoke("rewrite", *args, "--ptd", model.with_suffix(".ptd"))
    assert result.exit_code == 0, result.stderr
    info = os.stat(target)
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (4321, 8765, 0o640)
    assert _digest(target) != before  # it was rewritten, not skipped
    _no_temporary_files(model.parent)


@pytest.mark.skipif(not IS_ROOT, reason="giving a file to another owner needs root")
def test_an_owner_that_cannot_be_kept_replaces_nothing(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user who may not chown: refuse rather than hand the model to the current user."""
    os.chown(model, 4321, 8765)
    before = _digest(model)

    def not_permitted(fd: int, uid: int, gid: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchown", not_permitted)
    _one_line(invoke("rewrite", "--in-place", model, "--ptd", model.with_suffix(".ptd")),
              f"{model}: cannot keep its owner and group (uid 4321, gid 8765): not permitted",
              "the destination was left untouched")
    assert _digest(model) == before and os.stat(model).st_uid == 4321
    _no_temporary_files(model.parent)


# --- replacing a file keeps its extended attributes and POSIX ACL ---------------------------------------------

def _xattrs_supported(folder: Path) -> None:
    probe = folder / "xattr-probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, "user.pte-devconst-probe", b"1")
    except (OSError, AttributeError) as error:
        pytest.skip(f"this file system keeps no extended attributes here: {error}")
    finally:
        probe.unlink()


def _rewrite_over(how: str, model: Path) -> Path:
    """Rewrite ``model`` in place or with ``-o`` over an existing copy; the replaced file."""
    target = model if how == "--in-place" else model.parent / "out.pte"
    if how == "-o" and not target.exists():
        shutil.copyfile(model, target)
    return target


@pytest.mark.parametrize("how", ["--in-place", "-o"])
def test_replacing_keeps_user_extended_attributes(how: str, model: Path) -> None:
    _xattrs_supported(model.parent)
    target = _rewrite_over(how, model)
    os.setxattr(target, "user.origin", b"release-42")
    os.setxattr(target, "user.checksum.sha256", bytes(range(32)))
    before = _digest(target)
    args = ["--in-place", model] if how == "--in-place" else [model, "-o", target]
    result = invoke("rewrite", *args, "--ptd", model.with_suffix(".ptd"))
    assert result.exit_code == 0, result.stderr
    assert _digest(target) != before  # replaced, not skipped
    assert os.getxattr(target, "user.origin") == b"release-42"
    assert os.getxattr(target, "user.checksum.sha256") == bytes(range(32))
    _no_temporary_files(model.parent)


@pytest.mark.parametrize("how", ["--in-place", "-o"])
def test_replacing_keeps_the_posix_acl(how: str, model: Path) -> None:
    """An ACL entry that lets another account read the model survives the rewrite (as with ``sed -i``)."""
    import subprocess

    _xattrs_supported(model.parent)
    if shutil.which("setfacl") is None or shutil.which("getfacl") is None:
        pytest.skip("setfacl/getfacl are not installed (apt-get install acl)")
    target = _rewrite_over(how, model)
    os.chmod(target, 0o600)
    done = subprocess.run(["setfacl", "-m", "u:4321:r,g:8765:r", str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"setfacl failed here: {done.stderr.strip()}")
    acl = os.getxattr(target, "system.posix_acl_access")
    args = ["--in-place", model] if how == "--in-place" else [model, "-o", target]
    result = invoke("rewrite", *args, "--ptd", model.with_suffix(".ptd"))
    assert result.exit_code == 0, result.stderr
    assert os.getxattr(target, "system.posix_acl_access") == acl
    listing = subprocess.run(["getfacl", "-n", str(target)], capture_output=True, text=True).stdout
    assert "user:4321:r--" in listing and "group:8765:r--" in listing, listing
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640  # the ACL's mask shows in the group bits, as before
    _no_temporary_files(model.parent)


def test_an_extended_attribute_that_cannot_be_kept_replaces_nothing(model: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _xattrs_supported(model.parent)
    os.setxattr(model, "user.origin", b"release-42")
    before = _digest(model)

    def not_permitted(*args: object, **kwargs: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setxattr", not_permitted)
    _one_line(invoke("rewrite", "--in-place", model, "--ptd", model.with_suffix(".ptd")),
              f"{model}: cannot keep its extended attribute user.origin", "the destination was left untouched")
    assert _digest(model) == before and os.getxattr(model, "user.origin") == b"release-42"
    _no_temporary_files(model.parent)


# --- messages --------------------------------------------------------------------------------------------

def test_names_longer_than_the_os_allows(model: Path) -> None:
    long = model.parent / ("x" * 300 + ".pte")
    _one_line(invoke("rewrite", long), "x" * 50, "cannot read: File name too long")
    _one_line(invoke("rewrite", model, "--ptd", model.with_suffix(".ptd"), "-o", long),
              "x" * 50, "cannot write there: File name too long")
    result = invoke("check", long, model)  # every file is still reported
    assert result.exit_code == 2, result.stderr
    assert "File name too long" in result.stderr and "internal error" not in result.stderr + result.stdout
    assert "model.pte" in result.stdout
    _one_line(invoke("inspect", long), "File name too long")
    _no_temporary_files(model.parent)


@pytest.mark.parametrize("moves", [True, False], ids=["rewrite", "identity-copy"])
def test_an_input_that_shrinks_while_it_is_copied(moves: bool, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from pte_devconst.schema import pte_writer
    pte = tmp_path / "model.pte"
    shutil.copyfile(CORPUS / ("v_a_dtypes_copy.pte" if moves else "v_h_cpu_only.pte"), pte)
    out = tmp_path / "out.pte"
    out.write_bytes(b"previous output")
    real = pte_writer.copy_range

    def truncate_first(src_fd: int, offset: int, count: int, dst_fd: int) -> None:
        os.truncate(pte, offset)  # another process cuts the input just before the kernel copies it
        real(src_fd, offset, count, dst_fd)

    monkeypatch.setattr(pte_writer, "copy_range", truncate_first)
    _one_line(invoke("rewrite", pte, "-o", out), f"{pte}: the input ended ", "changed during the rewrite",
              f"the destination {out} was left untouched")
    assert out.read_bytes() == b"previous output"
    _no_temporary_files(tmp_path)


def test_an_input_that_shrinks_before_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The self-check reads the input again: an input cut after the copy is named, not blamed on the output."""
    from pte_devconst.rewriter import rewrite
    pte = tmp_path / "model.pte"
    shutil.copyfile(CORPUS / "v_a_dtypes_copy.pte", pte)
    out = tmp_path / "out.pte"
    real = rewrite.write_pte_to_fd

    def write_then_cut_the_input(*args, **kwargs):
        real(*args, **kwargs)
        os.truncate(pte, 1000)

    monkeypatch.setattr(rewrite, "write_pte_to_fd", write_then_cut_the_input)
    _one_line(invoke("rewrite", pte, "-o", out), f"{pte}: the input ended before byte ",
              "while the rewrite was checked: it changed during the rewrite",
              f"the destination {out} was left untouched")
    assert not out.exists()
    _no_temporary_files(tmp_path)
