"""Where a policy runs and in what precision: ``--device`` / ``--dtype`` specs to torch objects.

* :func:`resolve_device` turns ``"auto" | "cpu" | "cuda" | "cuda:N" | "mps"`` into a
  :class:`torch.device`; ``"auto"`` is CUDA when torch sees a CUDA device, else the CPU. Asking for
  an accelerator this torch cannot see raises :class:`DeviceError`, whose message names the fix.
* :func:`resolve_dtype` turns ``"auto" | "float32" | "bfloat16" | "float16"`` into a
  :class:`torch.dtype` for a device; ``"auto"`` is bfloat16 on a CUDA device that supports it (else
  float16) and float32 everywhere else, so CPU runs stay in float32.
* :func:`place_model` moves a model to a device and casts its weights the way ``from_pretrained(...,
  dtype=)`` loads them (non-persistent buffers such as rotary frequencies stay float32), so a learner
  cast here and a worker loading the saved checkpoint in that dtype compute the same log-probs.
* :func:`context_limit` reads the longest sequence a model takes from its Hugging Face config;
  :func:`model_device` is the device its parameters live on.

>>> resolve_device("cpu"), resolve_dtype("auto", resolve_device("cpu"))
(device(type='cpu'), torch.float32)
"""

from __future__ import annotations

from typing import Any, Final

import torch

__all__ = [
    "DEVICE_PATTERN",
    "DTYPES",
    "DeviceError",
    "context_limit",
    "model_device",
    "model_dtype",
    "place_model",
    "resolve_device",
    "resolve_dtype",
]

DTYPES: Final[dict[str, torch.dtype]] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}
"""The dtype names :func:`resolve_dtype` accepts besides ``"auto"``."""

DEVICE_PATTERN: Final = r"^(auto|cpu|mps|cuda(:[0-9]+)?)$"
"""The device specs :func:`resolve_device` knows (whether this machine has them is checked there)."""

_CONTEXT_FIELDS: Final = ("max_position_embeddings", "n_positions", "max_seq_len", "n_ctx", "seq_length")


class DeviceError(ValueError):
    """A device or dtype this torch cannot provide (or a spec it does not know); the message names the fix."""


def _torch_build() -> str:
    cuda = torch.version.cuda
    return f"{torch.__version__}, built with CUDA {cuda}" if cuda else torch.__version__


def _cuda_device(spec: str) -> torch.device:
    if not torch.cuda.is_available():
        raise DeviceError(
            f"--device {spec} asked for CUDA, but this torch ({_torch_build()}) sees no CUDA device; use "
            "--device cpu or --device auto, or install a CUDA build of torch on a machine with an NVIDIA GPU"
        )
    device = torch.device(spec)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise DeviceError(
            f"--device {spec} asked for CUDA device {device.index}, but torch sees {count} CUDA "
            f"device(s) (0..{count - 1}); pick one of those, or --device cuda for the current one"
        )
    return device


def resolve_device(spec: str | torch.device = "auto") -> torch.device:
    """The :class:`torch.device` for ``spec``: ``"auto"`` (CUDA when present, else CPU), ``"cpu"``,
    ``"cuda"``, ``"cuda:N"`` or ``"mps"``.

    Raises:
        DeviceError: the device is unknown, or this torch cannot use it (no CUDA / MPS).
    """
    if isinstance(spec, torch.device):
        spec = str(spec)
    name = spec.strip().lower()
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        return _cuda_device(name)
    if name == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError(
                f"--device mps asked for Apple's Metal backend, but this torch ({_torch_build()}) cannot "
                "use it here; use --device cpu or --device auto"
            )
        return torch.device("mps")
    raise DeviceError(f"unknown device {spec!r}; use auto, cpu, cuda, cuda:N (N = the GPU's index) or mps")


def resolve_dtype(spec: str | torch.dtype, device: torch.device | str = "cpu") -> torch.dtype:
    """The :class:`torch.dtype` for ``spec`` on ``device``.

    ``"auto"`` is bfloat16 on a CUDA device that supports it, float16 on an older CUDA device, and
    float32 elsewhere (CPU, MPS). ``"float32"``, ``"bfloat16"`` and ``"float16"`` (or ``fp32``,
    ``bf16``, ``fp16``) are taken as given; a :class:`torch.dtype` is returned unchanged.

    Raises:
        DeviceError: the name is not a dtype listed above.
    """
    if isinstance(spec, torch.dtype):
        return spec
    name = spec.strip().lower()
    if name == "auto":
        if torch.device(device).type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if name in DTYPES:
        return DTYPES[name]
    raise DeviceError(f"unknown dtype {spec!r}; use auto, float32, bfloat16 or float16")


def context_limit(model_or_config: Any) -> int | None:
    """The longest sequence (prompt + completion, in tokens) the model takes, from its Hugging Face
    config (``max_position_embeddings``, ``n_positions``, ``max_seq_len``, ...); None when it names none.

    Accepts a model (also a peft-wrapped one) or its config.
    """
    config = getattr(model_or_config, "config", model_or_config)
    get_text = getattr(config, "get_text_config", None)
    if callable(get_text):  # multimodal configs keep the language model's limits in a sub-config
        config = get_text()
    for name in _CONTEXT_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def model_device(model: Any) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters)."""
    first = next(iter(model.parameters()), None)
    return first.device if first is not None else torch.device("cpu")


def model_dtype(model: Any) -> torch.dtype:
    """The dtype of the model's first floating-point parameter (float32 when it has none)."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def place_model(model: Any, device: torch.device | str, dtype: torch.dtype | None = None) -> Any:
    """Move ``model`` to ``device`` and cast its parameters and persistent floating buffers to ``dtype``
    (None keeps them); returns the model (moved in place).

    Non-persistent floating buffers (rotary ``inv_freq``, say) keep their dtype, as in a model loaded with
    ``from_pretrained(path, dtype=dtype)``: casting them to bfloat16 would shift every position's
    rotation, and the learner's log-probs would drift from its workers'.
    """
    device = torch.device(device)
    if dtype is None:
        return model.to(device)
    saved = set(model.state_dict())
    keep = {
        name: buf
        for name, buf in model.named_buffers()
        if buf.is_floating_point() and name not in saved and buf.dtype != dtype
    }
    model.to(device=device, dtype=dtype)
    for name, buf in keep.items():
        owner, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(owner), leaf, buf.to(device))
    return model
