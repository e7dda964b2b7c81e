"""Settings come from defaults < kernelsmith.toml < KERNELSMITH_* < flags; bad values are one-line errors."""

import pytest

from kernelsmith.backends import backend_name
from kernelsmith.config import Settings, load_settings
from kernelsmith.errors import BadInput


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("KERNELSMITH_MAX_TURNS", "KERNELSMITH_MODEL", "KERNELSMITH_MAX_COST", "ANTHROPIC_API_KEY",
                 "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_layers_override_in_order(tmp_path, monkeypatch):
    (tmp_path / "kernelsmith.toml").write_text('model = "from-toml"\nmax-turns = 50\n[optimize]\nmax_cost = 2.5\n')
    settings = load_settings({}, [tmp_path])
    assert (settings.model, settings.max_turns, settings.max_cost) == ("from-toml", 50, 2.5)
    monkeypatch.setenv("KERNELSMITH_MAX_TURNS", "70")
    assert load_settings({}, [tmp_path]).max_turns == 70
    flagged = load_settings({"max_turns": 9, "model": None}, [tmp_path])
    assert flagged.max_turns == 9 and flagged.model == "from-toml"  # a flag left unset does not override


def test_a_later_folder_overrides_an_earlier_one(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "kernelsmith.toml").write_text('model = "a"\nbackend = "openai"\n')
    (tmp_path / "b" / "kernelsmith.toml").write_text('model = "b"\n')
    settings = load_settings({}, [tmp_path / "a", tmp_path / "b"])
    assert (settings.model, settings.backend) == ("b", "openai")


@pytest.mark.parametrize("content, message", [
    ("max_turns = \"many\"", "not a number"),
    ("colour = \"blue\"", "unknown setting"),
    ("model = ", "kernelsmith.toml"),
])
def test_bad_settings_are_one_line_errors(tmp_path, content, message):
    (tmp_path / "kernelsmith.toml").write_text(content + "\n")
    with pytest.raises(BadInput) as err:
        load_settings({}, [tmp_path])
    assert message in str(err.value) and "\n" not in str(err.value).strip()


def test_the_default_backend_is_the_first_configured(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert backend_name(Settings()) == "builtin"  # no key at all: the offline policy
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert backend_name(Settings()) == "openai"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert backend_name(Settings()) == "anthropic"
    assert backend_name(Settings(backend="openai")) == "openai"
    with pytest.raises(BadInput, match="unknown backend"):
        backend_name(Settings(backend="gemini"))


def test_streaming_can_be_turned_off_by_file_env_or_flag(tmp_path, monkeypatch):
    assert load_settings({}, [tmp_path]).stream is True
    (tmp_path / "kernelsmith.toml").write_text("stream = false\n")
    assert load_settings({}, [tmp_path]).stream is False
    monkeypatch.setenv("KERNELSMITH_STREAM", "yes")
    assert load_settings({}, [tmp_path]).stream is True
    assert load_settings({"stream": False}, [tmp_path]).stream is False
    monkeypatch.setenv("KERNELSMITH_STREAM", "maybe")
    with pytest.raises(BadInput, match="true or false"):
        load_settings({}, [tmp_path])
