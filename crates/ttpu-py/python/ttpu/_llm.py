"""`ttpu.export_llm`: a Hugging Face decoder-only language model as the one program `ttpu serve`
and `ttpu generate` run.

One step program serves both prefill and decode. It takes `b` rows of `T` tokens, writes their
keys and values into the KV cache at each row's slot and positions, attends over the first `W`
positions of each row's slot, and samples one next token per row on the device, so only token
ids cross to the host. `b`, `T`, `W`, `S` and `F` (the rows that sample, and those that filter)
are symbolic dims of the one exported program: the server compiles it once per size it uses
(buckets in `serve.json`), and every size shares one set of resident weights and one KV cache.

The KV cache is real state: two buffers per attention layer (`kv_cache.k<i>`, `kv_cache.v<i>`) of
shape `[slots + 1, max_seq_len, kv_heads, head_dim]`, updated with `index_put_`, so the exported
program carries them as mutated buffers that ttpu keeps resident and donates on every step. Slot
`s` holds the keys and values of request `s` at its token positions; the last slot is a scratch
slot that the rows padding a batch to its bucket write into, so padding never touches a request's
cache. Stale entries beyond a request's length are never read: the attention mask admits key
position `j` for query position `q` only when `j <= q` (and `q - j < window` for sliding-window
layers).

The model is driven through the cache interface every decoder family of transformers shares
(`cache.update(keys, values, layer_idx)` after the positional encoding, a prepared 4-D additive
mask, or one per layer type, `position_ids` and `logits_to_keep`), so no code is written per
family; a model whose layers need something else (linear attention, chunked attention) is refused
with the reason.

Sampling is counter-based: the uniform numbers behind the Gumbel-max draw are a hash of the
request's seed, its token counter and the vocabulary index, so a seeded request gives the same
tokens whatever else shares its batch. Top-k and top-p thresholds are found by bisection over
each row's logits (no sort, which would cost a full sort of the vocabulary per row and step), and
the draws and filters run only on the rows that need them (`sample_rows`, `filter_rows`).
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

FORMAT = "ttpu-llm"
FORMAT_VERSION = 1

# The input placeholders of the step program, in order (the Rust engine keys its inputs by these).
STEP_INPUTS = (
    "tokens",  # i64[b, T]: the rows' tokens
    "slots",  # i64[b]: each row's cache slot
    "positions",  # i64[b]: the position of each row's first token
    "last",  # i64[b, 1]: the index within T of the token each row samples after
    "kv_positions",  # i64[W]: 0..W, the key positions attended
    "temperature",  # f32[b]: 0 is greedy
    "top_k",  # i64[b]: 0 keeps every token
    "top_p",  # f32[b]: 1 keeps every token
    "seed",  # i64[b]: 0..2^32
    "counter",  # i64[b]: the index of the token being sampled in its request
    "sample_rows",  # i64[S]: the rows that sample (temperature > 0), padded
    "filter_rows",  # i64[F]: the rows that sample with top-k or top-p, padded
)

_MASK32 = 0xFFFFFFFF


def _hash32(x):
    """A 32-bit integer hash (two multiply-xorshift rounds) of int64 tensors holding values below
    2^32; every product stays below 2^59, so int64 arithmetic is exact on every backend."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    return (x >> 16) ^ x


