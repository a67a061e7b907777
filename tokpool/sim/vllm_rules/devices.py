"""The one device table: one record per accelerator, used by every part of the simulator.

Each ``Hardware`` record carries what two different readers need:

- vLLM's rules (``batch_limits.batch_defaults``,
  ``cudagraph.default_max_cudagraph_capture_size``, the KV-cache sizing in ``kv_cache``) read
  what the DRIVER reports: ``total_memory_bytes`` (what ``torch.cuda.mem_get_info`` returns as
  total — a little below the nominal capacity), the device name (``driver_name``: vLLM looks
  for ``"a100"`` in it) and the compute capability (``(10, x)`` is data-centre Blackwell);
- tokpool's roofline time ESTIMATES (``tokpool.sim.backends.timing``) read the spec sheet:
  nominal ``hbm_bytes``, HBM bandwidth, dense bf16 FLOP/s and the host link's bandwidth.

The CPU record (``"CPU"``, vLLM's CPU platform: ``cpu_platform``) has no memory total:
``hbm_bytes`` and ``total_memory_bytes`` are ``None`` (the host's memory is not a device figure;
vLLM sizes the CPU KV cache from ``VLLM_CPU_KVCACHE_SPACE``), so no share of "device memory" is
computed for it. Its bandwidth and FLOP figures are placeholders (1.0): time ESTIMATES on it
mean nothing.

Driver-reported totals are rounded down to whole GiB from the nominal capacity (an H200's
141 GB-class HBM3e reports about 139.8 GiB; vLLM's tiers — >= 160 GiB, >= 70 GiB — are far from
every preset). They are ESTIMATES where no driver was asked; pass your own record
(``Hardware(..., total_memory_bytes=...)``) to use what ``nvidia-smi`` says on your machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

GiB = 1 << 30


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(
                f"{type(obj).__name__}.{name} must be a positive number, got {value!r}"
            )


@dataclass(frozen=True)
class Hardware:
    """One accelerator: spec sheet (time estimates) and what its driver reports (vLLM's rules).

    Attributes:
        name: label (the preset key, e.g. ``"H100 SXM"``).
        hbm_bytes: nominal device memory capacity, bytes; ``None`` only for a CPU (``platform
            ="cpu"``): no device memory total (see the module docstring).
        hbm_bandwidth: device memory bandwidth, bytes/s.
        bf16_flops: dense bf16 tensor-core throughput, FLOP/s (no sparsity).
        pcie_bandwidth: host link bandwidth for device-to-host copies, bytes/s, one direction.
        total_memory_bytes: device memory as the driver reports it (vLLM sizes the KV cache
            and picks its defaults from this); default ``hbm_bytes``.
        capability: CUDA compute capability ``(major, minor)``.
        driver_name: the name ``torch.cuda.get_device_name()`` reports; default ``name``.
        platform: ``"cuda"`` or ``"cpu"``.

    Example:
        >>> card = Hardware("my-gpu", hbm_bytes=48 * GiB, hbm_bandwidth=0.9e12,
        ...                 bf16_flops=180e12, pcie_bandwidth=32e9)  # a custom card
        >>> card.total_memory_bytes == 48 * GiB
        True
    """

    name: str
    hbm_bytes: int | None
    hbm_bandwidth: float
    bf16_flops: float
    pcie_bandwidth: float
    total_memory_bytes: int | None = None
    capability: tuple[int, int] = (9, 0)
    driver_name: str | None = None
    platform: Literal["cuda", "cpu"] = "cuda"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"Hardware.name must be a non-empty string, got {self.name!r}")
        if self.platform not in ("cuda", "cpu"):
            raise ValueError(f"platform must be 'cuda' or 'cpu', got {self.platform!r}")
        if self.hbm_bytes is None and self.platform != "cpu":
            raise ValueError(f"Hardware.hbm_bytes must be a positive number for a "
                             f"{self.platform!r} device, got None (only a CPU has no device "
                             "memory total)")
        _positive(self, "hbm_bandwidth", "bf16_flops", "pcie_bandwidth",
                  *(("hbm_bytes",) if self.hbm_bytes is not None else ()))
        if self.total_memory_bytes is None:
            object.__setattr__(self, "total_memory_bytes", self.hbm_bytes)
        else:
            _positive(self, "total_memory_bytes")
        if self.driver_name is None:
            object.__setattr__(self, "driver_name", self.name)
        cap = tuple(self.capability)
        if len(cap) != 2 or any(isinstance(c, bool) or not isinstance(c, int) for c in cap):
            raise ValueError(f"capability must be (major, minor) ints, got {self.capability!r}")
        object.__setattr__(self, "capability", cap)

    @property
    def is_data_center_blackwell(self) -> bool:
        """``is_device_capability_family(100)``: sm_10x (B200, GB200, B300)."""
        return self.platform == "cuda" and self.capability[0] == 10


def DeviceFacts(
    name: str, total_memory_bytes: int, capability: tuple[int, int],
    platform: Literal["cuda", "cpu"] = "cuda",
) -> Hardware:
    """A device known only by what vLLM's rules read (name, driver-reported memory,
    capability): a ``Hardware`` whose spec-sheet numbers are placeholders (no time estimates
    from it mean anything)."""
    return Hardware(name, max(total_memory_bytes, 1), 1.0, 1.0, 1.0,
                    total_memory_bytes=max(total_memory_bytes, 1), capability=capability,
                    driver_name=name, platform=platform)


#: The device table. Spec sheets: SXM parts where there is a choice; PCIe Gen5 x16 ≈ 64 GB/s
#: per direction, Gen4 x16 ≈ 32 GB/s (theoretical); dense bf16. Driver-reported totals:
#: whole GiB below the nominal capacity (ESTIMATES; see the module docstring).
DEVICES: Mapping[str, Hardware] = {
    h.name: h
    for h in (
        Hardware("H100 SXM", 80 * GiB, 3.35e12, 989e12, 64e9, 79 * GiB, (9, 0),
                 "NVIDIA H100 80GB HBM3"),
        Hardware("H200", 141 * GiB, 4.8e12, 989e12, 64e9, 139 * GiB, (9, 0), "NVIDIA H200"),
        Hardware("A100 80GB", 80 * GiB, 2.039e12, 312e12, 32e9, 79 * GiB, (8, 0),
                 "NVIDIA A100-SXM4-80GB"),
        Hardware("A100 40GB", 40 * GiB, 1.555e12, 312e12, 32e9, 39 * GiB, (8, 0),
                 "NVIDIA A100-SXM4-40GB"),
        Hardware("L4", 24 * GiB, 300e9, 121e12, 32e9, 22 * GiB, (8, 9), "NVIDIA L4"),
        Hardware("B200", 180 * GiB, 8.0e12, 2250e12, 64e9, 178 * GiB, (10, 0), "NVIDIA B200"),
        Hardware("GB200", 186 * GiB, 8.0e12, 2500e12, 64e9, 184 * GiB, (10, 0),
                 "NVIDIA GB200"),
        Hardware("B300", 270 * GiB, 8.0e12, 2250e12, 64e9, 268 * GiB, (10, 3),
                 "NVIDIA B300 SXM6 AC"),
        Hardware("RTX PRO 6000", 96 * GiB, 1.8e12, 500e12, 64e9, 95 * GiB, (12, 0),
                 "NVIDIA RTX PRO 6000 Blackwell"),
        Hardware("GB10", 128 * GiB, 273e9, 100e12, 32e9, 119 * GiB, (12, 1), "NVIDIA GB10"),
        # vLLM's CPU platform: no device memory total (cpu_platform); timing placeholders
        Hardware("CPU", None, 1.0, 1.0, 1.0, None, (0, 0), "cpu", platform="cpu"),
    )
}
#: The same table under its historical name (``tp.HARDWARE_PRESETS``).
HARDWARE_PRESETS = DEVICES


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_KEY = {_key(n): h for n, h in DEVICES.items()} | {
    "h100": DEVICES["H100 SXM"], "a10080gb": DEVICES["A100 80GB"],
    "a10040gb": DEVICES["A100 40GB"], "rtxpro6000blackwell": DEVICES["RTX PRO 6000"],
}


def resolve_hardware(value: str | Hardware) -> Hardware:
    """A ``Hardware`` record from a device name (case, spaces and dashes ignored) or itself.

    Raises:
        ValueError: an empty or unknown name (the table is listed).
        TypeError: neither a name nor a ``Hardware``.
    """
    if isinstance(value, Hardware):
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"hardware must be a device name or a Hardware record, got {type(value).__name__}"
        )
    found = _BY_KEY.get(_key(value))
    if found is None:
        raise ValueError(
            f"unknown hardware {value!r}; use one of {list(DEVICES)} or pass a "
            "Hardware(name, hbm_bytes, hbm_bandwidth, bf16_flops, pcie_bandwidth, ...) record"
        )
    return found


#: vLLM's rules take a device by the same table (the old name of this function).
resolve_device = resolve_hardware
