"""How many nodes the measured load needs, per node profile (SPEC "Self-hosting, version 2",
`nodes`), and the profiles llmmeter ships when llmmeter.toml configures none.

A node must hold the KV cache of the requests in flight and keep up with their prefill and
decode: the load needs, on a profile, the largest of ⌈load ÷ capacity⌉ over the three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from proxy.report.load import LoadByMinute
from proxy.settings import NodeProfile, SelfHost

_LAUNCH = "launch coverage of Kimi K3.1 Pro"
_CAPEX = f"third-party estimate: US$550,000-650,000 per 8-GPU node ({_LAUNCH}), midpoint"
_POWER = "assumption, no source: about 1.9 kW per accelerator with host"
_PREFILL = "assumption, no source: no public prefill figure for this model on this node"
# The profiles SPEC names, each figure marked as a vendor claim or an assumption with its source.
SHIPPED: tuple[NodeProfile, ...] = (
    NodeProfile(
        name="8xB300-vllm-fp8", accelerators="8x NVIDIA B300 288 GB", kv_cache_tokens=2_600_000,
        prefill_tokens_per_s=50_000, decode_tokens_per_s=17_678, capex_usd=Decimal(600_000),
        power_kw=Decimal(15),
        sources=(("accelerators", f"vendor claim: the vLLM recipe's minimum node ({_LAUNCH})"),
                 ("capex_usd", _CAPEX), ("power_kw", _POWER),
                 ("kv_cache_tokens", f"vendor claim: vLLM recipe, FP8 KV cache on 8x B300, ~2.6M tokens ({_LAUNCH})"),
                 ("prefill_tokens_per_s", _PREFILL),
                 ("decode_tokens_per_s", "assumption: the 8x MI355X vendor claim (17,678 tokens/s aggregate), "
                                         "no published B300 figure"))),
    NodeProfile(
        name="8xB300-vllm-dcp8", accelerators="8x NVIDIA B300 288 GB", kv_cache_tokens=18_500_000,
        prefill_tokens_per_s=50_000, decode_tokens_per_s=17_678, capex_usd=Decimal(600_000),
        power_kw=Decimal(15),
        sources=(("accelerators", f"vendor claim: the vLLM recipe's minimum node ({_LAUNCH})"),
                 ("capex_usd", _CAPEX), ("power_kw", _POWER),
                 ("kv_cache_tokens", f"vendor claim: vLLM recipe with decode context parallel 8 (DCP8), "
                                     f"~18.5M tokens ({_LAUNCH})"),
                 ("prefill_tokens_per_s", _PREFILL),
                 ("decode_tokens_per_s", "assumption: the 8x MI355X vendor claim (17,678 tokens/s aggregate), "
                                         "no published B300 figure"))),
    NodeProfile(
        name="8xMI355X-vllm-atom", accelerators="8x AMD MI355X 288 GB", kv_cache_tokens=2_600_000,
        prefill_tokens_per_s=50_000, decode_tokens_per_s=17_678, capex_usd=Decimal(600_000),
        power_kw=Decimal(15),
        sources=(("accelerators", f"vendor claim: a 288 GB part the weights fit on ({_LAUNCH})"),
                 ("capex_usd", _CAPEX), ("power_kw", _POWER),
                 ("kv_cache_tokens", "assumption: as 8x B300 with FP8 KV (same 288 GB per accelerator), "
                                     "no published MI355X figure"),
                 ("prefill_tokens_per_s", _PREFILL),
                 ("decode_tokens_per_s", "vendor claim: vLLM/ATOM 17,678 tokens/s aggregate with DCP prefill, "
                                         f"conditions unpublished ({_LAUNCH})"))),
)

# The three limits, in the order a tie is reported: (name, load figure, profile capacity).
LIMITS = (("kv_cache", "kv_tokens_in_flight", "kv_cache_tokens"),
          ("prefill", "prefill_tokens_per_s", "prefill_tokens_per_s"),
          ("decode", "decode_tokens_per_s", "decode_tokens_per_s"))
NO_LOAD = "none"  # the binding limit of a month with no load


@dataclass(frozen=True, slots=True)
class NodeNeed:
    node: str
    needed_p95: int
    needed_peak: int
    binding: str  # kv_cache | prefill | decode | none
    with_redundancy: int
    profile: NodeProfile


def profiles(sh: SelfHost) -> tuple[NodeProfile, ...]:
    """The configured [[selfhost.node]] tables, which replace the shipped ones."""
    return sh.node_profiles or SHIPPED


def nodes_needed(load: LoadByMinute, node_profiles: tuple[NodeProfile, ...]) -> tuple[NodeNeed, ...]:
    out = []
    for p in node_profiles:
        def ratios(pick: str, p: NodeProfile = p) -> list[tuple[str, Fraction]]:
            return [(name, getattr(load.figure(figure), pick) / getattr(p, capacity))
                    for name, figure, capacity in LIMITS]

        at_p95, at_peak = ratios("p95"), ratios("max")
        binding, worst = max(at_peak, key=lambda x: x[1])  # the first of equals: LIMITS' order
        needed_peak = math.ceil(worst)
        out.append(NodeNeed(node=p.name, needed_p95=max(math.ceil(r) for _, r in at_p95), needed_peak=needed_peak,
                            binding=binding if worst else NO_LOAD, with_redundancy=needed_peak + 1, profile=p))
    return tuple(out)