def _uniform(seed, counter, vocab: int):
    """`[b, vocab]` uniform floats in (0, 1), a function of (seed, counter, vocabulary index) only."""
    import torch

    row = _hash32((seed + counter * 0x9E3779B9) & _MASK32)
    index = torch.arange(vocab, dtype=torch.int64, device=seed.device)
    bits = _hash32((row[:, None] ^ _hash32(index)[None, :]) & _MASK32)
    # 24 bits with a half offset: exactly representable in f32, never 0 or 1.
    return ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def _keep_top_k_top_p(scaled, top_k, top_p, iterations: int = 40):
    """Which tokens of each row (`[F, V]` temperature-scaled logits) survive top-k and then top-p
    (renormalised after top-k, as Hugging Face's warpers): every token at least as likely as the
    k-th, then every remaining token at least as likely as the one where the mass reaches top-p.
    Each threshold is found by bisection over the row's values and snapped to a value of the
    row, so ties at the threshold are kept (as Hugging Face keeps them) and no sort is needed."""
    import torch

    vocab = scaled.shape[-1]
    inf = torch.full_like(scaled, float("inf"))

    def snap(low):
        # The smallest value at or above `low`: a value of the row, so the comparison is exact.
        return torch.where(scaled >= low[:, None], scaled, inf).amin(dim=-1)

    k = torch.where((top_k <= 0) | (top_k > vocab), vocab, top_k).to(scaled.dtype)
    low, high = scaled.amin(dim=-1), scaled.amax(dim=-1) + 1.0
    for _ in range(iterations):
        middle = (low + high) * 0.5
        enough = (scaled >= middle[:, None]).to(scaled.dtype).sum(dim=-1) >= k
        low, high = torch.where(enough, middle, low), torch.where(enough, high, middle)
    keep = scaled >= snap(low)[:, None]
    probs = torch.softmax(torch.where(keep, scaled, -inf), dim=-1)
    low = torch.where(keep, scaled, inf).amin(dim=-1)
    high = scaled.amax(dim=-1) + 1.0
    for _ in range(iterations):
        middle = (low + high) * 0.5
        enough = (probs * (scaled >= middle[:, None]).to(probs.dtype)).sum(dim=-1) >= top_p
        low, high = torch.where(enough, middle, low), torch.where(enough, high, middle)
    return keep & (scaled >= snap(low)[:, None])


def sample(logits, temperature, top_k, top_p, seed, counter, sample_rows, filter_rows):
    """One token per row of `logits` (`[b, V]`): greedy where the temperature is 0, else a
    Gumbel-max draw from the temperature-scaled distribution, restricted to top-k and top-p
    where a row asks for either. The draws run only on the rows `sample_rows` lists, the filters
    only on those `filter_rows` lists (each padded with repeats of a row, or any row when none
    samples: a row left out keeps its greedy token), so a greedy batch pays one row of each."""
    import torch

    logits = logits.float()
    vocab = logits.shape[-1]
    out = torch.argmax(logits, dim=-1)

    def draw(rows):
        temp = temperature[rows]
        scaled = logits[rows] / torch.where(temp > 0, temp, torch.ones_like(temp))[:, None]
        gumbel = -torch.log(-torch.log(_uniform(seed[rows], counter[rows], vocab)))
        return temp, scaled, gumbel

    temp, scaled, gumbel = draw(sample_rows)
    drawn = torch.argmax(scaled + gumbel, dim=-1)
    out = out.index_put((sample_rows,), torch.where(temp > 0, drawn, out[sample_rows]))
    temp, scaled, gumbel = draw(filter_rows)
    keep = _keep_top_k_top_p(scaled, top_k[filter_rows], top_p[filter_rows])
    drawn = torch.argmax(torch.where(keep, scaled + gumbel, torch.full_like(scaled, float("-inf"))), dim=-1)
    filters = (temp > 0) & ((top_k[filter_rows] > 0) | (top_p[filter_rows] < 1.0))
    return out.index_put((filter_rows,), torch.where(filters, drawn, out[filter_rows]))


class _Probe:
    """Records what each attention layer hands the cache (heads, head dim, dtype), on one eager call."""

    def __init__(self):
        self.layers: dict[int, tuple] = {}

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.layers[layer_idx] = (tuple(key_states.shape), tuple(value_states.shape), key_states.dtype)
        return key_states, value_states


def _cache_argument(model) -> str:
    """The name the model's forward takes its cache under (`cache` in transformers 5.x, with
    `past_key_values` as the older name)."""
    parameters = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in parameters:
            return name
    raise NotImplementedError(f"{type(model).__name__}.forward takes no cache argument, so it cannot be served")


def _attention_kinds(config) -> tuple[list[str] | None, int | None]:
    """`(layer types, sliding window)`: the mask each layer needs. Layer types are refused unless
    every one is full or sliding-window attention."""
    layer_types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    if layer_types is not None:
        unknown = sorted(set(layer_types) - {"full_attention", "sliding_attention"})
        if unknown:
            raise NotImplementedError(
                f"layers of type {', '.join(unknown)} keep state other than keys and values; "
                "only full and sliding-window attention can be served"
            )
        if "sliding_attention" in layer_types and not window:
            raise NotImplementedError("the config has sliding-attention layers but no sliding_window")
        return list(layer_types), window
    if window and getattr(config, "use_sliding_window", True):
        return None, window
    return None, None


