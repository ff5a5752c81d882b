"""`kernelpack index`: the three release channels written from one release's wheels.

The wheels are small synthetic kernel wheels (`release_support`); what is checked is read
back with the real parsers: HTML with `html.parser`, metadata with `packaging`, wheels with
`zipfile`, RECORD hashes recomputed, the PyPI files with `twine check --strict`. Installing
from the site with pip and uv is tests/integration/test_release_channels.py.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from packaging.metadata import Metadata
from release_support import kernel_wheel, members, sdist

from kernelpack.cli import main
from kernelpack_runtime.record import BuildRecord, SkippedKernel

CLASSIC_TAG = "cp311-cp311-manylinux_2_34_x86_64"
URL = "https://example.org/whl/{cuda}/simple"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def _links(page: Path) -> dict[str, dict[str, str | None]]:
    parser = _Links()
    parser.feed(page.read_text())
    return {str(link["href"]).split("#")[0]: link for link in parser.links}


@pytest.fixture
def release(tmp_path: Path) -> Path:
    folder = tmp_path / "dist"
    kernel_wheel(folder, "cu130stable2.10", index_url=URL)
    kernel_wheel(folder, "cu130torch2.14.1", tag=CLASSIC_TAG)
    kernel_wheel(folder, "cu128stable2.10")
    sdist(folder)
    return folder


@pytest.fixture
def site(release: Path, tmp_path: Path) -> Path:
    out = tmp_path / "site"
    assert main(["index", str(release), "--out", str(out), "--default", "cu130stable2.10"]) == 0
    return out


def _record_ok(wheel: Path) -> None:
    """Every member is in RECORD with its real hash and size (RECORD itself without)."""
    content = members(wheel)
    (record_name,) = [n for n in content if n.endswith(".dist-info/RECORD")]
    rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(content[record_name].decode()))}
    assert set(rows) == set(content)
    for name, data in content.items():
        if name == record_name:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert rows[name] == [f"sha256={digest}", str(len(data))]


def test_each_cuda_label_gets_a_pep503_index_of_its_wheels(site: Path, release: Path) -> None:
    assert sorted(p.name for p in site.iterdir()) == [
        "cu128",
        "cu130",
        "kernelpack-index.json",
        "pypi",
        "variants",
    ]
    root = _links(site / "cu130" / "simple" / "index.html")
    assert list(root) == ["kpsyn/"]
    page = site / "cu130" / "simple" / "kpsyn"
    links = _links(page / "index.html")
    assert sorted(links) == sorted(p.name for p in release.glob("kpsyn-*+cu130*.whl"))
    for name, link in links.items():
        data = (page / name).read_bytes()
        assert data == (release / name).read_bytes()  # served as built
        assert link["href"] == f"{name}#sha256={hashlib.sha256(data).hexdigest()}"
        assert link["data-requires-python"] == ">=3.10"  # the parser unescapes &gt;
        metadata = (page / f"{name}.metadata").read_bytes()
        assert (
            metadata
            == members(page / name)[f"{name.split('-')[0]}-{name.split('-')[1]}.dist-info/METADATA"]
        )
        digest = f"sha256={hashlib.sha256(metadata).hexdigest()}"
        assert link["data-core-metadata"] == link["data-dist-info-metadata"] == digest
    assert "&gt;=3.10" in (page / "index.html").read_text()


def test_pypi_gets_the_default_variant_with_the_plain_version(site: Path, release: Path) -> None:
    pypi = site / "pypi"
    assert sorted(p.name for p in pypi.iterdir()) == [
        "kpsyn-0.2.0-cp310-abi3-manylinux_2_34_x86_64.whl",
        "kpsyn-0.2.0.tar.gz",
    ]
    assert (pypi / "kpsyn-0.2.0.tar.gz").read_bytes() == (
        release / "kpsyn-0.2.0.tar.gz"
    ).read_bytes()
    wheel = pypi / "kpsyn-0.2.0-cp310-abi3-manylinux_2_34_x86_64.whl"
    new = members(wheel)
    old = members(release / "kpsyn-0.2.0+cu130stable2.10-cp310-abi3-manylinux_2_34_x86_64.whl")
    renamed = {
        n.replace("kpsyn-0.2.0+cu130stable2.10.dist-info", "kpsyn-0.2.0.dist-info"): d
        for n, d in old.items()
    }
    assert set(new) == set(renamed)
    changed = {n for n in new if new[n] != renamed[n]}
    assert changed == {"kpsyn-0.2.0.dist-info/METADATA", "kpsyn-0.2.0.dist-info/RECORD"}
    meta = Metadata.from_email(new["kpsyn-0.2.0.dist-info/METADATA"], validate=True)
    assert str(meta.version) == "0.2.0"
    assert [str(r) for r in meta.requires_dist or []][-1] == "torch>=2.10"  # stays exact
    _record_ok(wheel)


def test_pypi_files_pass_twine_check_strict(site: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *sorted((site / "pypi").iterdir())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_variant_wheels_carry_variant_json_equal_to_the_index_file(site: Path) -> None:
    folder = site / "variants" / "simple" / "kpsyn"
    index = json.loads((folder / "kpsyn-0.2.0-variants.json").read_text())
    assert sorted(index["variants"]) == [
        "cu128stable2.10",
        "cu130stable2.10",
        "cu130torch2.14.1",
        "null",
    ]
    assert index["variants"]["null"] == {}
    assert index["variants"]["cu130torch2.14.1"] == {
        "nvidia": {
            "cuda_version_lower_bound": ["13.0"],
            "cuda_version_upper_bound": ["14"],
            "sm_arch": ["90_real"],
        },
        "abi_dependency": {"torch": ["2.14"]},
    }
    assert index["variants"]["cu128stable2.10"]["nvidia"]["cuda_version_upper_bound"] == ["13"]
    assert index["variants"]["cu130stable2.10"]["abi_dependency"] == {
        "torch": ["2.10", "2.11", "2.12", "2.13", "2.14"]
    }
    assert index["default-priorities"] == {"namespace": ["nvidia", "abi_dependency"]}
    labels = {}
    for wheel in folder.glob("*.whl"):
        content = members(wheel)
        infos = [n for n in content if n.endswith(".dist-info/variant.json")]
        stem = wheel.name[: -len(".whl")].split("-")
        if len(stem) == 5:  # a plain wheel, for installers without variants
            assert infos == []
            continue
        (info,) = infos
        assert info == "kpsyn-0.2.0.dist-info/variant.json"
        document = json.loads(content[info])
        assert document["providers"] == index["providers"]
        assert document["default-priorities"] == index["default-priorities"]
        ((label, properties),) = document["variants"].items()
        assert label == stem[-1]
        assert properties == index["variants"][label]
        labels[label] = wheel
        _record_ok(wheel)
    assert sorted(labels) == sorted(index["variants"])
    links = _links(folder / "index.html")
    assert "kpsyn-0.2.0-variants.json" in links
    assert "kpsyn-0.2.0-cp310-abi3-manylinux_2_34_x86_64.whl" in links


def test_null_variant_holds_no_library_and_says_why_with_the_install_line(site: Path) -> None:
    folder = site / "variants" / "simple" / "kpsyn"
    wheel = folder / "kpsyn-0.2.0-py3-none-any-null.whl"
    content = members(wheel)
    assert not [n for n in content if n.endswith(".so")]
    wheel_file = content["kpsyn-0.2.0.dist-info/WHEEL"].decode()
    assert "Root-Is-Purelib: true" in wheel_file
    assert [line for line in wheel_file.splitlines() if line.startswith("Tag:")] == [
        "Tag: py3-none-any"
    ]
    record = BuildRecord.loads(content["kpsyn/_kernelpack.json"])
    assert record.version == "0.2.0"
    (kernel,) = record.kernels.values()
    assert isinstance(kernel, SkippedKernel)
    assert kernel.reason.code == "not-selected"
    assert "null wheel variant" in kernel.reason.message
    assert (
        "pip install --extra-index-url https://example.org/whl/cu130/simple kpsyn==0.2.0"
        in kernel.reason.message
    )


def test_index_replaces_a_site_it_wrote(site: Path, release: Path) -> None:
    (release / "kpsyn-0.2.0+cu128stable2.10-cp310-abi3-manylinux_2_34_x86_64.whl").unlink()
    assert main(["index", str(release), "--out", str(site), "--default", "cu130stable2.10"]) == 0
    assert not (site / "cu128").exists()
    assert not list(site.parent.glob(".site.*"))


def test_single_label_is_the_default(tmp_path: Path) -> None:
    wheel = kernel_wheel(tmp_path / "d", "cu130stable2.10")
    assert main(["index", str(wheel), "--out", str(tmp_path / "s")]) == 0
    assert (
        json.loads((tmp_path / "s" / "kernelpack-index.json").read_text())["default"]
        == "cu130stable2.10"
    )


# --- bad input: one line, exit 2, nothing written ---------------------------------------------


def _refused(args: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    before = sorted(out.rglob("*")) if out.exists() else None
    assert main(["index", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kernelpack index: error: ")
    assert "Traceback" not in err
    assert (sorted(out.rglob("*")) if out.exists() else None) == before
    assert not list(out.parent.glob(f".{out.name}.*"))
    return err


def test_two_projects_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = kernel_wheel(tmp_path / "d", "cu130stable2.10")
    b = kernel_wheel(tmp_path / "d", "cu130stable2.10", name="other")
    err = _refused([str(a), str(b)], tmp_path / "s", capsys)
    assert "other" in err and "another release" in err


def test_two_versions_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kernel_wheel(tmp_path / "d", "cu130stable2.10")
    kernel_wheel(tmp_path / "d", "cu128stable2.10", version="0.3.0")
    err = _refused([str(tmp_path / "d")], tmp_path / "s", capsys)
    assert "0.3.0" in err and "0.2.0" in err


def test_default_no_wheel_has_is_refused(
    release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused([str(release), "--default", "cu126stable2.10"], tmp_path / "s", capsys)
    assert "cu126stable2.10" in err and "cu130stable2.10" in err


def test_several_labels_without_default_are_refused(
    release: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    err = _refused([str(release)], tmp_path / "s", capsys)
    assert "--default" in err


def test_a_wheel_kernelpack_did_not_build_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "d" / "plain-1.0-py3-none-any.whl"
    plain.parent.mkdir()
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr(
            "plain-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: plain\nVersion: 1.0\n"
        )
    err = _refused([str(plain)], tmp_path / "s", capsys)
    assert str(plain) in err and "not a kernelpack wheel" in err


def test_a_local_version_wheel_without_a_record_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = tmp_path / "d" / "plain-1.0+cu130stable2.10-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(
            "plain-1.0+cu130stable2.10.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: plain\nVersion: 1.0+cu130stable2.10\n",
        )
    err = _refused([str(wheel)], tmp_path / "s", capsys)
    assert "_kernelpack.json" in err


def test_a_corrupt_zip_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = kernel_wheel(tmp_path / "d", "cu130stable2.10")
    wheel.write_bytes(wheel.read_bytes()[:200])
    err = _refused([str(wheel)], tmp_path / "s", capsys)
    assert str(wheel) in err and "corrupt" in err


def test_an_output_folder_with_other_files_is_refused(
    release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    err = _refused([str(release), "--default", "cu130stable2.10"], out, capsys)
    assert "holds other files" in err
    assert (out / "notes.txt").read_text() == "mine"


def test_the_same_label_twice_for_one_platform_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kernel_wheel(tmp_path / "a", "cu130stable2.10")
    kernel_wheel(tmp_path / "b", "cu130stable2.10")
    err = _refused([str(tmp_path / "a"), str(tmp_path / "b")], tmp_path / "s", capsys)
    assert "same wheel" in err
