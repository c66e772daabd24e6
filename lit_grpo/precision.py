"""``dtype: auto``: the policy's parameter dtype chosen from what the CPU computes natively.

bfloat16 where the CPU has native bf16 matrix instructions (x86 ``avx512_bf16`` or ``amx_bf16`` in
``/proc/cpuinfo``), float32 elsewhere: without them torch emulates bf16 matmuls, many times slower than
float32 (AVX2-only CPUs). The choice reads the CPU flags only; ``trainer.precision`` is Lightning's and is
left as given. With LoRA, peft keeps the adapters (the trained parameters) in float32 over bfloat16 base
weights. docs/real_model.md has the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: The CPU flags (``/proc/cpuinfo``) of native bf16 matrix instructions.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class Choice:
    """A resolved dtype and the reason, as printed and recorded with the run."""

    dtype: str
    reason: str

    def line(self, option: str = "dtype") -> str:
        return f"{option}=auto: {self.dtype} ({self.reason})"


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """The flags of the first CPU in ``cpuinfo``, or None where the file is missing or lists none."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def resolve_dtype(dtype: str, flags: frozenset[str] | None = None, cpuinfo: Path | None = None,
                  on_cpu: bool = True, lora: bool = True) -> Choice:
    """``dtype`` itself unless it is ``"auto"``; ``"auto"``: bfloat16 when ``flags`` (read from ``cpuinfo``
    when not given) hold one of :data:`BF16_FLAGS`, else float32; float32 when not ``on_cpu`` (on a GPU,
    ``trainer.precision`` picks Lightning's mixed-precision plugin over float32 weights) and without ``lora``
    (the trained weights themselves would be bfloat16, their updates rounded to 8 significant bits)."""
    if dtype != "auto":
        return Choice(dtype, "as given")
    if not on_cpu:
        return Choice("float32", "not on the CPU: trainer.precision sets mixed precision there")
    if not lora:
        return Choice("float32", "no LoRA: bfloat16 would round the trained weights' updates")
    if flags is None:
        cpuinfo = CPUINFO if cpuinfo is None else cpuinfo
        flags = cpu_flags(cpuinfo)
    if flags is None:
        return Choice("float32", f"no CPU flags in {cpuinfo}: native bf16 matmul not detected")
    native = [flag for flag in BF16_FLAGS if flag in flags]
    if native:
        return Choice("bfloat16", f"the CPU has {' and '.join(native)}: native bf16 matmul")
    return Choice("float32", f"the CPU has none of {', '.join(BF16_FLAGS)}: bf16 would be emulated, slower")
