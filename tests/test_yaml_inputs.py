"""Hostile YAML and JSON files: every reader of a file partuner did not write answers one line.

Units files, plan files, NEST-C profiles and fusion configs (``partuner.yamlfile.read_yaml``)
and a kit's results (JSON) may come from anyone: nesting deeper than Python's stack, an integer
of thousands of digits, bytes that are not UTF-8 and plain syntax errors are each the reader's
own error naming the file (the CLI: one line, exit 2), never a traceback.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from partuner.cli import main
from partuner.errors import PartunerError, PlanFileError, ProfileError, UnitsFileError
from partuner.export import read_plan
from partuner.graph import load_model, zoo
from partuner.profile import ProfileStore
from partuner.profile.groups import parse_profile_configs
from partuner.profile.kit import import_results
from partuner.profile.nestc import import_nestc
from partuner.units import load_units

HOSTILE = {
    "deep": ("a: " + "[" * 5000 + "]" * 5000 + "\n").encode(),
    "long integer": ("a: " + "9" * 5000 + "\n").encode(),
    "not UTF-8": b"a: 1\n# caf\xe9\n",
    "syntax": b"a: [1,\n",
}
WORDS = {
    "deep": "nests deeper than partuner reads",
    "long integer": "5000 digits",
    "not UTF-8": "is not a UTF-8 text file",
    "syntax": "YAML syntax error at line 2",
}


def _readers(tmp_path):
    graph = load_model(zoo.build("branchy", image_size=32))
    store = ProfileStore(tmp_path / "p.db")
    return {
        "units file": (load_units, UnitsFileError),
        "plan file": (read_plan, PlanFileError),
        "NEST-C profile": (lambda p: import_nestc(store, p, graph, "fp"), ProfileError),
        "profile configs": (parse_profile_configs, ProfileError),
    }


@pytest.mark.parametrize("content", list(HOSTILE))
def test_every_yaml_reader_refuses_a_hostile_file_with_its_own_error(tmp_path, content):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(HOSTILE[content])
    for what, (read, error) in _readers(tmp_path).items():
        with pytest.raises(error) as got:
            read(bad)
        msg = str(got.value)
        assert str(bad) in msg and WORDS[content] in msg, (what, msg)
        assert "\n" not in msg and len(msg) < 300, (what, msg)


@pytest.mark.parametrize("content", list(HOSTILE))
def test_the_cli_answers_a_hostile_units_file_in_one_line(tmp_path, content):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(HOSTILE[content])
    r = CliRunner().invoke(main, ["units", "--units", str(bad)], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("partuner: error: "), r.output
    assert WORDS[content] in lines[0]


def test_a_folder_or_a_missing_file_is_named(tmp_path):
    for path in (tmp_path, tmp_path / "none.yaml"):
        with pytest.raises(ProfileError, match="folder, not a YAML file|not found"):
            parse_profile_configs(path)


def test_kit_results_nested_too_deep_are_not_json_to_partuner(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text("[" * 100_000 + "]" * 100_000)
    graph = load_model(zoo.build("branchy", image_size=32))
    with ProfileStore(tmp_path / "p.db") as store, pytest.raises(PartunerError, match="not JSON"):
        import_results(store, graph, bad)
