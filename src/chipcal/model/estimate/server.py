"""An LLM served under latency limits (MLPerf's Server scenario): the highest Poisson load of
requests whose p99 time to first token and time per output token meet the limits, on a layout
of devices (estimate/serving.py serves the same engine at saturation).

MLPerf's LoadGen issues Server queries as a Poisson process and requires the 99th percentiles of
TTFT and TPOT to meet the benchmark's limits (mlperf.conf: llama2-70b 2 s and 200 ms). The engine
caps the sequences it runs at `slots` and admits a waiting request when one finishes. So each
device replica is a queue of `slots` servers, each busy for one request's generation:

    iteration(c)   = serving at saturation with c slots (serving.offline, max_batch c): the decode
                     step of c sequences plus their prefills' share
    TPOT           = iteration(c): a request's time per output token is the mean iteration over its
                     life, taken at full occupancy (the p99 request ran with the slots full)
    service_s      = output_tokens x iteration(c), a slot's hold per request (rate mu = 1 / service_s)
    wait for a slot: M/M/c (Erlang C): P(W > t) = C(c, a) exp(-(c mu - lambda) t), a = lambda / mu,
                     so W99 = ln(C(c, a) / 0.01) / (c mu - lambda) where C(c, a) > 0.01, else 0
    TTFT99         = W99 + iteration(c) (the running iteration ends first) + the prefill of one
                     group of prompts (serving.prefill_group)
    lambda(c)      = the highest arrival rate per replica with TTFT99 <= ttft_s (bisection: W99
                     grows with lambda), where TPOT <= tpot_s and the fixed part fits ttft_s
    tokens_per_s   = dp x lambda(c) x output_tokens

A benchmark may instead limit a query's whole latency (gptj: mlperf.conf v4.1 L58
`gptj.Server.target_latency = 20000`, ms, at LoadGen's default 99th percentile). Its p99 request
is taken as one that waited W99 and generates the longest output (gptj: max_new_tokens 128), so
the TTFT budget is that latency less (longest - 1) iterations (Limits.first_token_budget_s). Both
tails at once err on the long side.

The slots c: the engine is predicted with 1 slot and with all it can hold (the KV cache's bound,
at most `max_batch`). The iteration is taken as affine in c between the two (a decode step reads
the weights once, and each sequence's KV cache and activations) to find the c of most tokens/s
within the limits among GUESS_POINTS counts spaced geometrically; that c is then predicted
exactly, stepping down by a tenth while the exact prediction misses a limit. The best of the
exact predictions, and of the layouts, wins. Exponential service times (M/M/c) overstate the
spread of generation lengths a little: the wait errs on the long side. Energy per output token
is the saturated engine's at c slots.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError
from chipcal.model.estimate.parallel import Layout, LayoutError
from chipcal.model.estimate.serving import Engine, NoRoomForKvCache, Serving, best_layout
from chipcal.model.workload.llm_config import LlmConfig, LlmConfigError, StepKey
from chipcal.model.workload.types import LlmStep

PERCENTILE_TAIL = 0.01          # p99: the tail probability both limits are read at
GUESS_POINTS = 200              # slot counts tried between 1 and the KV bound, geometrically spaced


class LimitsUnmet(ChipcalError, ValueError):
    """No number of slots meets the TPOT and TTFT limits on any layout."""


@dataclass(frozen=True)
class Limits:
    """The p99 limits of a latency-bound run (module docstring): time to first token and per
    output token, and/or a whole query's latency for requests of at most `longest_tokens`
    generated tokens. None: no such limit."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    latency_s: float | None = None
    longest_tokens: int = 1

    def __post_init__(self) -> None:
        if self.ttft_s is None and self.tpot_s is None and self.latency_s is None:
            raise LimitsUnmet("a latency-bound run needs a TTFT, TPOT or query-latency limit")

    def first_token_budget_s(self, iteration_s: float) -> float:
        """What the p99 TTFT may take with an engine iteration of `iteration_s`."""
        budget = math.inf if self.ttft_s is None else self.ttft_s
        if self.latency_s is not None:
            budget = min(budget, self.latency_s - (self.longest_tokens - 1) * iteration_s)
        return budget

    def tpot_met(self, iteration_s: float) -> bool:
        return self.tpot_s is None or iteration_s <= self.tpot_s

    def __str__(self) -> str:
        parts = [f"{name} {value:g} s" for name, value in (("TPOT", self.tpot_s), ("TTFT", self.ttft_s))
                 if value is not None]
        if self.latency_s is not None:
            parts.append(f"latency {self.latency_s:g} s ({self.longest_tokens} tokens generated)")
        return " and ".join(parts)


