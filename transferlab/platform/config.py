"""Typed, self-documenting configs shared by every trainer.

Every trainer config subclasses :class:`BaseConfig`. Each field must carry help text — either
``Field(..., description="...")`` or an attribute docstring directly under the field — which is
checked when the class is created. Invalid values and unknown keys raise :class:`ConfigError`
(a ``ValueError``) whose message names the field, the value given, what is wrong, the help text
and a fix, instead of pydantic's raw ``ValidationError``.

Example::

    class TrainConfig(BaseConfig):
        seed: int = Field(0, ge=0, description="Random seed for numpy/torch.")
        learning_rate: float = Field(3e-4, gt=0, description="Adam learning rate.")

    cfg = TrainConfig.build(seed=1)
    cfg.save(run_dir / "config.json")
    same = load_config(run_dir / "config.json")  # rebuilds a TrainConfig
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import annotated_types as at
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticUndefined

from transferlab.platform.io import atomic_write_json

__all__ = [
    "CONFIG_CLASS_KEY",
    "BaseConfig",
    "ConfigError",
    "EvalSplit",
    "config_class_path",
    "eval_split_field",
    "load_config",
]

EvalSplit = Literal["validation", "test"]
"""The split an experiment scores: validation for pilots and tuning, test only for a committed result."""


def eval_split_field(scored: str = "the arms are") -> Any:
    """The ``eval_split`` field of every experiment config (default ``validation``); ``scored`` names
    what is scored, e.g. ``"the source policy is"``."""
    return Field(
        default="validation",
        description=f"The split {scored} scored on: 'validation' for pilots and tuning, 'test' only for a "
        "committed result (result.json records it and the split the settings were tuned on).",
    )


CONFIG_CLASS_KEY = "_config_class"
"""Key written by :meth:`BaseConfig.save` holding ``"module:QualName"`` of the config class."""


class ConfigError(ValueError):
    """A config could not be built, loaded or assigned; the message says what to change.

    Attributes:
        problems: one human-readable line per bad field / unknown key (empty for file errors).
        config_class: name of the config class involved, when known.
    """

    def __init__(
        self,
        message: str,
        problems: Iterable[str] = (),
        config_class: str | None = None,
        details: Iterable[ErrorDetails] = (),
    ) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems)
        self.config_class = config_class
        self.details: list[ErrorDetails] = list(details)
        """The underlying pydantic error details (locations relative to ``config_class``)."""


def config_class_path(cls: type) -> str:
    """Return the ``"module:QualName"`` string that :func:`load_config` resolves back to ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


# --------------------------------------------------------------------------------------------------
# Error formatting
# --------------------------------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    """Readable name of a type annotation (``int``, ``list[int]``, ``Literal['a', 'b']``)."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("pathlib.", "").replace("NoneType", "None")


def _constraints(info: FieldInfo) -> list[str]:
    """Human-readable constraints from a field's metadata, e.g. ``[">= 0", "length >= 2"]``."""
    out: list[str] = []
    for meta in info.metadata:
        if isinstance(meta, at.Ge):
            out.append(f">= {meta.ge}")
        elif isinstance(meta, at.Gt):
            out.append(f"> {meta.gt}")
        elif isinstance(meta, at.Le):
            out.append(f"<= {meta.le}")
        elif isinstance(meta, at.Lt):
            out.append(f"< {meta.lt}")
        elif isinstance(meta, at.MinLen):
            out.append(f"length >= {meta.min_length}")
        elif isinstance(meta, at.MaxLen):
            out.append(f"length <= {meta.max_length}")
        elif isinstance(meta, at.MultipleOf):
            out.append(f"multiple of {meta.multiple_of}")
        elif getattr(meta, "pattern", None) is not None:
            out.append(f"matches {meta.pattern!r}")
    return out


