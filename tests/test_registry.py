"""The registry every kind uses: decorator, known names in errors, entry points for outside
plug-ins; and the doctests of the mechanism's modules."""
from __future__ import annotations

import doctest
import textwrap

import pytest

from streamtrain import registry, schema, scores
from streamtrain.errors import ConfigError
from streamtrain.registry import Registry


@pytest.mark.parametrize("module", [registry, schema, scores], ids=lambda m: m.__name__)
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.attempted and not result.failed


def test_register_get_unregister():
    things = Registry("thing", group=None)

    @things.register
    class Spoon:
        kind = "spoon"

    @things.register(name="ladle")
    class Big:
        pass

    assert things.names() == ["ladle", "spoon"] and things["ladle"] is Big and len(things) == 2
    with pytest.raises(ValueError, match="registered twice"):
        things.register(type("Other", (), {"kind": "spoon"}))
    with pytest.raises(ValueError, match="no 'kind' name"):
        things.register(type("Nameless", (), {}))
    with pytest.raises(ConfigError) as err:
        things.get("fork", where="cutlery.type")
    assert err.value.problems == [("cutlery.type", "unknown thing 'fork' (known: ladle, spoon)")]
    things.unregister("spoon")
    assert "spoon" not in things


def test_a_kind_from_an_entry_point_is_loaded_on_first_lookup(tmp_path, monkeypatch):
    (tmp_path / "outside_rules.py").write_text(textwrap.dedent('''
        class Halve:
            kind = "halve"
            options = {}
    '''))
    info = tmp_path / "outside_rules-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-rules\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[test.streamtrain.things]\nhalve = outside_rules:Halve\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    things = Registry("thing", group="test.streamtrain.things")
    assert things.get("halve").__name__ == "Halve"
    assert things.names() == ["halve"]
