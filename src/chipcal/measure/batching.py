"""Continuous batching measured on the local device: a serving loop over a decoder LLM built from
its config with random weights (measure.llm's model, eager), timed as MLPerf's Offline scenario
counts it, output tokens per second at saturation.

The engine is the padded one Hugging Face's text-generation-inference server began with (its
`CausalLMBatch.concatenate` and `.filter`, server/text_generation_server/models/causal_lm.py):

    queue      requests of their own prompt and output lengths wait; at most `slots` run
    admit      each iteration, the waiting requests that fit the free slots are prefilled together
               (one forward over their prompts, left-padded to the longest, an attention mask over
               the padding); their first tokens come from it, and their KV cache joins the running
               batch's, both left-padded to a common length
    decode     one forward of one token for every running sequence, its own positions, a mask over
               its padding; greedy argmax
    retire     a sequence that has its output leaves (its row dropped); columns that are padding in
               every remaining row are trimmed

So the batch grows as requests are admitted and shrinks as they finish, and prefill and decode
alternate. One sample = one run of the whole queue; what is timed is its saturated window, from
the first iteration at which every slot runs to the one that admits the last request: the ramp-up
and the drain are edges that MLPerf's 24,576 samples make negligible and a short CPU run would
not. Samples are seconds per output token in that window, a distribution (measure.timing), bounded
by `max_time_s`.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from chipcal.measure.device import CPU, Device
from chipcal.measure.models import MODEL_FP32_MODE, first_call_failure, numerics
from chipcal.measure.system import OtherLoad
from chipcal.measure.timing import Measurement, fixed_threads
from chipcal.model.errors import ChipcalError, UnsupportedPrecision
from chipcal.model.workload.llm import build_llm, cache_argument, transformers_module
from chipcal.model.workload.llm_config import LlmConfig, trace_dtype

BATCHING_PRECISIONS = ("fp32", "bf16", "fp16")
LENGTH_SPREAD = 0.5          # prompt and output lengths are uniform in mean x [1 - spread, 1 + spread]


class NoSaturatedWindow(ChipcalError, ValueError):
    """Too few requests for the slots: the queue empties before every slot runs."""


@dataclass(frozen=True)
class Request:
    """One request: its prompt and the tokens it generates (no EOS: exactly that many)."""

    prompt_tokens: int
    output_tokens: int


def requests(count: int, prompt_tokens: int, output_tokens: int, seed: int = 0) -> tuple[Request, ...]:
    """`count` requests of lengths uniform in mean × [1 − LENGTH_SPREAD, 1 + LENGTH_SPREAD], seeded:
    unequal lengths make sequences finish at different iterations, so slots free one at a time."""
    rng = random.Random(seed)

    def spread(mean: int) -> int:
        return max(1, round(rng.uniform(mean * (1 - LENGTH_SPREAD), mean * (1 + LENGTH_SPREAD))))
    return tuple(Request(spread(prompt_tokens), max(2, spread(output_tokens))) for _ in range(count))


@dataclass(frozen=True)
class Run:
    """One run of the queue: its saturated window (module docstring) and the whole of it."""

    window_s: float
    window_tokens: int          # output tokens produced in the window
    window_mean_batch: float    # running sequences per decode iteration in the window
    total_s: float
    total_tokens: int
    iterations: int
    prefill_groups: tuple[int, ...]   # requests admitted by each prefill forward
    outputs: tuple[tuple[int, ...], ...]   # each request's generated token ids, in queue order


class _Batch:
    """The running sequences: their KV cache (left-padded), attention mask, last tokens, positions
    and the tokens each still owes."""

    def __init__(self, tf, model):
        self.tf, self.model, self.arg = tf, model, cache_argument(model)
        self.cache = None
        self.mask = self.last = self.positions = None
        self.owed: list[int] = []
        self.rows: list[int] = []                      # the request each row serves
        self.outputs: dict[int, list[int]] = {}        # generated token ids, by request

    def __len__(self) -> int:
        return len(self.owed)

    def _forward(self, ids, mask, positions, cache):
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self.arg: cache})
        return out.logits[:, -1].argmax(-1, keepdim=True)

    def admit(self, group: list[Request], first_index: int, ids_for) -> None:
        """Prefill `group` (requests first_index, first_index + 1, ...) in one forward, left-padded,
        and join it to the running batch."""
        width = max(r.prompt_tokens for r in group)
        ids = torch.stack([F.pad(ids_for(r.prompt_tokens), (width - r.prompt_tokens, 0)) for r in group])
        mask = torch.stack([F.pad(torch.ones(r.prompt_tokens, dtype=torch.long), (width - r.prompt_tokens, 0))
                            for r in group]).to(ids.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self.tf.DynamicCache(config=self.model.config)
        first = self._forward(ids, mask, positions, cache)
        owed = [r.output_tokens - 1 for r in group]
        rows = list(range(first_index, first_index + len(group)))
        self._record(rows, first)
        if self.cache is None:
            self.cache, self.mask, self.last, self.positions = cache, mask, first, positions[:, -1:]
            self.owed, self.rows = owed, rows
            return
        self.cache = self._join(self.cache, cache)
        self.mask = _join_rows(self.mask, mask)
        self.last = torch.cat([self.last, first])
        self.positions = torch.cat([self.positions, positions[:, -1:]])
        self.owed += owed
        self.rows += rows

    def _record(self, rows: list[int], tokens: torch.Tensor) -> None:
        for row, token in zip(rows, tokens.flatten().tolist(), strict=True):
            self.outputs.setdefault(row, []).append(token)

    def _join(self, old, new):
        """One cache of both batches' rows, each left-padded to the longer (TGI's concatenate)."""
        layers = []
        for a, b in zip(old.layers, new.layers, strict=True):
            layers.append(tuple(_join_rows(x, y, dim=2) for x, y in ((a.keys, b.keys), (a.values, b.values))))
        return self.tf.DynamicCache(layers, config=self.model.config)

    def decode(self) -> int:
        """One token for every running sequence; returns how many finished and left."""
        self.mask = F.pad(self.mask, (0, 1), value=1)
        self.positions = self.positions + 1
        self.last = self._forward(self.last, self.mask, self.positions, self.cache)
        self._record(self.rows, self.last)
        self.owed = [n - 1 for n in self.owed]
        keep = [i for i, n in enumerate(self.owed) if n > 0]
        done = len(self.owed) - len(keep)
        if done:
            self._retire(keep)
        return done

    def _retire(self, keep: list[int]) -> None:
        """Drop finished rows, then the columns every remaining row has as padding (TGI's filter)."""
        self.owed, self.rows = [self.owed[i] for i in keep], [self.rows[i] for i in keep]
        if not keep:
            self.cache = self.mask = self.last = self.positions = None
            return
        self.cache.batch_select_indices(torch.tensor(keep, device=self.mask.device))
        self.mask, self.last, self.positions = self.mask[keep], self.last[keep], self.positions[keep]
        start = int((self.mask.cumsum(-1) == 0).sum(-1).min())
        if start:
            self.mask = self.mask[:, start:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, start:], layer.values[:, :, start:]


def _join_rows(a: torch.Tensor, b: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Rows of `a` then `b`, the shorter left-padded with zeros along `dim` (a mask's padding is 0;
    a cache's padding is masked out)."""
    width = max(a.shape[dim], b.shape[dim])

    def pad(x):
        extra = width - x.shape[dim]
        return F.pad(x, (0, 0) * (x.dim() - 1 - dim) + (extra, 0)) if extra else x
    return torch.cat([pad(a), pad(b)])


class _Window:
    """The saturated window (module docstring): it opens when every slot runs while requests wait,
    and closes at the admission that empties the queue."""

    def __init__(self, device: Device):
        self.device, self.start, self.tokens_at_start = device, None, 0
        self.closed: tuple[float, int] | None = None    # (seconds, output tokens)
        self.batches: list[int] = []                    # running sequences of each decode inside it

    @property
    def open(self) -> bool:
        return self.start is not None and self.closed is None

    def begin(self, tokens: int) -> None:
        _sync(self.device)
        self.start, self.tokens_at_start = time.perf_counter(), tokens

    def end(self, tokens: int) -> None:
        _sync(self.device)
        self.closed = (time.perf_counter() - self.start, tokens - self.tokens_at_start)


def serve(model, tf, queue: tuple[Request, ...], slots: int, vocab: int, device: Device, seed: int = 0) -> Run:
    """Run every request of `queue` through the loop (module docstring) with at most `slots` running."""
    gen = torch.Generator().manual_seed(seed)

    def ids_for(tokens: int) -> torch.Tensor:
        return torch.randint(vocab, (tokens,), generator=gen).to(str(device))

    batch, waiting, window = _Batch(tf, model), list(queue), _Window(device)
    groups, tokens, iterations = [], 0, 0
    start = time.perf_counter()
    with torch.inference_mode():
        while waiting or len(batch):
            free = slots - len(batch)
            if free and waiting:
                group, waiting = waiting[:free], waiting[free:]
                batch.admit(group, len(queue) - len(waiting) - len(group), ids_for)
                groups.append(len(group))
                tokens += len(group)                    # each prompt's forward gives its first token
                if window.open and not waiting:
                    window.end(tokens)
            if window.start is None and len(batch) == slots and waiting:
                window.begin(tokens)
            if window.open:
                window.batches.append(len(batch))
            tokens += len(batch)
            batch.decode()
            iterations += 1
        _sync(device)
    total = time.perf_counter() - start
    if window.closed is None or not window.batches:
        raise NoSaturatedWindow(f"{len(queue)} requests never keep {slots} slots busy while more wait: "
                                f"give more requests (at least 3 x the slots)")
    return Run(window_s=window.closed[0], window_tokens=window.closed[1],
               window_mean_batch=statistics.fmean(window.batches), total_s=total, total_tokens=tokens,
               iterations=iterations, prefill_groups=tuple(groups),
               outputs=tuple(tuple(batch.outputs[i]) for i in range(len(queue))))


def _sync(device: Device) -> None:
    if device.is_cuda:
        torch.cuda.synchronize()


@dataclass(frozen=True)
class BatchingMeasurement:
    """Continuous batching measured (module docstring): seconds per output token in the saturated
    window, per run, and what the runs were."""

    model: str
    device: str
    precision: str
    slots: int
    requests: int
    prompt_tokens_mean: float
    output_tokens_mean: float
    per_token: Measurement              # seconds per output token in the window
    mean_batch: float                   # running sequences per decode iteration in the window
    mean_prefill_group: float           # requests per prefill forward over the whole run
    numerics: dict

    @property
    def tokens_per_s(self) -> float:
        return 1 / self.per_token.median_s


def measure_batching(config: LlmConfig, slots: int, queue: tuple[Request, ...], precision: str = "fp32",
                     device: Device = CPU, *, max_time_s: float = 10.0, min_samples: int = 3,
                     threads: int | None = None, seed: int = 0,
                     fp32_mode: str = MODEL_FP32_MODE) -> BatchingMeasurement:
    """Serve `queue` with `slots` running (module docstring) until `min_samples` runs are in and
    `max_time_s` has passed, or 4 × `max_time_s` has (a bounded measurement); one warm-up run first."""
    if precision not in BATCHING_PRECISIONS:
        raise UnsupportedPrecision(f"continuous batching runs {', '.join(BATCHING_PRECISIONS)}, not {precision}")
    config.check_positions(max(r.prompt_tokens + r.output_tokens for r in queue))
    tf = transformers_module(config.name)
    threads = threads or torch.get_num_threads()
    with numerics(precision, device, fp32_mode) as switches, fixed_threads(threads):
        try:
            model = build_llm(config, trace_dtype(precision), str(device), seed=seed)
            serve(model, tf, queue, slots, config.vocab, device, seed)
        except (RuntimeError, NotImplementedError) as exc:
            raise first_call_failure(exc, f"{config.name} continuous batching", slots, precision, device) from None
        runs, began = [], time.perf_counter()
        with OtherLoad() as other:
            while (len(runs) < min_samples or time.perf_counter() - began < max_time_s) \
                    and time.perf_counter() - began < 4 * max_time_s:
                runs.append(serve(model, tf, queue, slots, config.vocab, device, seed))
    samples = [r.window_s / r.window_tokens for r in runs]
    short = [f"time limit {4 * max_time_s:.3g} s reached with {len(runs)} < {min_samples} runs"] \
        if len(runs) < min_samples else []
    per_token = Measurement.from_samples(samples, method=f"continuous batching, {slots} slots, {len(queue)} requests: "
                                         "saturated window / its output tokens, one run a sample",
                                         warnings=short, threads=threads, other_cpus=other.cpus)
    groups = [g for r in runs for g in r.prefill_groups]
    return BatchingMeasurement(
        model=config.name, device=str(device), precision=precision, slots=slots, requests=len(queue),
        prompt_tokens_mean=statistics.fmean(r.prompt_tokens for r in queue),
        output_tokens_mean=statistics.fmean(r.output_tokens for r in queue), per_token=per_token,
        mean_batch=statistics.fmean(r.window_mean_batch for r in runs), mean_prefill_group=statistics.fmean(groups),
        numerics=switches)
