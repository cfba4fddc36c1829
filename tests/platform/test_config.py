"""BaseConfig: help text enforced, errors that say what to fix, save/load round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field, ValidationError

from transferlab.platform.config import CONFIG_CLASS_KEY, BaseConfig, ConfigError, load_config


class OptimConfig(BaseConfig):
    learning_rate: float = Field(default=3e-4, gt=0, description="Adam learning rate.")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="Adam beta coefficients.")


class TrainConfig(BaseConfig):
    seed: int = Field(default=0, ge=0, description="Random seed for numpy and torch.")
    steps: int = Field(description="Number of gradient steps.")
    algo: Literal["cql", "iql"] = Field(default="cql", description="Offline RL algorithm.")
    out_dir: Path = Field(default=Path("runs"), description="Where runs are written.")
    tags: list[str] = Field(default_factory=list, description="Free-form labels.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimiser settings.")
    batch_size: int = 32
    """Minibatch size (documented by an attribute docstring)."""


def test_missing_description_raises_type_error_naming_field() -> None:
    with pytest.raises(TypeError, match=r"NoHelp\.epochs has no description"):

        class NoHelp(BaseConfig):
            epochs: int = 1

    with pytest.raises(TypeError, match=r"BlankHelp\.epochs"):

        class BlankHelp(BaseConfig):
            epochs: int = Field(default=1, description="   ")


def test_attribute_docstring_counts_as_description() -> None:
    rows = {name: help_ for name, _, _, help_ in TrainConfig.help_table()}
    assert rows["batch_size"] == "Minibatch size (documented by an attribute docstring)."


def test_bad_value_message_names_field_value_help_and_fix() -> None:
    with pytest.raises(ConfigError) as info:
        TrainConfig.build(seed=-1, steps=10)
    err = info.value
    assert isinstance(err, ValueError)
    assert not isinstance(err, ValidationError)
    assert err.problems == [
        "seed: -1 is invalid (must be >= 0). help: Random seed for numpy and torch. fix: pass a value >= 0"
    ]
    assert "invalid TrainConfig (1 problem)" in str(err)


def test_direct_construction_also_raises_config_error_listing_every_problem() -> None:
    with pytest.raises(ConfigError) as info:
        TrainConfig(algo="ppo", steps="many")  # type: ignore[arg-type]
    problems = info.value.problems
    assert len(problems) == 2
    algo = next(p for p in problems if p.startswith("algo:"))
    assert "'ppo' is invalid" in algo and "fix: pass one of 'cql' or 'iql'" in algo
    assert "help: Offline RL algorithm." in algo
    steps = next(p for p in problems if p.startswith("steps:"))
    assert "'many' is invalid" in steps and "fix: pass a value of type int" in steps


def test_missing_required_field() -> None:
    with pytest.raises(ConfigError) as info:
        TrainConfig.build()
    assert info.value.problems == [
        "steps: missing (required). help: Number of gradient steps. fix: pass steps=<int>"
    ]


def test_unknown_key_did_you_mean() -> None:
    with pytest.raises(ConfigError) as info:
        TrainConfig.build(steps=1, sed=3)
    (problem,) = info.value.problems
    assert problem.startswith("unknown field 'sed'; known fields: algo, batch_size, optim, out_dir,")
    assert problem.endswith("did you mean 'seed'?")


def test_unknown_key_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        TrainConfig.build(steps=1, zzz=3)
    assert "did you mean" not in info.value.problems[0]


def test_nested_config_errors_use_dotted_paths() -> None:
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict({"steps": 1, "optim": {"learning_rat": 1e-3}})
    assert info.value.problems == [
        "unknown field 'optim.learning_rat'; known fields: betas, learning_rate. "
        "did you mean 'learning_rate'?"
    ]
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict({"steps": 1, "optim": {"learning_rate": 0}})
    assert info.value.problems[0].startswith("optim.learning_rate: 0 is invalid (must be > 0")
    assert "help: Adam learning rate." in info.value.problems[0]


def test_assignment_is_validated() -> None:
    cfg = TrainConfig.build(steps=5)
    cfg.seed = 7
    assert cfg.seed == 7
    with pytest.raises(ConfigError, match=r"seed: -3 is invalid \(must be >= 0\)"):
        cfg.seed = -3
    assert cfg.seed == 7
    with pytest.raises(ConfigError, match="did you mean 'steps'"):
        cfg.step = 3


def test_to_dict_is_json_compatible() -> None:
    cfg = TrainConfig.build(steps=5, out_dir=Path("/tmp/x"), tags=["a"])
    d = cfg.to_dict()
    assert d["out_dir"] == "/tmp/x"
    assert d["optim"] == {"learning_rate": 3e-4, "betas": [0.9, 0.999]}
    json.dumps(d)


def test_save_and_from_file_roundtrip(tmp_path: Path) -> None:
    cfg = TrainConfig.build(seed=3, steps=100, algo="iql", tags=["x", "y"], optim={"learning_rate": 1e-3})
    path = cfg.save(tmp_path / "deep" / "config.json")
    raw = json.loads(path.read_text())
    assert raw[CONFIG_CLASS_KEY] == f"{__name__}:TrainConfig"
    assert path.read_text().endswith("}\n")
    assert TrainConfig.from_file(path) == cfg


def test_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("seed: 4\nsteps: 20\nalgo: iql\noptim:\n  learning_rate: 1.0e-3\ntags: [a, b]\n")
    cfg = TrainConfig.from_file(path)
    assert (cfg.seed, cfg.steps, cfg.algo, cfg.tags) == (4, 20, "iql", ["a", "b"])
    assert cfg.optim.learning_rate == pytest.approx(1e-3)


def test_from_file_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        TrainConfig.from_file(tmp_path / "nope.json")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"steps": 1,}')
    with pytest.raises(ConfigError, match=r"bad JSON in .*bad\.json.*line 1 column 13"):
        TrainConfig.from_file(bad_json)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("steps: [1, 2\nseed: 3\n")
    with pytest.raises(ConfigError, match=r"bad YAML in .*bad\.yaml at line \d+"):
        TrainConfig.from_file(bad_yaml)
    a_list = tmp_path / "list.yaml"
    a_list.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        TrainConfig.from_file(a_list)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("steps: 1\nseed: -2\n")
    with pytest.raises(ConfigError, match=r"invalid\.yaml: invalid TrainConfig") as info:
        TrainConfig.from_file(invalid)
    assert info.value.problems[0].startswith("seed: -2 is invalid")


def test_load_config_rebuilds_the_saved_class(tmp_path: Path) -> None:
    cfg = TrainConfig.build(steps=9, optim={"learning_rate": 0.1})
    path = cfg.save(tmp_path / "config.json")
    loaded = load_config(path)
    assert type(loaded) is TrainConfig
    assert loaded == cfg


def test_load_config_errors(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text('{"steps": 1}')
    with pytest.raises(ConfigError, match="no '_config_class' key"):
        load_config(plain)
    ghost = tmp_path / "ghost.json"
    ghost.write_text(json.dumps({CONFIG_CLASS_KEY: f"{__name__}:Ghost", "steps": 1}))
    with pytest.raises(ConfigError, match="not found"):
        load_config(ghost)
    not_cfg = tmp_path / "notcfg.json"
    not_cfg.write_text(json.dumps({CONFIG_CLASS_KEY: "pathlib:Path"}))
    with pytest.raises(ConfigError, match="not a BaseConfig subclass"):
        load_config(not_cfg)


def test_help_table_rows() -> None:
    rows = {row[0]: row for row in TrainConfig.help_table()}
    assert list(rows)[:3] == ["seed", "steps", "algo"]
    assert rows["seed"] == ("seed", "int", "0", "Random seed for numpy and torch. (must be >= 0)")
    assert rows["steps"][2] == "required"
    assert rows["tags"][2] == "[]"
    assert rows["optim"][1] == "OptimConfig"
