"""Device and dtype specs, context limits, and moving a model the way from_pretrained loads it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import GPT2Config, LlamaConfig, PretrainedConfig

from transferlab.agent_rl.policies.adapters import LoraOptions
from transferlab.agent_rl.policies.devices import (
    DEVICE_PATTERN,
    DeviceError,
    context_limit,
    model_device,
    model_dtype,
    place_model,
    resolve_device,
    resolve_dtype,
)
from transferlab.agent_rl.policies.model import TinyPolicyConfig, load_policy, save_policy

TINY = TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=128, seed=0)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch reports two CUDA devices (nothing is allocated on them in these tests)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


# ------------------------------------------------------------------------------------------- devices


def test_auto_is_the_cpu_without_cuda(no_cuda: None) -> None:
    assert resolve_device() == torch.device("cpu")
    assert resolve_device("auto") == resolve_device(" CPU ") == resolve_device(torch.device("cpu"))


def test_auto_is_cuda_when_torch_sees_a_gpu(two_gpus: None) -> None:
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


def test_cuda_without_cuda_is_one_error_naming_the_fix(no_cuda: None) -> None:
    with pytest.raises(DeviceError) as info:
        resolve_device("cuda")
    message = str(info.value)
    assert "--device cuda asked for CUDA" in message and torch.__version__ in message
    assert "use --device cpu or --device auto" in message and "\n" not in message
    assert isinstance(info.value, ValueError)  # a bad setting, like every other config error
    with pytest.raises(DeviceError, match="--device cuda:0 asked for CUDA"):
        resolve_device("cuda:0")


def test_a_gpu_index_torch_does_not_see_is_an_error(two_gpus: None) -> None:
    with pytest.raises(DeviceError, match=r"device 2, but torch sees 2 CUDA device\(s\) \(0\.\.1\)"):
        resolve_device("cuda:2")


def test_unknown_and_unavailable_devices_are_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DeviceError, match="unknown device 'gpu'; use auto, cpu, cuda"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(DeviceError, match=r"--device mps .* use --device cpu"):
        resolve_device("mps")


@pytest.mark.parametrize("spec", ["auto", "cpu", "mps", "cuda", "cuda:0", "cuda:12"])
def test_the_config_pattern_accepts_every_device_resolve_device_knows(spec: str) -> None:
    assert re.match(DEVICE_PATTERN, spec)


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "CPU0", ""])
def test_the_config_pattern_refuses_what_resolve_device_refuses(spec: str, two_gpus: None) -> None:
    assert not re.match(DEVICE_PATTERN, spec)
    with pytest.raises(DeviceError):
        resolve_device(spec)


# -------------------------------------------------------------------------------------------- dtypes


def test_auto_dtype_is_float32_on_the_cpu() -> None:
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", "cpu") == torch.float32


@pytest.mark.parametrize(("bf16", "want"), [(True, torch.bfloat16), (False, torch.float16)])
def test_auto_dtype_on_cuda_is_bfloat16_where_supported(
    monkeypatch: pytest.MonkeyPatch, bf16: bool, want: torch.dtype
) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert resolve_dtype("auto", torch.device("cuda")) == want


def test_dtype_names_and_aliases() -> None:
    assert resolve_dtype("bfloat16") == resolve_dtype("BF16") == torch.bfloat16
    assert resolve_dtype("float16") == resolve_dtype("fp16") == resolve_dtype("half") == torch.float16
    assert resolve_dtype("float32", "cuda") == torch.float32  # a name is taken as given
    assert resolve_dtype(torch.float64) == torch.float64
    with pytest.raises(DeviceError, match="unknown dtype 'float7'; use auto, float32, bfloat16"):
        resolve_dtype("float7")


# ----------------------------------------------------------------------------- context and placement


def test_context_limit_from_each_config_family(tok: Any) -> None:
    assert context_limit(LlamaConfig(max_position_embeddings=4096)) == 4096
    assert context_limit(GPT2Config(n_positions=512)) == 512
    assert context_limit(PretrainedConfig()) is None
    model = TINY.create(tok)
    assert context_limit(model) == 128
    assert context_limit(LoraOptions(r=2).apply(model)) == 128  # through the peft wrapper
    gpt2 = TinyPolicyConfig(architecture="gpt2", n_layer=1, d_model=32, n_head=2, max_positions=64)
    assert context_limit(gpt2.create(tok)) == 64


def test_model_device_and_dtype(tok: Any) -> None:
    model = TINY.create(tok)
    assert model_device(model) == torch.device("cpu") and model_dtype(model) == torch.float32
    assert model_device(torch.nn.Module()) == torch.device("cpu")
    assert model_dtype(torch.nn.Module()) == torch.float32


def test_place_model_casts_like_from_pretrained(tok: Any, tmp_path: Path) -> None:
    """A learner cast in place and a worker loading the saved float32 checkpoint in bfloat16 hold the
    very same tensors (rotary frequencies stay float32 in both), so they compute the same log-probs."""
    model = TINY.create(tok)
    save_policy(model, tok, tmp_path)
    assert place_model(model, "cpu", torch.bfloat16) is model
    loaded, _ = load_policy(tmp_path, dtype="bfloat16")
    ours = dict(model.named_parameters()) | dict(model.named_buffers())
    theirs = dict(loaded.named_parameters()) | dict(loaded.named_buffers())
    assert set(ours) == set(theirs)
    for name, tensor in ours.items():
        assert tensor.dtype == theirs[name].dtype and torch.equal(tensor, theirs[name]), name
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert model_dtype(model) == torch.bfloat16
    ids = torch.tensor([tok.encode("def f(x: int) -> int:\n    return x + 1")])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)


def test_place_model_without_a_dtype_only_moves(tok: Any) -> None:
    model = TINY.create(tok)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    place_model(model, torch.device("cpu"))
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert model_dtype(model) == torch.float32


def test_load_policy_takes_auto_device_and_dtype(tok: Any, tmp_path: Path, no_cuda: None) -> None:
    """None keeps the stored dtype; 'auto' is the device's (float32 on the CPU); 'cuda' is refused
    before anything is read."""
    model = TINY.create(tok)
    place_model(model, "cpu", torch.bfloat16)
    save_policy(model, tok, tmp_path)
    stored, _ = load_policy(tmp_path, device="auto")
    assert model_device(stored) == torch.device("cpu") and model_dtype(stored) == torch.bfloat16
    auto, _ = load_policy(tmp_path, device="auto", dtype="auto")
    assert model_dtype(auto) == torch.float32
    with pytest.raises(DeviceError, match="sees no CUDA device"):
        load_policy(tmp_path, device="cuda")
    with pytest.raises(DeviceError, match="sees no CUDA device"):
        load_policy(tmp_path / "missing", device="cuda")
