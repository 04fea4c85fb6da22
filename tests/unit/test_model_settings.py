"""The daemon's ``[model]`` settings are the engine's parameter table (issue #13, item 3):
every engine hyper-parameter can be set from TOML, the environment and ``--set``, with the same
default and the same bounds as ``StreamingHierarchy`` itself."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service.config import (
    DAEMON_PARAMETER_OVERRIDES,
    ModelSettings,
    build_engine,
    load_settings,
    merge_overrides,
    parse_set_overrides,
)
from streammom import StreamingHierarchy
from streammom.engine_params import ENGINE_PARAMETERS
from streammom.params import Interval, InvalidParameterError, Options, Param

pytestmark = pytest.mark.usefixtures("clean_env")


def test_the_table_is_the_engine_signature() -> None:
    sig = inspect.signature(StreamingHierarchy.__init__).parameters
    names = [p.name for p in ENGINE_PARAMETERS]
    assert names == [n for n in sig if n not in ("self", "n_features", "vocabulary")]
    for p in ENGINE_PARAMETERS:
        assert sig[p.name].default == p.default, p.name
        assert p.accepts(p.default), p.name


def test_every_engine_parameter_is_a_model_setting_with_its_default() -> None:
    fields = ModelSettings.model_fields
    for p in ENGINE_PARAMETERS:
        assert p.name in fields, p.name
        default = DAEMON_PARAMETER_OVERRIDES.get(p.name, (None, p.default))[1]
        assert fields[p.name].default == default, p.name
    engine = build_engine(ModelSettings())
    daemon_defaults = {k: v[1] for k, v in DAEMON_PARAMETER_OVERRIDES.items()}
    assert engine.get_config() == StreamingHierarchy(**daemon_defaults).get_config()


def test_the_daemon_fixes_the_family_in_its_settings() -> None:
    """Every role turns events into rows before any model exists: the daemon's family is
    ``bernoulli`` unless set, and the library's ``"auto"`` is refused with a clear error."""
    assert ModelSettings().family == "bernoulli"
    assert build_engine(ModelSettings(family="multinomial")).family_ == "multinomial"
    with pytest.raises(ValidationError, match="bernoulli"):
        ModelSettings(family="auto")


def _edges(p: Param) -> list[tuple[Any, bool]]:
    """Values at and just beyond every bound of ``p``, with whether the table accepts them."""
    out: list[tuple[Any, bool]] = []
    for c in p.kinds:
        if isinstance(c, Options):
            out += [(c.values[0], True), ("not-an-option", False)]
            continue
        step = 1 if c.kind is int else 1e-9
        for bound, inclusive, outward in ((c.left, c.lower_inclusive, -1),
                                          (c.right, c.upper_inclusive, +1)):
            if bound is None:
                continue
            at = int(bound) if c.kind is int else float(bound)
            out += [(at, inclusive), (at + outward * step, False)]
    return out


@pytest.mark.parametrize("param", [p for p in ENGINE_PARAMETERS
                                   if p.name not in DAEMON_PARAMETER_OVERRIDES],
                         ids=lambda p: p.name)
def test_settings_and_engine_share_every_bound(param: Param) -> None:
    for value, ok in _edges(param):
        assert param.accepts(value) is ok, (param.name, value)
        if ok:
            assert getattr(ModelSettings(**{param.name: value}), param.name) == value
            StreamingHierarchy(**{param.name: value})
        else:
            with pytest.raises(ValidationError):
                ModelSettings(**{param.name: value})
            with pytest.raises(InvalidParameterError, match=param.name):
                StreamingHierarchy(**{param.name: value})


def _sample(p: Param) -> str:
    """A non-default accepted value, as text (what TOML/env/--set carry)."""
    c = p.kinds[0]
    if isinstance(c, Options):
        return str(next(v for v in c.values if v != p.default))
    assert isinstance(c, Interval)
    lo = c.left if c.left is not None else 0
    value = lo + (2 if c.kind is int else 0.125)
    if c.right is not None and value > c.right:
        value = (lo + c.right) / 2
    return str(int(value) if c.kind is int else float(value))


def test_every_parameter_from_toml_env_and_flags(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    values = {p.name: _sample(p) for p in ENGINE_PARAMETERS}
    toml = tmp_path / "s.toml"
    toml.write_text("[model]\n" + "".join(
        f'{k} = "{v}"\n' if not v[0].isdigit() else f"{k} = {v}\n" for k, v in values.items()))
    from_toml = load_settings(toml).model
    for k, v in values.items():
        monkeypatch.setenv(f"STREAMMOM_MODEL__{k.upper()}", v)
    from_env = load_settings().model
    for k in values:
        monkeypatch.delenv(f"STREAMMOM_MODEL__{k.upper()}")
    from_flags = load_settings(None, merge_overrides(parse_set_overrides(
        [f"model.{k}={v}" for k, v in values.items()]))).model
    for p in ENGINE_PARAMETERS:
        got = {getattr(s, p.name) for s in (from_toml, from_env, from_flags)}
        assert len(got) == 1 and str(got.pop()) == values[p.name], p.name
    engine = build_engine(from_flags)
    assert engine.get_config() == {p.name: getattr(from_flags, p.name) for p in ENGINE_PARAMETERS}


@pytest.mark.parametrize("word", ["none", "None", "null"])
def test_none_is_settable_where_the_engine_takes_none(word: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    nullable = [p.name for p in ENGINE_PARAMETERS if p.allows_none and p.default is not None]
    assert "refit_every" in nullable
    s = load_settings(None, parse_set_overrides([f"model.{n}={word}" for n in nullable]))
    assert all(getattr(s.model, n) is None for n in nullable)
    monkeypatch.setenv("STREAMMOM_MODEL__REFIT_EVERY", word)
    assert load_settings().model.refit_every is None
    with pytest.raises(ValidationError):
        ModelSettings(max_depth=word)  # only where None is allowed
