"""Typed settings for `optimize`: defaults < kernelsmith.toml < KERNELSMITH_* variables < flags."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

from kernelsmith.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_FILE = "kernelsmith.toml"


@dataclass
class Settings:
    backend: str | None = None  # anthropic, openai, scripted, builtin; None: the first configured
    model: str | None = None
    base_url: str | None = None
    script: str | None = None  # scripted backend: a JSON list of turns or a recorded events.jsonl
    device: str | None = None  # cuda or cpu; None: cuda when a GPU is present
    precision: str = "fp32"
    max_turns: int = 200
    max_cost: float | None = None  # USD
    timeout_min: float | None = None
    context_window: int | None = None  # tokens; None: the backend's known window
    max_tokens: int = 8192  # per model reply
    one_call_per_reply: bool = False  # at most one tool call a reply (a student's small window; train rft's teacher)
    window_tokenizer: str | None = None  # a local tokenizer folder the context is counted with (rft: the student's)
    stream: bool = True  # False: plain JSON answers, for servers whose streaming is broken
    bash_timeout_s: float = 120.0
    trials: int = 5
    noise: float = 0.02  # a new best must beat the old by more than this and the measured spread
    baselines_cache: str | None = None  # a compile-baseline cache file shared by sessions; None: per workdir
    warm_baselines: bool = True  # measure the baselines when a session starts, before its first profile

    def public(self) -> dict[str, Any]:
        """The settings as recorded in the session (no secrets live here: keys come from the env)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _convert(name: str, raw: Any, kind) -> Any:
    if raw is None or raw == "":
        return None
    text = str(raw)
    if kind is bool:
        if text.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise BadInput(f"setting {name} = {raw!r} is not true or false")
        return text.lower() in ("1", "true", "yes", "on")
    try:
        if kind in (int, int | None):
            return int(text)
        if kind in (float, float | None):
            return float(text)
    except ValueError:
        raise BadInput(f"setting {name} = {raw!r} is not a number") from None
    return text


def _from_toml(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise BadInput(f"{path}: {err}") from None
    return {k.replace("-", "_"): v for k, v in {**data, **data.get("optimize", {})}.items() if k != "optimize"}


def _from_env() -> dict[str, Any]:
    found = {}
    for f in fields(Settings):
        value = os.environ.get(f"KERNELSMITH_{f.name.upper()}")
        if value is not None:
            found[f.name] = value
    return found


def load_settings(flags: dict[str, Any], folders: list[Path]) -> Settings:
    """Merge the layers; flags whose value is None do not override."""
    hints = get_type_hints(Settings)
    merged: dict[str, Any] = {}
    for layer in [*(_from_toml(f) for f in folders), _from_env(), {k: v for k, v in flags.items() if v is not None}]:
        for key, value in layer.items():
            if key not in hints:
                raise BadInput(f"unknown setting {key!r}", hint="see kernelsmith optimize --help")
            merged[key] = _convert(key, value, hints[key])
    return Settings(**merged)
