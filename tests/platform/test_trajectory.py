"""Trajectory schema: exact sampled ids survive write → read → tensors, masks hit only policy tokens."""

from __future__ import annotations

import json
import logging
import math
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from transferlab.platform import io as tio
from transferlab.platform import trajectory as tmod
from transferlab.platform.trajectory import (
    COLUMNS,
    TRAJECTORIES_FILE,
    StepRecord,
    Trajectory,
    TrajectoryWriter,
    read_trajectories,
    to_tensors,
    write_trajectories,
)

SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>"]


# ------------------------------------------------------------------------------------------ helpers


def _corpus(n: int = 300) -> list[str]:
    """A few hundred lines of JSON tool calls and small Python functions."""
    rng = random.Random(0)
    tools = ["read_file", "run_tests", "write_file", "search", "submit"]
    lines: list[str] = []
    for i in range(n):
        call = {
            "tool": tools[i % len(tools)],
            "args": {"path": f"src/mod_{i % 9}.py", "line": rng.randint(1, 99)},
        }
        lines.append(json.dumps(call))
        lines.append(f"def add_{i}(a, b):\n    return a + b * {i}\n")
        lines.append(f"for x in range({i}):\n    if x % 3 == 0:\n        print(x)\n")
    return lines


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    """A tiny byte-level BPE tokenizer trained locally (no download)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    return tokenizer


def _enc(tok: Tokenizer, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False).ids)


def _special(tok: Tokenizer, name: str) -> int:
    """The id of a vocabulary entry (special token or single byte-level char)."""
    tid = tok.token_to_id(name)
    assert tid is not None
    return int(tid)


def _split_a_merge(tok: Tokenizer, ids: list[int]) -> list[int]:
    """Replace the first merged (multi-byte) token by its single-byte tokens: same text, other ids."""
    for i, tid in enumerate(ids):
        piece = tok.id_to_token(tid)
        if piece is not None and len(piece) >= 2 and piece not in SPECIALS:
            parts = [_special(tok, ch) for ch in piece]  # every single byte-level char is in the vocab
            return [*ids[:i], *parts, *ids[i + 1 :]]
    raise AssertionError("no merged token to split")


def _bits64(values: list[float] | np.ndarray) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


def _step(episode: str, step: int, **kw: object) -> StepRecord:
    """A small valid step with synthetic ids (no tokenizer needed)."""
    fields: dict[str, object] = {
        "episode_id": episode,
        "step": step,
        "task_id": "task-1",
        "domain": "ecommerce",
        "action_text": f"a{step}",
        "action_ids": [10 + step, 20 + step],
        "observation_text": f"o{step}",
        "observation_ids": [30 + step],
        "reward": float(step),
    }
    if step == 0:
        fields.update(prompt_text="p", prompt_ids=[1, 2, 3])
    fields.update(kw)
    return StepRecord(**fields)  # type: ignore[arg-type]


def _episode(episode: str = "ep-0", n: int = 3, logprobs: bool = True) -> Trajectory:
    steps = [
        _step(episode, i, action_logprobs=[-0.5 - i, -0.25] if logprobs else None, terminated=i == n - 1)
        for i in range(n)
    ]
    return Trajectory(steps)


def _tmp_leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ------------------------------------------------------------------------------------------ the round trip


def test_write_trajectories_round_trips_in_order_and_refuses_repeated_ids(tmp_path: Path) -> None:
    path = tmp_path / "kept.parquet"
    episodes = [_episode("b", n=2), _episode("a", n=3)]
    write_trajectories(path, episodes)
    back = read_trajectories(path)
    assert [t.episode_id for t in back] == ["b", "a"]
    assert [t.token_ids() for t in back] == [t.token_ids() for t in episodes]
    with pytest.raises(ValueError, match="unique"):
        write_trajectories(path, [_episode("a"), _episode("a")])
    assert [t.episode_id for t in read_trajectories(path)] == ["b", "a"]  # the file is untouched
    write_trajectories(path, [])
    assert read_trajectories(path) == [] and _tmp_leftovers(tmp_path) == []


def test_multi_turn_round_trip_keeps_sampled_ids_mask_rewards_and_logprobs(
    tmp_path: Path, tok: Tokenizer
) -> None:
    start, end = _special(tok, "<|im_start|>"), _special(tok, "<|im_end|>")
    rng = np.random.default_rng(7)

    expected_ids: list[int] = []
    action_positions: set[int] = set()
    last_action_token: dict[int, float] = {}  # position -> reward
    sampled_logprobs: list[float] = []

    prompt_text = "system\nYou fix failing tests.\nuser\nMake tests/test_add.py pass.\nassistant\n"
    prompt_ids = [
        start, *_enc(tok, "system\nYou fix failing tests."), end, *_enc(tok, "\n"),
        start, *_enc(tok, "user\nMake tests/test_add.py pass."), end, *_enc(tok, "\n"),
        start, *_enc(tok, "assistant\n"),
    ]  # fmt: skip
    expected_ids.extend(prompt_ids)

    actions = [
        '{"tool": "read_file", "args": {"path": "src/mod_3.py"}}',
        "def add_3(a, b):\n    return a + b\n",
        '{"tool": "run_tests", "args": {"path": "tests/test_add.py"}}',
        '{"tool": "submit", "args": {}}',
    ]
    observations = [
        "def add_3(a, b):\n    return a - b\n",
        "written src/mod_3.py",
        "1 passed in 0.01s",
        "",
    ]
    rewards = [0.0, 0.125, 0.5, 1.0]
    steps: list[StepRecord] = []
    for t, (action, obs, reward) in enumerate(zip(actions, observations, rewards, strict=True)):
        # The "policy" samples ids. On turn 1 it samples a non-canonical split of a merged token: the same
        # text, but not what re-tokenising that text would give. The schema must keep these exact ids.
        sampled = _enc(tok, action)
        if t == 1:
            sampled = _split_a_merge(tok, sampled)
            assert tok.decode(sampled) == action
            assert _enc(tok, action) != sampled
        sampled = [*sampled, end]  # the sampled stop token belongs to the action
        if t == 2:  # a policy reporting float32 log-probs
            logprobs = [float(x) for x in (-rng.exponential(size=len(sampled))).astype(np.float32)]
        else:
            logprobs = [float(x) for x in -rng.exponential(size=len(sampled))]
        # The env side tokenises the observation, chat-template tokens included (mask 0).
        obs_ids = [*_enc(tok, "\n"), start, *_enc(tok, "tool\n" + obs), end, *_enc(tok, "\n"), start]
        obs_ids += _enc(tok, "assistant\n")
        if t == len(actions) - 1:
            obs_ids = []
        first = len(expected_ids)
        expected_ids.extend(sampled)
        action_positions.update(range(first, first + len(sampled)))
        last_action_token[first + len(sampled) - 1] = reward
        sampled_logprobs.extend(logprobs)
        expected_ids.extend(obs_ids)
        steps.append(
            StepRecord(
                episode_id="coding-ep-0",
                step=t,
                task_id="fix-add",
                domain="coding",
                prompt_text=prompt_text if t == 0 else "",
                prompt_ids=prompt_ids if t == 0 else [],
                action_text=action,
                action_ids=sampled,
                action_logprobs=logprobs,
                observation_text=obs,
                observation_ids=obs_ids,
                reward=reward,
                reward_components={"tests_passed": reward, "format": 0.0},
                terminated=t == len(actions) - 1,
                info={"turn": t, "tool": json.loads(action)["tool"] if action.startswith("{") else None},
                timings={"policy_s": 0.01 * (t + 1), "env_s": 0.002, "sandbox_s": 0.3 if t == 2 else 0.0},
            )
        )
    original = Trajectory(steps).validate()
    assert original.token_ids() == expected_ids

    path = tmp_path / "run" / TRAJECTORIES_FILE
    other = _episode("ecommerce-ep-0", n=2, logprobs=False)
    with TrajectoryWriter(path) as writer:
        writer.add(original)
        writer.add(other)
    assert _tmp_leftovers(path.parent) == []

    read = read_trajectories(path)
    assert [t.episode_id for t in read] == ["coding-ep-0", "ecommerce-ep-0"]
    back = read[0]
    assert back == original  # every field, every list, every dict
    assert back.steps[1].action_ids == steps[1].action_ids != [*_enc(tok, actions[1]), end]
    back_lp = back.logprobs()
    assert _bits64([back_lp[i] for i in sorted(action_positions)]) == _bits64(sampled_logprobs)
    assert tok.decode(back.token_ids(), skip_special_tokens=False) == tok.decode(
        expected_ids, skip_special_tokens=False
    )

    batch = to_tensors(read, pad_id=_special(tok, "<pad>"), float_dtype=torch.float64)
    n = len(expected_ids)
    assert batch["episode_ids"] == ["coding-ep-0", "ecommerce-ep-0"]
    assert batch["input_ids"].dtype == torch.long
    assert batch["input_ids"].shape == (2, n)
    assert batch["input_ids"][0].tolist() == expected_ids  # the concatenation is exactly the sampled ids
    assert batch["attention_mask"][0].tolist() == [1] * n
    mask = batch["loss_mask"][0].tolist()
    assert {i for i, m in enumerate(mask) if m == 1} == action_positions
    assert all(mask[i] == 0 for i in range(n) if i not in action_positions)  # no prompt/obs token trains
    assert batch["logprob_mask"][0].tolist() == mask
    got_lp = batch["old_logprobs"][0].numpy()
    assert _bits64(got_lp[sorted(action_positions)]) == _bits64(sampled_logprobs)
    assert not got_lp[[i for i in range(n) if i not in action_positions]].any()
    rewards_row = batch["token_rewards"][0].tolist()
    assert {i: r for i, r in enumerate(rewards_row) if r != 0.0} == {
        i: r for i, r in last_action_token.items() if r != 0.0
    }
    assert sum(rewards_row) == sum(rewards)

    # the padded second row
    m = other.num_tokens
    assert batch["input_ids"][1, m:].eq(_special(tok, "<pad>")).all()
    assert batch["attention_mask"][1].tolist() == [1] * m + [0] * (n - m)
    assert batch["loss_mask"][1, m:].eq(0).all()
    assert batch["seq_lens"].tolist() == [n, m]
    assert batch["num_truncated"] == 0

    # default float32 tensors hold the float32 rounding of the stored values
    batch32 = to_tensors(read)
    assert batch32["old_logprobs"].dtype == torch.float32
    assert torch.equal(batch32["old_logprobs"], batch["old_logprobs"].to(torch.float32))


# ------------------------------------------------------------------------------------------ validation


def _set(index: int, /, **kw: object) -> Callable[[Trajectory], None]:
    """Replace fields of ``steps[index]``."""

    def mutate(traj: Trajectory) -> None:
        traj.steps[index] = replace(traj.steps[index], **kw)  # type: ignore[arg-type]

    return mutate


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (_set(1, action_logprobs=[-1.0]), r"step 1 .*action_logprobs has 1 values but action_ids has 2"),
        (_set(1, action_logprobs=[-1.0, math.nan]), r"step 1 .*action_logprobs\[1\] must be a finite"),
        (_set(0, step=-1), r"step -1 .*step must be a non-negative int"),
        (_set(2, step=3), r"step 3 .*consecutive.*expected step 2"),
        (_set(2, terminated=True, truncated=True), r"step 2 .*terminated and truncated are both true"),
        (_set(0, terminated=True), r"step 0 .*terminated is true but 2 step\(s\) follow"),
        (_set(1, domain="retail"), r"step 1 .*domain must be one of \['coding', 'ecommerce'\]"),
        (_set(1, episode_id="ep-other"), r"step 1 .*episode_id 'ep-other' differs from step 0"),
        (_set(1, prompt_ids=[5]), r"step 1 .*prompt_text/prompt_ids must be empty after step 0"),
        (_set(1, action_ids=[]), r"step 1 .*action_ids is empty"),
        (_set(1, observation_ids=[1, -2]), r"step 1 .*observation_ids\[1\] must be a non-negative int"),
        (_set(1, action_ids=[1, 2.0]), r"step 1 .*action_ids\[1\] must be a non-negative int"),
        (_set(1, reward=math.inf), r"step 1 .*reward must be a finite number"),
        (_set(1, reward_components={"x": math.nan}), r"step 1 .*reward_components\['x'\] must be a finite"),
        (_set(1, timings={"env_s": -1.0}), r"step 1 .*timings\['env_s'\] must be >= 0"),
        (_set(1, info={"obj": object()}), r"step 1 .*info is not JSON-serialisable"),
        (_set(1, info={"big": "x" * 20_000}), r"step 1 .*info is .* over MAX_INFO_CHARS"),
        (_set(1, task_id=""), r"step 1 .*task_id must be a non-empty str"),
    ],
)
def test_validation_names_step_and_field(mutate: Callable[[Trajectory], None], pattern: str) -> None:
    traj = _episode(n=3)
    mutate(traj)
    with pytest.raises(ValueError, match=pattern):
        traj.validate()


def test_empty_trajectory_is_invalid() -> None:
    with pytest.raises(ValueError, match="no steps"):
        Trajectory([]).validate()


def test_writer_rejects_invalid_and_duplicate_episodes(tmp_path: Path) -> None:
    path = tmp_path / TRAJECTORIES_FILE
    writer = TrajectoryWriter(path)
    bad = _episode("ep-bad")
    bad.steps[1].action_logprobs = [0.0]
    with pytest.raises(ValueError, match=r"step 1 of episode 'ep-bad'.*action_logprobs"):
        writer.add(bad)
    writer.add(_episode("ep-0"))
    with pytest.raises(ValueError, match="episode_id 'ep-0' is already"):
        writer.add(_episode("ep-0"))
    with pytest.raises(ValueError, match="episode_id 'ep-1' is already"):
        writer.extend([_episode("ep-1"), _episode("ep-1")])
    assert writer.num_episodes == 1  # all-or-nothing
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):
        writer.add(_episode("ep-2"))
    assert [t.episode_id for t in read_trajectories(path)] == ["ep-0"]


# ------------------------------------------------------------------------------------------ storage


def test_failed_write_keeps_old_file_and_leaves_no_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / TRAJECTORIES_FILE
    with TrajectoryWriter(path) as writer:
        writer.add(_episode("ep-0"))
    before = path.read_bytes()

    writer = TrajectoryWriter(path)  # resume: loads ep-0
    writer.add(_episode("ep-1"))

    def boom(src: object, dst: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(tio.os, "replace", boom)
    with pytest.raises(OSError, match="disk on fire"):
        writer.flush()
    assert path.read_bytes() == before
    assert _tmp_leftovers(tmp_path) == []

    monkeypatch.undo()
    writer.close()  # the episodes were kept; a later flush succeeds
    assert [t.episode_id for t in read_trajectories(path)] == ["ep-0", "ep-1"]


def test_failed_serialisation_creates_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sub" / TRAJECTORIES_FILE

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("parquet writer crashed")

    monkeypatch.setattr(tmod.pq, "write_table", broken)
    writer = TrajectoryWriter(path)
    writer.add(_episode("ep-0"))
    with pytest.raises(RuntimeError, match="parquet writer crashed"):
        writer.flush()
    assert not path.exists()
    assert not path.parent.exists() or _tmp_leftovers(path.parent) == []


def test_empty_writer_writes_schema_only_table(tmp_path: Path) -> None:
    path = tmp_path / TRAJECTORIES_FILE
    with TrajectoryWriter(path) as writer:
        assert writer.num_episodes == 0
    assert path.exists()
    assert tuple(pq.read_schema(path).names) == COLUMNS
    assert read_trajectories(path) == []
    batch = to_tensors([])
    assert batch["input_ids"].shape == (0, 0)
    assert batch["episode_ids"] == []


def test_episode_without_logprobs(tmp_path: Path) -> None:
    path = tmp_path / TRAJECTORIES_FILE
    traj = _episode("ep-nolp", n=2, logprobs=False)
    with TrajectoryWriter(path) as writer:
        writer.add(traj)
    assert pq.read_table(path).column("action_logprobs").null_count == 2
    (back,) = read_trajectories(path)
    assert back == traj
    assert all(s.action_logprobs is None for s in back.steps)
    assert all(math.isnan(x) for x in back.logprobs())
    batch = to_tensors([back])
    assert not batch["old_logprobs"].any()
    assert not batch["logprob_mask"].any()
    assert batch["loss_mask"][0].tolist() == back.loss_mask() == [0, 0, 0, 1, 1, 0, 1, 1, 0]


def test_writer_flushes_every_n_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / TRAJECTORIES_FILE
    writer = TrajectoryWriter(path, flush_every=2)
    writer.add(_episode("ep-0"))
    assert not path.exists()
    writer.add(_episode("ep-1"))
    assert len(read_trajectories(path)) == 2
    writer.close()
    with TrajectoryWriter(path) as again:
        assert again.num_episodes == 2
        assert again.num_steps == 6
        again.add(_episode("ep-2", n=1))
    assert [t.episode_id for t in read_trajectories(path)] == ["ep-0", "ep-1", "ep-2"]


def test_read_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="trajectory file not found"):
        read_trajectories(tmp_path / "nope.parquet")
    assert read_trajectories(tmp_path / "nope.parquet", missing_ok=True) == []
    other = tmp_path / "metrics.parquet"
    pq.write_table(tmod.pa.table({"step": [1]}), other)
    with pytest.raises(ValueError, match="not a trajectory table: missing columns"):
        read_trajectories(other)


# ------------------------------------------------------------------------------------------ tensors & maths


def test_truncation_keeps_beginning_and_reports(caplog: pytest.LogCaptureFixture) -> None:
    traj = _episode("ep-long", n=3)  # ids: [1,2,3 | 10,20 | 30 | 11,21 | 31 | 12,22 | 32] -> 12 tokens
    short = _episode("ep-short", n=1)  # 6 tokens
    with caplog.at_level(logging.WARNING, logger=tmod.__name__):
        batch = to_tensors([traj, short], pad_id=0, max_len=7)
    assert batch["input_ids"].shape == (2, 7)
    assert batch["input_ids"][0].tolist() == traj.token_ids()[:7]
    assert batch["loss_mask"][0].tolist() == [0, 0, 0, 1, 1, 0, 1]
    assert batch["seq_lens"].tolist() == [12, 6]
    assert batch["num_truncated"] == 1
    assert batch["num_truncated_tokens"] == 5
    assert batch["num_dropped_rewards"] == 2  # steps 1 and 2 lost their last action token
    assert batch["token_rewards"][0].tolist() == [0.0] * 7  # step 0's reward is 0.0
    assert "truncated 1 of 2 episode(s) to max_len=7" in caplog.text
    with pytest.raises(ValueError, match="max_len"):
        to_tensors([traj], max_len=0)


def test_returns_total_reward_and_token_rewards() -> None:
    traj = _episode(n=3)  # rewards 0, 1, 2
    assert traj.total_reward == 3.0
    assert traj.returns(1.0) == [3.0, 3.0, 2.0]
    assert traj.returns(0.5) == [0.0 + 0.5 * (1.0 + 0.5 * 2.0), 1.0 + 0.5 * 2.0, 2.0]
    assert traj.token_rewards() == [0, 0, 0, 0, 0.0, 0, 0, 1.0, 0, 0, 2.0, 0]
    assert traj.action_spans() == [(3, 5), (6, 8), (9, 11)]
    assert traj.terminated and not traj.truncated
    with pytest.raises(ValueError, match="gamma"):
        traj.returns(1.5)


def test_import_does_not_load_torch() -> None:
    code = "import sys, transferlab.platform.trajectory; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