def _attention_mask(model, query_positions, kv_positions, layer_types, window):
    """The additive 4-D mask (`[b, 1, T, W]`, 0 where attended, the dtype's lowest elsewhere), or
    one per layer type: key position `j` is attended from query position `q` when `j <= q`, and
    for sliding-window layers also `q - j < window` (Hugging Face's rule)."""
    import torch

    dtype = next(iter(model.parameters())).dtype
    causal = kv_positions[None, None, :] <= query_positions[:, :, None]
    masks = {"full_attention": causal}
    if window:
        masks["sliding_attention"] = causal & (query_positions[:, :, None] - kv_positions[None, None, :] < window)
    lowest = torch.finfo(dtype).min
    additive = {kind: torch.where(mask, 0.0, lowest).to(dtype)[:, None, :, :] for kind, mask in masks.items()}
    if layer_types is not None:
        return {kind: additive[kind] for kind in set(layer_types)}
    return additive["sliding_attention" if window else "full_attention"]


def _probe(model, cache_arg: str, layer_types, window) -> dict[int, tuple]:
    import torch

    probe = _Probe()
    tokens = torch.zeros((1, 2), dtype=torch.int64)
    positions = torch.arange(2)[None, :]
    mask = _attention_mask(model, positions, torch.arange(2), layer_types, window)
    with torch.no_grad():
        model(
            input_ids=tokens,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{cache_arg: _as_cache(probe)},
        )
    if not probe.layers:
        raise NotImplementedError(f"{type(model).__name__} never called the cache: it cannot be served")
    return probe.layers


def _as_cache(owner):
    """A `transformers.Cache` whose `update` is `owner.update` (the models check the type)."""
    from transformers.cache_utils import Cache

    class _ServeCache(Cache):
        def __init__(self):
            super().__init__(layers=[])

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return owner.update(key_states, value_states, layer_idx)

        def get_seq_length(self, layer_idx: int = 0):
            raise NotImplementedError("the served model must be given position_ids")

    return _ServeCache()


def _step_module(model, max_batch: int, max_seq_len: int):
    import torch

    cache_arg = _cache_argument(model)
    layer_types, window = _attention_kinds(model.config)
    shapes = _probe(model, cache_arg, layer_types, window)

    class ServeStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.layers = sorted(shapes)
            self.kv_cache = torch.nn.Module()
            for layer in self.layers:
                (_, k_heads, _, k_dim), (_, v_heads, _, v_dim), dtype = shapes[layer]
                # One scratch slot after the requests' slots takes the writes of padding rows.
                k = torch.zeros((max_batch + 1, max_seq_len, k_heads, k_dim), dtype=dtype)
                v = torch.zeros((max_batch + 1, max_seq_len, v_heads, v_dim), dtype=dtype)
                self.kv_cache.register_buffer(f"k{layer}", k)
                self.kv_cache.register_buffer(f"v{layer}", v)
            self._rows = None

        def update(self, key_states, value_states, layer_idx):
            slots, write_positions, kv_positions = self._rows
            k_cache = getattr(self.kv_cache, f"k{layer_idx}")
            v_cache = getattr(self.kv_cache, f"v{layer_idx}")
            # [b, heads, T, dim] -> [b, T, heads, dim], written at (slot, position) per token.
            rows = slots[:, None].expand(write_positions.shape)
            k_cache.index_put_((rows, write_positions), key_states.transpose(1, 2).to(k_cache.dtype))
            v_cache.index_put_((rows, write_positions), value_states.transpose(1, 2).to(v_cache.dtype))
            # One gather of the attended positions of each row's slot: [b, W, heads, dim].
            window_index = (slots[:, None], kv_positions[None, :])
            keys = k_cache[window_index].transpose(1, 2)
            values = v_cache[window_index].transpose(1, 2)
            return keys, values

        def forward(
            self, tokens, slots, positions, last, kv_positions, temperature, top_k, top_p, seed, counter, sample_rows,
            filter_rows,
        ):
            # Every per-row input has the tokens' rows. Adding a zero of the tokens' rows to each
            # makes the export equate the batch dims here (a broadcast guard), where otherwise a
            # family whose broadcasting would allow one row (rotary tables against the heads)
            # leaves several batch symbols behind. XLA folds the additions away.
            zero = torch.zeros_like(tokens[:, 0])
            slots, positions, top_k, seed, counter = (value + zero for value in (slots, positions, top_k, seed, counter))
            temperature, top_p = (value + zero.to(value.dtype) for value in (temperature, top_p))
            last = last + zero[:, None]
            steps = tokens.shape[1]
            query_positions = positions[:, None] + torch.arange(steps, dtype=torch.int64, device=tokens.device)
            self._rows = (slots, query_positions, kv_positions)
            attention_mask = _attention_mask(model, query_positions, kv_positions, layer_types, window)
            # Only the sampled position of each row goes through the output projection: a
            # hook on it gathers those hidden states (every family's head is its output
            # embedding; what follows it, such as soft-capping, still applies).
            def keep_last(_module, args):
                hidden = args[0]
                index = last[:, :, None].expand(hidden.shape[0], 1, hidden.shape[2])
                return (torch.gather(hidden, 1, index),) + tuple(args[1:])

            hook = model.get_output_embeddings().register_forward_pre_hook(keep_last)
            try:
                out = model(
                    input_ids=tokens,
                    attention_mask=attention_mask,
                    position_ids=query_positions,
                    use_cache=True,
                    **{cache_arg: _as_cache(self)},
                )
            finally:
                hook.remove()
                self._rows = None
            logits = out.logits[:, -1, :]
            return sample(logits, temperature, top_k, top_p, seed, counter, sample_rows, filter_rows)

    return ServeStep()


