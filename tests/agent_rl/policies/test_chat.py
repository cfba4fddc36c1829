"""Chat turns from any tokenizer's template: ChatML (Qwen2), Llama 3 and a plain-text GPT-2 one.

The exact-id invariant is checked on each: what the policy saw at every turn is the prompt plus
the sampled ids plus the observation ids, the loss mask covers exactly the sampled ids, and the
observation turns are the template's own text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from transferlab.agent_rl import episodes as agent_rollout
from transferlab.agent_rl.episodes import policy_episodes
from transferlab.agent_rl.policies.chat import ChatFormat, ChatTemplateError, action_ids
from transferlab.agent_rl.policies.families import FAMILIES, family_tokenizer, init_model
from transferlab.agent_rl.policies.generation import SamplingConfig, stop_token_ids
from transferlab.agent_rl.policies.tokenizer import encode_chat, observation_ids
from transferlab.platform.agent_env import RewardTable, finish_step
from transferlab.platform.trajectory import Domain, to_tensors

torch.set_num_threads(1)

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    '{"action": "read_file", "path": "src/calc.py"}',
    "tool error: unknown action; 3 passed, 1 failed",
    "Issue: add() returns the wrong sign. Fix the bug in src/calc.py.",
] * 20

# the template text between an ended assistant turn and the next generation prompt, per family
AFTER_TURN = {
    "qwen2": "\n<|im_start|>user\n<tool_response>\n{obs}\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n",
    "llama": "<|start_header_id|>ipython<|end_header_id|>\n\n{obs}<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "gpt2": "\nuser: {obs}<|endoftext|>\nassistant: ",
}
END_OF_TURN = {"qwen2": "<|im_end|>", "llama": "<|eot_id|>", "gpt2": "<|endoftext|>"}


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def tok(family: str) -> Any:
    return family_tokenizer(family, TEXTS, vocab_size=400)


def test_prompt_ids_are_the_templates_own(family: str, tok: Any) -> None:
    messages = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Issue: add() is wrong"},
        {"role": "assistant", "content": '{"action": "run_tests"}'},
    ]
    ids = encode_chat(tok, messages)
    rendered: Any = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert ids == list(rendered["input_ids"])
    if family == "qwen2":  # no bos token anywhere, the template decides what comes first
        assert tok.bos_token is None
        assert tok.decode(ids[:1]) == "<|im_start|>"


def test_end_of_turn_and_observation_turns(family: str, tok: Any) -> None:
    fmt = ChatFormat.for_tokenizer(tok)
    assert fmt.end_of_turn == END_OF_TURN[family]
    assert fmt.tool_role == ("user" if family == "gpt2" else "tool")  # gpt2's template refuses 'tool'
    obs = "3 passed, 1 failed"
    after = tok.decode(observation_ids(tok, obs), skip_special_tokens=False)
    assert after == AFTER_TURN[family].format(obs=obs)
    cut = tok.decode(observation_ids(tok, obs, ended=False), skip_special_tokens=False)
    assert cut == END_OF_TURN[family] + AFTER_TURN[family].format(obs=obs)
    demo = action_ids(tok, '{"action": "submit"}')
    assert tok.decode(demo, skip_special_tokens=False) == '{"action": "submit"}' + END_OF_TURN[family]


def test_stop_tokens_come_from_the_template_and_generation_config(family: str, tok: Any) -> None:
    model = init_model(family, "tiny", tok, seed=0)
    stops = stop_token_ids(tok, SamplingConfig(), model)
    eot = tok.convert_tokens_to_ids(END_OF_TURN[family])
    assert eot in stops
    if tok.bos_token is not None and tok.bos_token != tok.eos_token:
        assert tok.bos_token_id not in stops
    assert stop_token_ids(tok, SamplingConfig(stop_at_eos=False), model) == set()


def test_a_tokenizer_without_a_template_is_refused_with_the_fix(tok: Any) -> None:
    bare = family_tokenizer("qwen2", TEXTS, vocab_size=400)
    bare.chat_template = None
    with pytest.raises(ChatTemplateError, match=r"no chat template.*fix:"):
        encode_chat(bare, [{"role": "user", "content": "hi"}])


@dataclass(frozen=True)
class _Task:
    task_id: str
    domain: Domain = "coding"
    split: str = "train"
    provenance: dict[str, Any] = field(default_factory=dict)


TABLE = RewardTable(weights={"said": 1.0, "task_failed": -1.0}, final=("task_failed",))


class _EchoEnv:
    """Three tool turns that answer with the action's length."""

    domain: Domain = "coding"
    rewards = TABLE

    def __init__(self) -> None:
        self.max_steps, self.steps, self.last_timings = 3, 0, {"env_s": 0.0}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        self.steps = 0
        return f"Issue: fix {(options or {})['task'].task_id}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        info: dict[str, Any] = {"tool": "say", "tool_ok": True, "success": None}
        return finish_step(
            f"{len(action)} chars",
            {"said": 1},
            info,
            terminated=False,
            step=self.steps,
            max_steps=self.max_steps,
            table=TABLE,
            ending="an end",
        )

    def render(self) -> str | None:
        return None

    def close(self) -> None:
        pass


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_multi_turn_ids_are_exact_and_only_actions_are_trained(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tok = family_tokenizer(name, TEXTS, vocab_size=400)
    model = init_model(name, "tiny", tok, seed=3)
    eot = ChatFormat.for_tokenizer(tok).end_of_turn_ids
    bias = torch.zeros(model.config.vocab_size)
    bias[eot[0]] = 3.5  # (a torch hook) so some turns end on their own and others are cut
    model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: out + bias)
    seen: list[list[list[int]]] = []
    real = agent_rollout.generate

    def recording(m: Any, t: Any, prompts: Any, cfg: Any) -> Any:
        seen.append([list(p) for p in prompts])
        return real(m, t, prompts, cfg)

    monkeypatch.setattr(agent_rollout, "generate", recording)
    sampling = SamplingConfig(max_new_tokens=6, seed=11)
    trajs = policy_episodes(model, tok, [_EchoEnv(), _EchoEnv()], [_Task("a"), _Task("b")], sampling, 512)
    reasons = [s.info["stop_reason"] for t in trajs for s in t.steps]
    assert {"stop_token", "length"} <= set(reasons), reasons
    for i, traj in enumerate(trajs):
        context = list(traj.steps[0].prompt_ids)
        assert context == encode_chat(tok, [{"role": "user", "content": traj.prompt_text}])
        for turn, step in enumerate(traj.steps):
            assert seen[turn][i] == context  # what the policy saw: ids, never re-tokenised text
            ended = step.info["stop_reason"] == "stop_token"
            expected = observation_ids(tok, step.observation_text, ended=ended)
            assert step.observation_ids == expected
            if ended:  # the sampled end-of-turn token closes the turn; nothing is added
                assert tuple(step.action_ids[-len(eot) :]) == eot
                assert tuple(step.observation_ids[: len(eot)]) != eot
            else:  # a cut turn is closed with the template's end-of-turn token
                assert tuple(step.observation_ids[: len(eot)]) == eot
            context += step.action_ids + step.observation_ids
        ids, mask = traj.token_ids(), traj.loss_mask()
        assert [t for t, m in zip(ids, mask, strict=True) if m] == [
            t for s in traj.steps for t in s.action_ids
        ]
    batch = to_tensors(trajs, pad_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    assert int(batch["loss_mask"].sum()) == sum(len(s.action_ids) for t in trajs for s in t.steps)
