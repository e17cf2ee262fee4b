"""What the start-up and output speed-ups of issue 8 may not change: pydantic's plugin answer (the
stand-in loader), the YAML bytes (libyaml's emitter only where it writes what PyYAML's Python one
writes) and the console script's output and exit codes (its ``os._exit`` ending)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from gpustack_operator import api
from gpustack_operator.cli import C_EMITTER_KEY_MAX, c_emits_alike
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import HOSTS, run_cli

YAML_OPTIONS = {"sort_keys": False, "default_flow_style": False, "allow_unicode": True}


def _in_fresh_python(code: str, **env: str) -> dict[str, object]:
    """Run ``code`` in a new interpreter (this one has pydantic's loader loaded); it prints JSON."""
    full_env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, check=True)
    answer: dict[str, object] = json.loads(proc.stdout)
    return answer


PROBE = """
import json, os, sys
from gpustack_operator import api
from gpustack_operator.pydantic_plugins import LOADER, _StandIn
from pydantic.plugin._schema_validator import create_schema_validator  # noqa: F401
stood_in = isinstance(sys.modules.get(LOADER), _StandIn)
metadata_before = "importlib.metadata" in sys.modules
from pydantic.plugin import _loader
off = list(_loader.get_plugins())
os.environ["PYDANTIC_DISABLE_PLUGINS"] = ""
on = [type(p).__name__ for p in _loader.get_plugins()]
handed_over = not isinstance(sys.modules.get(LOADER), _StandIn)
print(json.dumps({"stood_in": stood_in, "metadata_before": metadata_before, "off": off, "on": on,
                  "handed_over": handed_over, "metadata_after": "importlib.metadata" in sys.modules}))
"""


def test_plugins_off_are_answered_without_importlib_metadata() -> None:
    got = _in_fresh_python(PROBE, PYDANTIC_DISABLE_PLUGINS="__all__")
    assert got["stood_in"] is True
    assert got["metadata_before"] is False
    assert got["off"] == []
    # plugins turned back on later: pydantic's own loader answers, from then on
    assert got["handed_over"] is True
    assert got["metadata_after"] is True


@pytest.mark.parametrize("value", [None, "", "some_plugin"])
def test_nothing_is_stood_in_unless_plugins_are_off(value: str | None) -> None:
    env = {} if value is None else {"PYDANTIC_DISABLE_PLUGINS": value}
    got = _in_fresh_python(PROBE, **env)
    assert got["stood_in"] is False


# -- the YAML emitters ----------------------------------------------------------------------------

_PRINTABLE_ASCII = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
# what makes an emitter quote, fold or tag a scalar
_TRICKY = ["", "null", "~", "yes", "no", "on", "0x1f", "1e3", ".inf", "- ", "? x", ": ", "#", "a #b", "'", '"']
_TRICKY += [" a", "a ", "a  b", "---", "..."]
_TEXT = st.sampled_from(_TRICKY) | st.text(_PRINTABLE_ASCII, max_size=300)
_KEYS = st.text(_PRINTABLE_ASCII, min_size=1, max_size=C_EMITTER_KEY_MAX) | st.sampled_from([t for t in _TRICKY if t])
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | _TEXT
_NODES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=40,
)
_DOCS = st.lists(_NODES, max_size=5) | st.dictionaries(_KEYS, _NODES, max_size=8)


@given(_DOCS)
def test_the_c_emitter_is_used_only_where_it_writes_the_same_bytes(doc: object) -> None:
    assert c_emits_alike(doc)
    assert yaml.dump(doc, Dumper=yaml.CSafeDumper, **YAML_OPTIONS) == yaml.safe_dump(doc, **YAML_OPTIONS)


@pytest.mark.parametrize(
    "doc",
    [
        {"name": "emoji \U0001f600"},
        {"name": "NEL\x85"},
        {"name": "tab\there"},
        {"name": "two\nlines"},
        {"": 1},
        {"k" * (C_EMITTER_KEY_MAX + 1): 1},
        {1: "a non-string key"},
        {"tuple": (1, 2)},
        "a lone scalar",
        None,
    ],
)
def test_other_documents_keep_the_python_emitter(doc: object) -> None:
    assert not c_emits_alike(doc)


@pytest.mark.parametrize("node", sorted(p.name for p in HOSTS.iterdir() if p.is_dir()))
def test_every_fixture_detect_document_takes_the_c_emitter(node: str) -> None:
    doc = api.detect(api.make_request(str(HOSTS / node), None))
    assert c_emits_alike(doc)
    assert yaml.dump(doc, Dumper=yaml.CSafeDumper, **YAML_OPTIONS) == yaml.safe_dump(doc, **YAML_OPTIONS)


# -- the console script's ending ------------------------------------------------------------------


def without_times(doc: object) -> object:
    """``doc`` without its ``firstSeenTime`` values (a wall-clock reading, not a detection)."""
    if isinstance(doc, dict):
        return {k: without_times(v) for k, v in doc.items() if k != "firstSeenTime"}
    if isinstance(doc, list):
        return [without_times(v) for v in doc]
    return doc


def test_the_console_script_prints_all_of_a_document_and_its_exit_code() -> None:
    node = str(HOSTS / "h100-sxm-8x")
    proc = run_cli("dm", "detect", "--detect-root", node, "-o", "json")
    assert proc.returncode == 0
    # the two passes run seconds apart: the link records' firstSeenTime is the one thing that differs
    assert without_times(json.loads(proc.stdout)) == without_times(api.detect(api.make_request(node, None)))
    unmeasured = run_cli("dm", "detect", "--detect-root", str(HOSTS / "unreadable-sysfs"))
    assert unmeasured.returncode == 1
    assert yaml.safe_load(unmeasured.stdout)["node"]["unmeasured"]
    assert "could not be measured" in unmeasured.stderr