def _example_inputs(vocab: int, max_batch: int, max_seq_len: int):
    """Inputs at sizes the export traces with; every dim the program treats as symbolic is at
    least 2 there (torch.export specialises dims of size 0 and 1)."""
    import torch

    b, steps, window, sampled, filtered = 2, 3, 4, 2, 2
    return (
        torch.zeros((b, steps), dtype=torch.int64),
        torch.tensor([0, max_batch], dtype=torch.int64),
        torch.zeros((b,), dtype=torch.int64),
        torch.full((b, 1), steps - 1, dtype=torch.int64),
        torch.arange(window, dtype=torch.int64),
        torch.ones((b,), dtype=torch.float32),
        torch.zeros((b,), dtype=torch.int64),
        torch.ones((b,), dtype=torch.float32),
        torch.zeros((b,), dtype=torch.int64),
        torch.zeros((b,), dtype=torch.int64),
        torch.zeros((sampled,), dtype=torch.int64),
        torch.zeros((filtered,), dtype=torch.int64),
    )


def _powers_of_two(low: int, high: int) -> list[int]:
    sizes, size = [], low
    while size < high:
        sizes.append(size)
        size *= 2
    sizes.append(high)
    return sizes


def _check_buckets(name: str, buckets, high: int) -> list[int]:
    buckets = sorted({int(size) for size in buckets})
    if not buckets or buckets[0] < 1 or buckets[-1] != high:
        raise ValueError(f"{name} must be sizes from 1 up to and including {high}, got {buckets}")
    return buckets


