"""One declaration per manifest key (on `KernelSpec`'s fields) makes the key list, the JSON of
`check --json`, the docs table and `schema/kernels.schema.json`; the schema accepts every real
manifest and rejects what `check` rejects."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path

import jsonschema
import pytest
import tomllib

from kernelpack.errors import ManifestError
from kernelpack.project import _schema
from kernelpack.project.manifest import KERNEL_KEYS, KEYS, KernelSpec, load
from kernelpack.project.settings import SETTINGS_KEYS, Settings
from kernelpack.scaffold.new import Scaffold

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "manifests"

REAL_MANIFESTS = {
    "llm_ops": ROOT / "examples" / "llm_ops" / "llm_ops" / "kernels.toml",
    "kpdemo": ROOT / "tests" / "integration" / "packages" / "kpdemo" / "kpdemo" / "kernels.toml",
    # prime-kernels, the seed's package, as it is and with its commented-out kernel put back
    "prime_kernels": DATA / "prime_kernels.toml",
    "prime_kernels_rmsnorm": DATA / "prime_kernels_rmsnorm.toml",
}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads((ROOT / _schema.SCHEMA).read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _errors(validator: jsonschema.Draft7Validator, text: str) -> list[str]:
    return [error.message for error in validator.iter_errors(tomllib.loads(text))]


def test_published_schema_is_generated_from_the_declarations() -> None:
    published = (ROOT / _schema.SCHEMA).read_text(encoding="utf-8")
    assert published == _schema.schema_text(), "run: python -m kernelpack.project._schema --write"


def test_docs_table_is_generated_from_the_declarations() -> None:
    docs = (ROOT / _schema.DOCS).read_text(encoding="utf-8")
    assert _schema.docs_text(docs) == docs, "run: python -m kernelpack.project._schema --write"


def test_docs_table_lists_exactly_the_kernel_keys() -> None:
    docs = (ROOT / _schema.DOCS).read_text(encoding="utf-8")
    table = docs.split("<!-- keys:begin", 1)[1].split("<!-- keys:end -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(KERNEL_KEYS)


def test_kernel_keys_are_the_declared_fields() -> None:
    declared = [f.metadata["key"].name for f in fields(KernelSpec) if "key" in f.metadata]
    assert list(KERNEL_KEYS) == declared == [key.name for key in KEYS]
    assert len(set(KERNEL_KEYS)) == len(KERNEL_KEYS)
    # the keys of the seed's manifests are all there: those manifests build unchanged
    seed = {"description", "ops", "sources", "include-dirs", "arch", "cxx-std", "cxx-flags"}
    assert seed | {"nvcc-flags"} <= set(KERNEL_KEYS)


def test_schema_has_one_property_per_key_and_requires_sources() -> None:
    kernel = _schema.kernels_schema()["definitions"]["kernel"]
    assert list(kernel["properties"]) == list(KERNEL_KEYS)
    assert kernel["required"] == ["sources"]
    assert kernel["additionalProperties"] is False


def test_to_json_holds_every_key_by_field_name(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "k" / "csrc").mkdir(parents=True)
    (tmp_path / "pkg" / "k" / "csrc" / "k.cu").write_text("// k\n")
    manifest = tmp_path / "pkg" / "kernels.toml"
    manifest.write_text('[k]\nsources = ["csrc/k.cu"]\narch = "9.0a"\nabi = "stable"\n')
    (spec,) = load(manifest).kernels
    values = spec.to_json()
    assert list(values) == [f.name for f in fields(KernelSpec) if "key" in f.metadata]
    assert values["sources"] == ["csrc/k.cu"]
    assert values["stable_target"] == "2.10"
    assert values["arch"] == {"*": ["9.0a"]}
    json.dumps(values)


@pytest.mark.parametrize("name", sorted(REAL_MANIFESTS))
def test_schema_accepts_real_manifest(validator: jsonschema.Draft7Validator, name: str) -> None:
    text = REAL_MANIFESTS[name].read_text(encoding="utf-8")
    assert _errors(validator, text) == []


@pytest.mark.parametrize("abi", ["stable", "torch"])
def test_schema_accepts_the_manifest_kernelpack_new_writes(
    validator: jsonschema.Draft7Validator, tmp_path: Path, abi: str
) -> None:
    scaffold = Scaffold.create(tmp_path / "my-ops", "scale", abi=abi, arch="8.0,9.0a")
    text = next(t for p, t in scaffold.files().items() if p.name == "kernels.toml")
    assert _errors(validator, text) == []


GOOD = '[k]\nsources = ["csrc/k.cu"]\narch = "9.0a"\n'


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param('abii = "stable"\n', id="unknown-key"),
        pytest.param('abi = "abi3"\n', id="abi"),
        pytest.param('arch = "9.5"\n', id="arch"),
        pytest.param("cxx-std = 14\n", id="cxx-std"),
        pytest.param('defines = { X = "$(touch pwned)" }\n', id="define-substitution"),
        pytest.param('defines = { "A-B" = "1" }\n', id="define-name"),
        pytest.param('nvcc-flags = ["-Xcompiler", "-DY=`id`"]\n', id="flag-backquote"),
        pytest.param('cxx-flags = ["-O3 -g"]\n', id="flag-space"),
        pytest.param('include-dirs = ["a b"]\n', id="path-space"),
        pytest.param('platforms = ["ppc64le"]\n', id="platform"),
        pytest.param('min-cuda = "twelve"\n', id="version"),
    ],
)
def test_schema_rejects_what_check_rejects(
    validator: jsonschema.Draft7Validator, extra: str
) -> None:
    text = GOOD.replace('arch = "9.0a"\n', "") if extra.startswith("arch") else GOOD
    assert _errors(validator, text + extra) != []


def test_schema_rejects_a_kernel_name_that_is_not_an_identifier(
    validator: jsonschema.Draft7Validator,
) -> None:
    assert _errors(validator, GOOD.replace("[k]", '["a b"]')) != []


def test_check_option_reports_drift_and_write_repairs_it(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / _schema.DOCS, tmp_path / _schema.DOCS)
    assert _schema.main([str(tmp_path), "--check"]) == 1  # no schema files yet
    assert _schema.main([str(tmp_path), "--write"]) == 0
    assert _schema.main([str(tmp_path), "--check"]) == 0
    docs = tmp_path / _schema.DOCS
    docs.write_text(docs.read_text().replace("| `ptx` |", "| `ptx-old` |"))
    assert _schema.main([str(tmp_path), "--check"]) == 1


# --- [tool.kernelpack]: declared on Settings the same way --------------------------------

PYPROJECTS = {
    "llm_ops": ROOT / "examples" / "llm_ops" / "pyproject.toml",
    "kpdemo": ROOT / "tests" / "integration" / "packages" / "kpdemo" / "pyproject.toml",
}


@pytest.fixture(scope="module")
def settings_validator() -> jsonschema.Draft7Validator:
    schema = json.loads((ROOT / _schema.SETTINGS_SCHEMA).read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_published_settings_schema_is_generated_from_the_declarations() -> None:
    published = (ROOT / _schema.SETTINGS_SCHEMA).read_text(encoding="utf-8")
    assert published == _schema.schema_text(_schema.settings_schema())


def test_settings_keys_are_the_declared_fields_and_the_docs_rows() -> None:
    declared = [f.metadata["key"].name for f in fields(Settings) if "key" in f.metadata]
    assert list(SETTINGS_KEYS) == declared
    docs = (ROOT / _schema.DOCS).read_text(encoding="utf-8")
    table = docs.split("<!-- settings:begin", 1)[1].split("<!-- settings:end -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == declared


@pytest.mark.parametrize("name", sorted(PYPROJECTS))
def test_settings_schema_accepts_real_projects(
    settings_validator: jsonschema.Draft7Validator, name: str
) -> None:
    data = tomllib.loads(PYPROJECTS[name].read_text(encoding="utf-8"))
    table = data.get("tool", {}).get("kernelpack", {})
    assert list(settings_validator.iter_errors(table)) == []


@pytest.mark.parametrize(
    "table",
    [{"abii": "stable"}, {"abi": "abi3"}, {"env-prefix": "LLM OPS"}, {"deps": {"x": "a b"}}],
)
def test_settings_schema_rejects_what_settings_reject(
    settings_validator: jsonschema.Draft7Validator, tmp_path: Path, table: dict[str, object]
) -> None:
    assert list(settings_validator.iter_errors(table)) != []
    with pytest.raises(ManifestError):
        Settings.from_table(table, tmp_path / "pyproject.toml")