@dataclass(frozen=True)
class ServerLoad:
    """The highest load that meets the limits (module docstring), SI units."""

    model: str
    chip: str
    precision: str
    runtime: str
    input_tokens: int
    output_tokens: int
    ttft_limit_s: float | None
    tpot_limit_s: float | None
    latency_limit_s: float | None    # a whole query's (Limits)
    tp: int
    pp: int                          # pipeline stages per replica
    ep: int                          # devices a stage's experts are spread over, whole
    dp: int
    devices: int
    slots: int                       # the engine's cap on running requests per replica
    beams: int                       # sequences per request (beam search)
    queries_per_s: float             # all replicas
    tokens_per_s: float              # output tokens, all replicas
    occupancy: float                 # mean running requests / slots
    ttft_p99_s: float
    tpot_s: float
    wait_p99_s: float                # for a free slot
    energy_per_token_j: float
    bottleneck: str

    def record(self) -> dict:
        return asdict(self)


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in an M/M/c queue of `servers` at `offered` load (a =
    lambda / mu < servers), by the Erlang B recursion B(k) = a B(k-1) / (k + a B(k-1)), then
    C = c B / (c - a (1 - B)) (stable for thousands of servers)."""
    if offered >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    return servers * b / (servers - offered * (1.0 - b))


def wait_p99_s(servers: int, service_s: float, rate: float) -> float:
    """The 99th percentile of the wait for a slot (module docstring); inf at or above capacity."""
    capacity = servers / service_s
    if rate >= capacity:
        return math.inf
    waits = erlang_c(servers, rate * service_s)
    return 0.0 if waits <= PERCENTILE_TAIL else math.log(waits / PERCENTILE_TAIL) / (capacity - rate)


def highest_rate(servers: int, service_s: float, budget_s: float, steps: int = 60) -> float:
    """The highest arrival rate whose p99 wait fits `budget_s` (0 if none), by bisection below capacity."""
    if budget_s < 0:
        return 0.0
    low, high = 0.0, servers / service_s
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if wait_p99_s(servers, service_s, mid) <= budget_s else (low, mid)
    return low


def guessed_slots(first: Serving, full: Serving, limits: Limits) -> int | None:
    """The slot count of most tokens/s within the limits, with the iteration and a group's prefill
    affine in c between the engine's predictions at 1 slot (`first`) and at its fullest (`full`);
    None where no count meets them."""
    top = full.batch

    def affine(c: int, at_one: float, at_top: float) -> float:
        return at_one if top == 1 else at_one + (at_top - at_one) * (c - 1) / (top - 1)

    best, best_rate = None, 0.0
    for c in sorted({max(1, round(top ** (i / GUESS_POINTS))) for i in range(GUESS_POINTS + 1)}):
        iteration = affine(c, first.iteration_s, full.iteration_s)
        fixed = iteration + affine(c, _group_prefill_s(first), _group_prefill_s(full))
        budget = limits.first_token_budget_s(iteration)
        if not limits.tpot_met(iteration) or fixed > budget:
            continue
        rate = highest_rate(c, first.output_tokens * iteration, budget - fixed)
        if rate > best_rate:
            best, best_rate = c, rate
    return best


def _group_prefill_s(s: Serving) -> float:
    """One prefill forward of the engine `s`: its share per iteration x iterations per forward."""
    return s.prefill_share_s * s.output_tokens * s.prefill_group / s.batch


def server(config: LlmConfig, chip: Chip, precision: str, runtime: str, input_tokens: int, output_tokens: int,
           llm_step: Callable[[StepKey], LlmStep], limits: Limits, devices: int = 1,
           layout: Layout | None = None, max_batch: int | None = None, beams: int = 1, **launch) -> ServerLoad:
    """The highest load meeting the limits (module docstring) in `layout`, or in the layout of
    most tokens/s among those a serving engine tries (serving.best_layout); LimitsUnmet where none
    meets them. `beams`: sequences per request (serving.py)."""
    def attempt(candidate: Layout) -> ServerLoad:
        engine = Engine(config, chip, precision, runtime, input_tokens, output_tokens, llm_step, candidate, launch,
                        beams)
        return _best_slots(engine, limits, max_batch)

    if layout is not None:
        return attempt(layout)
    return best_layout(config, chip, devices, attempt, (NoRoomForKvCache, LayoutError, LlmConfigError, LimitsUnmet),
                       LimitsUnmet)

def _best_slots(engine: Engine, limits: Limits, max_batch: int | None) -> ServerLoad:
    """The slot count of most tokens/s that meets the limits on `engine`'s layout (module docstring)."""
    saturated = engine.saturated
    first, full = saturated(1), saturated(max_batch)
    loads = [_load(first, limits), _load(full, limits)]
    guess = guessed_slots(first, full, limits)
    while guess is not None and guess not in (1, full.batch):
        loads.append(_load(saturated(guess), limits))
        if loads[-1] is not None:
            break
        guess = max(1, int(guess * 0.9))
    met = [s for s in loads if s is not None]
    if not met:
        raise LimitsUnmet(f"{engine.config.name} on {engine.chip.name} ({engine.layout.label}): no slot count "
                          f"meets {limits} at the 99th percentile")
    return max(met, key=lambda s: s.tokens_per_s)


def _load(s: Serving, limits: Limits) -> ServerLoad | None:
    """The highest load of one saturated engine `s` within the limits; None where TPOT, or the
    TTFT of an arrival that finds a free slot, already misses."""
    iteration = s.iteration_s
    fixed, budget = iteration + _group_prefill_s(s), limits.first_token_budget_s(iteration)
    if not limits.tpot_met(iteration) or fixed > budget:
        return None
    service = s.output_tokens * iteration
    rate = highest_rate(s.batch, service, budget - fixed)
    if rate <= 0:
        return None
    wait = wait_p99_s(s.batch, service, rate)
    return ServerLoad(
        model=s.model, chip=s.chip, precision=s.precision, runtime=s.runtime, input_tokens=s.input_tokens,
        output_tokens=s.output_tokens, ttft_limit_s=limits.ttft_s, tpot_limit_s=limits.tpot_s,
        latency_limit_s=limits.latency_s, tp=s.tp, pp=s.pp, ep=s.ep, dp=s.dp,
        devices=s.devices, slots=s.batch, beams=s.beams, queries_per_s=s.dp * rate, tokens_per_s=s.dp * rate * s.output_tokens,
        occupancy=rate * service / s.batch, ttft_p99_s=wait + fixed, tpot_s=iteration, wait_p99_s=wait,
        energy_per_token_j=s.energy_per_token_j, bottleneck=s.bottleneck)