def _token_ids(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def export_llm(
    model,
    path,
    *,
    max_batch: int,
    max_seq_len: int,
    tokenizer=None,
    batch_buckets=None,
    prompt_buckets=None,
    window_buckets=None,
):
    """Exports a Hugging Face causal language model for `ttpu serve` and `ttpu generate`.

    Writes into the folder `path`: `model.fx` (the step program, symbolic in the batch, the tokens
    per row, the attention window and the rows that sample or filter), `weights.safetensors` (the
    parameters; the KV cache starts as zeros on the device), `serve.json` (the cache layout, the
    buckets the server compiles, the end-of-sequence tokens and the sampling defaults),
    `generation_config.json`, `config.json`, and with `tokenizer` its `tokenizer.json` and
    `tokenizer_config.json` (the chat template). `max_batch` requests run at once, each holding at
    most `max_seq_len` tokens (prompt and completion). Returns the exported program."""
    import torch

    from ._export import weights_of, write_exported, ExportedTensors

    if not isinstance(max_batch, int) or not 1 <= max_batch <= 4096:
        raise ValueError(f"max_batch must be an int in [1, 4096], got {max_batch!r}")
    if not isinstance(max_seq_len, int) or not 8 <= max_seq_len <= 1 << 20:
        raise ValueError(f"max_seq_len must be an int in [8, 1048576], got {max_seq_len!r}")
    config = model.config
    vocab = model.get_output_embeddings().weight.shape[0]
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if limit is not None and max_seq_len > limit:
        raise ValueError(f"max_seq_len {max_seq_len} exceeds the model's {limit} positions")
    batch_buckets = _check_buckets("batch_buckets", batch_buckets or _powers_of_two(1, max_batch), max_batch)
    prompt_buckets = _check_buckets(
        "prompt_buckets", prompt_buckets or _powers_of_two(min(16, max_seq_len), max_seq_len), max_seq_len
    )
    window_buckets = _check_buckets(
        "window_buckets", window_buckets or _powers_of_two(min(64, max_seq_len), max_seq_len), max_seq_len
    )

    model = model.eval()
    step = _step_module(model, max_batch, max_seq_len).eval()
    Dim = torch.export.Dim
    # The example rows (2) stay below the range's top: at the top, torch.export keeps the rows of
    # each input apart instead of equating them. Rows beyond max_batch are never run.
    batch = Dim("batch", min=1, max=max(max_batch, 3))
    steps = Dim("steps", min=1, max=max_seq_len)
    window = Dim("window", min=1, max=max_seq_len)
    sampled = Dim("sampled", min=1, max=max(max_batch, 3))
    filtered = Dim("filtered", min=1, max=max(max_batch, 3))
    dynamic = (
        {0: batch, 1: steps},
        {0: batch},
        {0: batch},
        {0: batch},
        {0: window},
        {0: batch},
        {0: batch},
        {0: batch},
        {0: batch},
        {0: batch},
        {0: sampled},
        {0: filtered},
    )
    example = _example_inputs(vocab, max_batch, max_seq_len)
    try:
        with torch.no_grad():
            ep = torch.export.export(step, example, dynamic_shapes=dynamic, strict=False).run_decompositions()
    except Exception as error:
        # Some families' SDPA paths keep a layout whose contiguity torch.export cannot decide at
        # symbolic sizes (GPT-2's attention output); eager attention computes the same and traces.
        if getattr(config, "_attn_implementation", "eager") == "eager":
            raise
        previous = config._attn_implementation
        config._attn_implementation = "eager"
        try:
            with torch.no_grad():
                ep = torch.export.export(step, example, dynamic_shapes=dynamic, strict=False).run_decompositions()
        except Exception:
            raise error from None
        finally:
            config._attn_implementation = previous
    names = [spec.arg.name for spec in ep.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
    if tuple(names) != STEP_INPUTS:
        raise RuntimeError(f"the step program's inputs are {names}, expected {list(STEP_INPUTS)}")

    weights = weights_of(ep)
    cache_keys = [key for key in weights if key.startswith("kv_cache.")]
    cache = {key: {"dtype": str(weights[key].dtype).removeprefix("torch."), "shape": list(weights[key].shape)}
             for key in cache_keys}
    for key in cache_keys:
        del weights[key]  # zeros: the server makes them on the device
    os.makedirs(path, exist_ok=True)
    write_exported(ep, ExportedTensors(weights=weights, inputs={}), path)
    os.remove(os.path.join(path, "inputs.safetensors"))

    generation = getattr(model, "generation_config", None)
    eos = _token_ids(getattr(generation, "eos_token_id", None)) or _token_ids(getattr(config, "eos_token_id", None))
    defaults = {}
    if generation is not None:
        if not getattr(generation, "do_sample", False):
            defaults["temperature"] = 0.0
        else:
            for name in ("temperature", "top_k", "top_p"):
                value = getattr(generation, name, None)
                if value is not None:
                    defaults[name] = value
        generation.save_pretrained(path)
    config.save_pretrained(path)
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "model": os.path.basename(os.path.normpath(os.fspath(path))),
        "architecture": type(model).__name__,
        "program": "model.fx",
        "weights": "weights.safetensors",
        "inputs": list(STEP_INPUTS),
        "max_batch": max_batch,
        "max_seq_len": max_seq_len,
        "scratch_slot": max_batch,
        "vocab_size": vocab,
        "kv_cache": cache,
        "batch_buckets": batch_buckets,
        "prompt_buckets": prompt_buckets,
        "window_buckets": window_buckets,
        "eos_token_ids": eos,
        "sampling_defaults": defaults,
    }
    with open(os.path.join(path, "serve.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return ep