def _model_class_in(annotation: Any) -> type[BaseModel] | None:
    """The first pydantic model class inside ``annotation`` (handles ``X | None``, ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_class_in(arg)
        if found is not None:
            return found
    return None


def _resolve_loc(
    model: type[BaseModel], loc: tuple[int | str, ...]
) -> tuple[type[BaseModel], FieldInfo | None, str]:
    """Walk an error ``loc`` through nested models.

    Returns the model owning the last named field, that field's info (None if it is not a field)
    and the last named part of the location.
    """
    owner: type[BaseModel] = model
    info: FieldInfo | None = None
    name = ""
    for part in loc:
        if not isinstance(part, str):
            continue
        current = model if info is None else _model_class_in(info.annotation)
        if current is None or part not in current.model_fields:
            return (current or owner), None, part
        owner, info, name = current, current.model_fields[part], part
    return owner, info, name


def _did_you_mean(key: str, known: Iterable[str]) -> str | None:
    """The closest known name to ``key`` (difflib, plus prefix/substring matches), or None."""
    known = list(known)
    matches = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if matches:
        return matches[0]
    lowered = key.lower()
    for name in known:
        if name.startswith(lowered) or (len(lowered) >= 3 and lowered in name):
            return name
    return None


def _unknown_field_message(path: str, key: str, known: Iterable[str]) -> str:
    """``unknown field 'lr'; known fields: a, b. did you mean 'learning_rate'?``"""
    known = sorted(known)
    msg = f"unknown field {path!r}; known fields: {', '.join(known) if known else '(none)'}"
    suggestion = _did_you_mean(key, known)
    if suggestion is not None:
        msg += f". did you mean {suggestion!r}?"
    return msg


_BOUND_ERRORS: dict[str, tuple[str, str]] = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def _what_and_fix(err: ErrorDetails, info: FieldInfo | None) -> tuple[str, str]:
    """Turn one pydantic error into ("what is wrong", "how to fix it")."""
    etype = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    tname = _type_name(info.annotation) if info is not None else "the expected type"
    if etype in _BOUND_ERRORS:
        op, key = _BOUND_ERRORS[etype]
        return f"must be {op} {ctx[key]}", f"pass a value {op} {ctx[key]}"
    if etype == "multiple_of":
        return f"must be a multiple of {ctx['multiple_of']}", f"pass a multiple of {ctx['multiple_of']}"
    if etype in ("string_too_short", "too_short"):
        return (
            f"must have length >= {ctx['min_length']}",
            f"pass a value with at least {ctx['min_length']} item(s)/character(s)",
        )
    if etype in ("string_too_long", "too_long"):
        return (
            f"must have length <= {ctx['max_length']}",
            f"pass a value with at most {ctx['max_length']} item(s)/character(s)",
        )
    if etype == "string_pattern_mismatch":
        return f"must match the pattern {ctx['pattern']!r}", f"pass a string matching {ctx['pattern']!r}"
    if etype in ("literal_error", "enum"):
        return f"must be one of {ctx['expected']}", f"pass one of {ctx['expected']}"
    if etype in ("value_error", "assertion_error"):
        return err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, "), (
            "change the value so the check above passes"
        )
    constraints = _constraints(info) if info is not None else []
    suffix = f" ({', '.join(constraints)})" if constraints else ""
    return (
        f"must be {tname}: {err['msg']}",
        f"pass a value of type {tname}{suffix}",
    )


def _format_problem(model: type[BaseModel], err: ErrorDetails) -> str:
    """Format one pydantic error as ``field: value is invalid (...). help: ... fix: ...``."""
    loc = tuple(err["loc"])
    path = ".".join(str(p) for p in loc) or "<root>"
    owner, info, name = _resolve_loc(model, loc)
    if err["type"] in ("extra_forbidden", "no_such_attribute", "unexpected_keyword_argument"):
        return _unknown_field_message(path, name or path, owner.model_fields)
    help_text = f" help: {info.description}" if info is not None and info.description else ""
    if err["type"] == "missing":
        tname = _type_name(info.annotation) if info is not None else "value"
        return f"{path}: missing (required).{help_text} fix: pass {name or path}=<{tname}>"
    what, fix = _what_and_fix(err, info)
    return f"{path}: {err.get('input')!r} is invalid ({what}).{help_text} fix: {fix}"


def _flatten(errors: Iterable[ErrorDetails], prefix: tuple[int | str, ...] = ()) -> list[ErrorDetails]:
    """Prefix error locations with ``prefix`` and inline errors of nested configs.

    A nested :class:`BaseConfig` built during validation raises :class:`ConfigError`, which pydantic
    wraps as a ``value_error``; its own details are spliced in at the nested location instead.
    """
    out: list[ErrorDetails] = []
    for err in errors:
        loc = (*prefix, *err["loc"])
        inner = (err.get("ctx") or {}).get("error")
        if err["type"] == "value_error" and isinstance(inner, ConfigError) and inner.details:
            out.extend(_flatten(inner.details, loc))
        else:
            flat = dict(err)
            flat["loc"] = loc
            out.append(typing.cast(ErrorDetails, flat))
    return out


def _config_error(model: type[BaseModel], exc: ValidationError, action: str = "invalid") -> ConfigError:
    """Build a :class:`ConfigError` listing every problem in ``exc``."""
    details = _flatten(exc.errors())
    problems = [_format_problem(model, err) for err in details]
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    lines = [f"{action} {model.__qualname__} ({count}):", *(f"  - {p}" for p in problems)]
    return ConfigError(
        "\n".join(lines), problems=problems, config_class=config_class_path(model), details=details
    )


# --------------------------------------------------------------------------------------------------
# File reading
# --------------------------------------------------------------------------------------------------


def _read_mapping(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON or YAML file holding a mapping; raise :class:`ConfigError` with a clear reason."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file not found: {p} (cwd: {Path.cwd()})")
    if p.is_dir():
        raise ConfigError(f"config path is a directory, expected a .json/.yaml file: {p}")
    text = p.read_text(encoding="utf-8")
    data: Any
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"bad JSON in {p}: {exc.msg} at line {exc.lineno} column {exc.colno}. "
                "fix: correct the syntax (keys and strings need double quotes; no trailing commas)"
            ) from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(f"bad YAML in {p}{where}: {problem}. fix: correct the syntax") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {p} must hold a mapping of field names to values, got {type(data).__name__}"
        )
    return {str(k): v for k, v in data.items()}


# --------------------------------------------------------------------------------------------------
# BaseConfig
# --------------------------------------------------------------------------------------------------


class BaseConfig(BaseModel):
    """Base class for every config: strict keys, validated assignment, help text on every field.

    Build with ``Cfg(...)``, :meth:`build`, :meth:`from_dict` or :meth:`from_file`; all raise
    :class:`ConfigError` on bad input, as does assigning an invalid value to a field.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(
        extra="forbid", validate_assignment=True, use_attribute_docstrings=True
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Reject subclasses that have a field without a description (its ``--help`` text)."""
        super().__pydantic_init_subclass__(**kwargs)
        for name, info in cls.model_fields.items():
            if not (info.description or "").strip():
                raise TypeError(
                    f"{cls.__qualname__}.{name} has no description; every config field needs help text: "
                    f'declare it as `{name}: T = Field(default=<value>, description="...")` '
                    "or put a docstring on the line below the field"
                )

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(type(self), exc) from None

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        if not name.startswith("_") and name not in cls.model_fields:
            msg = _unknown_field_message(name, name, cls.model_fields)
            raise ConfigError(
                f"cannot set {cls.__qualname__}.{name}:\n  - {msg}",
                problems=[msg],
                config_class=config_class_path(cls),
            )
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise _config_error(cls, exc, action=f"cannot set {name} on") from None

    # ------------------------------------------------------------------ construction

    @classmethod
    def build(cls, **kwargs: Any) -> Self:
        """Validate ``kwargs`` into a config; raise :class:`ConfigError` describing every problem."""
        return cls.from_dict(kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Validate a mapping into a config; a ``_config_class`` key (written by :meth:`save`) is ignored."""
        payload = {k: v for k, v in data.items() if k != CONFIG_CLASS_KEY}
        try:
            return cls.model_validate(payload)
        except ValidationError as exc:
            raise _config_error(cls, exc) from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Self:
        """Load a config from a ``.json`` file or a YAML file (any other suffix is parsed as YAML)."""
        data = _read_mapping(path)
        try:
            return cls.from_dict(data)
        except ConfigError as exc:
            saved_as = data.get(CONFIG_CLASS_KEY)
            note = ""
            if saved_as and saved_as != config_class_path(cls):
                note = f"\nnote: {path} was saved by {saved_as}; try transferlab.platform.config.load_config"
            raise ConfigError(f"{path}: {exc}{note}", exc.problems, exc.config_class) from None

    # ------------------------------------------------------------------ export

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible dict of all fields (paths become strings, nested configs become dicts)."""
        return self.model_dump(mode="json")

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Atomically write this config as JSON with a ``_config_class`` key; returns the path."""
        payload = {CONFIG_CLASS_KEY: config_class_path(type(self)), **self.to_dict()}
        return atomic_write_json(path, payload)

    @classmethod
    def help_table(cls) -> list[tuple[str, str, str, str]]:
        """One ``(name, type, default, help)`` row per field, in declaration order.

        ``default`` is ``"required"`` for fields without one; constraints (e.g. ``>= 0``) are appended
        to the help text.
        """
        rows: list[tuple[str, str, str, str]] = []
        for name, info in cls.model_fields.items():
            if info.is_required():
                default = "required"
            else:
                value = info.get_default(call_default_factory=True, validated_data={})
                default = "required" if value is PydanticUndefined else repr(value)
            help_text = (info.description or "").strip()
            constraints = _constraints(info)
            if constraints:
                help_text += f" (must be {', '.join(constraints)})"
            rows.append((name, _type_name(info.annotation), default, help_text))
        return rows


def _import_config_class(spec: str) -> type[BaseConfig]:
    """Resolve ``"module:QualName"`` to a :class:`BaseConfig` subclass."""
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise ConfigError(f"bad {CONFIG_CLASS_KEY} {spec!r}; expected 'package.module:ClassName'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import module {module_name!r} for config class {spec!r}: {exc}") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"config class {spec!r} not found: module {module_name!r} has no {qualname!r}")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, BaseConfig)):
        raise ConfigError(f"{spec!r} is not a BaseConfig subclass")
    return obj


def load_config(path: str | os.PathLike[str]) -> BaseConfig:
    """Load a config saved by :meth:`BaseConfig.save`, rebuilding the class named in ``_config_class``."""
    data = _read_mapping(path)
    spec = data.get(CONFIG_CLASS_KEY)
    if not isinstance(spec, str):
        raise ConfigError(
            f"{path} has no {CONFIG_CLASS_KEY!r} key, so the config class is unknown; "
            "fix: load it with YourConfig.from_file(path)"
        )
    return _import_config_class(spec).from_file(path)
