"""`ttpu.export_llm` with `ttpu serve` and `ttpu generate`: tiny random Llama and Qwen3 models with
a tokenizer trained here, served over HTTP and compared token for token with Hugging Face's
`generate()`."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import threading
import time

import pytest
import torch
from conftest import REPO_ROOT

import ttpu

MAX_BATCH = 8
MAX_SEQ_LEN = 96

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time there was a little robot who loved to read books about the sea.",
    "Hello world! How are you today? I am fine, thank you, and you?",
    "def add(a, b):\n    return a + b\n",
    "Serving language models needs a cache of keys and values for every token.",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ bos_token }}<|{{ message['role'] }}|>{{ message['content'] | trim }}"
    "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _tokenizer():
    """A byte-level BPE trained on a few sentences, with BOS added and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 10, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    hf.chat_template = CHAT_TEMPLATE
    return hf


def _llama(vocab: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    )
    return LlamaForCausalLM(config).eval()


def _qwen3(vocab: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    config = Qwen3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, bos_token_id=0, eos_token_id=1,
        pad_token_id=2, tie_word_embeddings=False,
    )
    return Qwen3ForCausalLM(config).eval()


def _ttpu_binary() -> str:
    return os.environ.get("TTPU_BIN") or os.path.join(REPO_ROOT, "target", "debug", "ttpu")


class Server:
    """`ttpu serve` on a free port; stopped (and its output checked for panics) at the end."""

    def __init__(self, folder, *args, cache_dir):
        env = dict(os.environ, TTPU_CACHE_DIR=str(cache_dir))
        self.process = subprocess.Popen(
            [_ttpu_binary(), "serve", str(folder), "--port", "0", *args],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
        )
        self.log = []
        for line in self.process.stderr:
            self.log.append(line)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                break
        else:
            raise RuntimeError("the server did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.process.stderr), daemon=True).start()

    def request(self, method, path, body=None, raw: bytes | None = None):
        """`(status, parsed JSON body or text)`."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        try:
            return response.status, json.loads(text)
        except json.JSONDecodeError:
            return response.status, text

    def post(self, path, body):
        return self.request("POST", path, body)

    def stream(self, path, body):
        """The `data:` payloads of a server-sent event stream, `[DONE]` included."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200, response.read()
        assert response.getheader("Content-Type") == "text/event-stream"
        events = [line[len("data: "):] for line in response.read().decode().split("\n") if line.startswith("data: ")]
        connection.close()
        return events

    def metric(self, name: str) -> float:
        status, text = self.request("GET", "/metrics")
        assert status == 200
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        raise KeyError(name)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)
        log = "".join(self.log)
        assert "panicked" not in log, log


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """`{name: (folder, model)}` for the tiny Llama and Qwen3, and the tokenizer."""
    tokenizer = _tokenizer()
    models = {}
    for name, make in (("llama", _llama), ("qwen3", _qwen3)):
        model = make(len(tokenizer))
        folder = tmp_path_factory.mktemp(name)
        ttpu.export_llm(model, folder, max_batch=MAX_BATCH, max_seq_len=MAX_SEQ_LEN, tokenizer=tokenizer)
        models[name] = (folder, model)
    return models, tokenizer


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("compiled")


@pytest.fixture(scope="module")
def llama_server(exported, cache_dir):
    models, _ = exported
    server = Server(models["llama"][0], "--max-queue", "256", cache_dir=cache_dir)
    yield server
    server.stop()


def hf_greedy(model, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """Hugging Face's greedy tokens after `prompt_ids`, up to and with the EOS token."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]), max_new_tokens=max_tokens, do_sample=False, eos_token_id=1, pad_token_id=2
        )
    return out[0, len(prompt_ids):].tolist()


PROMPTS = [
    "Hello",
    "The quick brown fox",
    "Once upon a time there was",
    "def add(a, b):",
    "Serving language models needs a cache of keys and values",
    "How are you today? I am fine",
    "a",
    "The lazy dog jumps over the quick brown fox, and the robot reads books about the sea all day long",
]


def complete(server, prompt, **fields):
    body = {"model": server_model(server), "prompt": prompt, "return_token_ids": True, **fields}
    status, response = server.post("/v1/completions", body)
    assert status == 200, response
    return response


def server_model(server) -> str:
    return server.request("GET", "/v1/models")[1]["data"][0]["id"]


def test_the_export_holds_the_cache_as_state(exported):
    models, _ = exported
    folder, model = models["llama"]
    manifest = json.loads((folder / "serve.json").read_text())
    assert manifest["max_batch"] == MAX_BATCH and manifest["max_seq_len"] == MAX_SEQ_LEN
    assert manifest["batch_buckets"] == [1, 2, 4, 8]
    assert list(manifest["kv_cache"]) == ["kv_cache.k0", "kv_cache.v0", "kv_cache.k1", "kv_cache.v1"]
    assert manifest["kv_cache"]["kv_cache.k0"]["shape"] == [MAX_BATCH + 1, MAX_SEQ_LEN, 2, 16]
    assert manifest["eos_token_ids"] == [1]
    program = (folder / "model.fx").read_text()
    # The cache is a buffer the program mutates, not an output it returns.
    assert program.count("BUFFER_MUTATION") == 4, program[-2000:]
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "weights.safetensors"):
        assert (folder / name).exists(), name


def test_greedy_tokens_match_hugging_face(exported, llama_server):
    models, tokenizer = exported
    model = models["llama"][1]
    for prompt in PROMPTS[:3]:
        ids = tokenizer(prompt).input_ids
        response = complete(llama_server, prompt, max_tokens=24, temperature=0)
        want = hf_greedy(model, ids, 24)
        choice = response["choices"][0]
        assert response["prompt_token_ids"] == ids
        assert choice["token_ids"] == want, prompt
        assert choice["text"] == tokenizer.decode(want, skip_special_tokens=True)
        assert choice["finish_reason"] == ("stop" if want[-1] == 1 else "length")
        assert response["usage"] == {"prompt_tokens": len(ids), "completion_tokens": len(want),
                                     "total_tokens": len(ids) + len(want)}


def test_the_checker_rejects_a_wrong_token(exported, llama_server):
    # The comparison above would see a token that differs: another model's tokens do.
    models, tokenizer = exported
    ids = tokenizer(PROMPTS[1]).input_ids
    ours = complete(llama_server, PROMPTS[1], max_tokens=16, temperature=0)["choices"][0]["token_ids"]
    assert ours != hf_greedy(models["qwen3"][1], ids, 16)


def _concurrently(function, items, workers):
    results, errors = [None] * len(items), []

    def work(indices):
        for index in indices:
            try:
                results[index] = function(items[index])
            except Exception as error:  # reported below with the item
                errors.append((items[index], error))

    threads = [threading.Thread(target=work, args=(range(k, len(items), workers),)) for k in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


def test_eight_concurrent_requests_match_hugging_face(exported, llama_server):
    models, tokenizer = exported
    model = models["llama"][1]
    lengths = [20, 8, 31, 12, 25, 5, 17, 28]
    jobs = list(zip(PROMPTS, lengths))
    responses = _concurrently(lambda job: complete(llama_server, job[0], max_tokens=job[1], temperature=0), jobs, 8)
    for (prompt, length), response in zip(jobs, responses):
        assert response["choices"][0]["token_ids"] == hf_greedy(model, tokenizer(prompt).input_ids, length), prompt


def test_qwen3_single_and_concurrent_requests_match_hugging_face(exported, cache_dir):
    models, tokenizer = exported
    folder, model = models["qwen3"]
    server = Server(folder, cache_dir=cache_dir)
    try:
        jobs = list(zip(PROMPTS, [16, 9, 23, 4, 30, 12, 20, 7]))
        single = complete(server, jobs[0][0], max_tokens=jobs[0][1], temperature=0)
        assert single["choices"][0]["token_ids"] == hf_greedy(model, tokenizer(jobs[0][0]).input_ids, jobs[0][1])
        responses = _concurrently(lambda job: complete(server, job[0], max_tokens=job[1], temperature=0), jobs, 8)
        for (prompt, length), response in zip(jobs, responses):
            assert response["choices"][0]["token_ids"] == hf_greedy(model, tokenizer(prompt).input_ids, length), prompt
    finally:
        server.stop()


def test_seeded_sampling_is_reproducible_in_any_batch(llama_server):
    def sample(seed, **fields):
        fields = {"temperature": 1.0, "max_tokens": 24, "seed": seed, "ignore_eos": True, **fields}
        return complete(llama_server, "Once upon a time", **fields)["choices"][0]["token_ids"]

    alone = sample(7)
    assert sample(7) == alone
    assert sample(8) != alone
    # The same seed in a busy batch draws the same tokens.
    busy = _concurrently(lambda seed: sample(seed), [7, 1, 2, 3, 7, 4, 5, 6], 8)
    assert busy[0] == alone and busy[4] == alone
    filtered = sample(11, top_k=5, top_p=0.9)
    assert sample(11, top_k=5, top_p=0.9) == filtered
    # Sampling from the single most likely token is greedy decoding, whatever the seed.
    greedy = complete(llama_server, "Once upon a time", max_tokens=24, temperature=0, ignore_eos=True)
    assert sample(3, top_k=1) == greedy["choices"][0]["token_ids"]
    assert sample(4, top_p=1e-6) == greedy["choices"][0]["token_ids"]


def test_sampling_follows_the_distribution(exported, llama_server):
    # The first token drawn over many seeds follows the model's softmax at the temperature: its
    # distance from it is within what PyTorch's own sampler shows for as many draws, and beyond
    # it from the softmax at another temperature (so the check can fail).
    models, tokenizer = exported
    ids = tokenizer("Hello").input_ids
    with torch.no_grad():
        logits = models["llama"][1](torch.tensor([ids])).logits[0, -1]
    temperature, draws = 0.1, 400
    probs = torch.softmax(logits / temperature, dim=-1)

    def distance(tokens, reference):
        counts = torch.bincount(torch.tensor(tokens), minlength=reference.numel()).float()
        return 0.5 * (counts / len(tokens) - reference).abs().sum().item()

    generator = torch.Generator().manual_seed(0)
    simulated = [distance(torch.multinomial(probs, draws, replacement=True, generator=generator).tolist(), probs)
                 for _ in range(200)]
    threshold = 1.25 * max(simulated)
    firsts = _concurrently(
        lambda seed: complete(llama_server, "Hello", max_tokens=1, temperature=temperature, seed=seed)["choices"][0]["token_ids"][0],
        list(range(draws)), 16,
    )
    assert distance(firsts, probs) < threshold, (distance(firsts, probs), threshold)
    assert distance(firsts, torch.softmax(logits / 0.3, dim=-1)) > threshold
    top3 = set(torch.topk(probs, 3).indices.tolist())
    restricted = _concurrently(
        lambda seed: complete(llama_server, "Hello", max_tokens=1, temperature=1.0, top_k=3, seed=seed)["choices"][0]["token_ids"][0],
        list(range(60)), 16,
    )
    assert set(restricted) == top3, (set(restricted), top3)
    # Top-p keeps the smallest set of most likely tokens whose mass reaches p.
    ordered = torch.sort(probs, descending=True)
    nucleus = set(ordered.indices[: int((torch.cumsum(ordered.values, 0) < 0.5).sum()) + 1].tolist())
    assert len(nucleus) > 1
    restricted = _concurrently(
        lambda seed: complete(llama_server, "Hello", max_tokens=1, temperature=temperature, top_p=0.5, seed=seed)["choices"][0]["token_ids"][0],
        list(range(80)), 16,
    )
    # Without the filter about half the draws would fall outside it.
    assert set(restricted) <= nucleus and len(set(restricted)) > 1, (set(restricted), nucleus)


def test_streaming_gives_the_same_text(llama_server):
    model = server_model(llama_server)
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}
    whole = llama_server.post("/v1/completions", body)[1]
    events = llama_server.stream("/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["id"] == chunks[0]["id"] and chunk["object"] == "text_completion" for chunk in chunks)
    text = "".join(chunk["choices"][0]["text"] for chunk in chunks if chunk["choices"])
    assert text == whole["choices"][0]["text"]
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert chunks[-1]["usage"] == whole["usage"] and chunks[-1]["choices"] == []


def test_chat_completions_use_the_chat_template(exported, llama_server):
    models, tokenizer = exported
    messages = [{"role": "system", "content": "You read books."}, {"role": "user", "content": "Hello world!"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    want = hf_greedy(models["llama"][1], list(ids), 16)
    body = {"model": server_model(llama_server), "messages": messages, "max_tokens": 16, "temperature": 0,
            "return_token_ids": True}
    status, response = llama_server.post("/v1/chat/completions", body)
    assert status == 200, response
    assert response["object"] == "chat.completion"
    assert response["prompt_token_ids"] == list(ids)
    choice = response["choices"][0]
    assert choice["token_ids"] == want
    assert choice["message"] == {"role": "assistant", "content": tokenizer.decode(want, skip_special_tokens=True)}
    events = llama_server.stream("/v1/chat/completions", {**body, "stream": True})
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == choice["message"]["content"]


def test_stop_sequences_end_the_text(exported, llama_server):
    models, tokenizer = exported
    whole = complete(llama_server, "Once upon a time", max_tokens=30, temperature=0, ignore_eos=True)["choices"][0]
    text = whole["text"]
    stop = text[5:8]
    assert len(stop) == 3 and stop not in text[:7], text
    stopped = complete(llama_server, "Once upon a time", max_tokens=30, temperature=0, ignore_eos=True, stop=[stop])
    choice = stopped["choices"][0]
    assert choice["text"] == text[: text.index(stop)]
    assert choice["finish_reason"] == "stop"
    events = llama_server.stream("/v1/completions", {"model": server_model(llama_server), "prompt": "Once upon a time",
                                                    "max_tokens": 30, "temperature": 0, "ignore_eos": True,
                                                    "stop": stop, "stream": True})
    streamed = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    assert streamed == choice["text"]


ERRORS = [
    # (body or raw bytes, endpoint, param, message)
    (b"{not json", "/v1/completions", None, "the body is not valid JSON: key must be a string at line 1 column 2"),
    ({"model": "nope", "prompt": "hi"}, "/v1/completions", "model",
     "the model `nope` does not exist; this server serves `{model}`"),
    ({"prompt": "hi"}, "/v1/completions", "model", "you must provide a model"),
    ({"model": "{model}", "prompt": "hi " * 200}, "/v1/completions", "prompt",
     "this model's maximum context length is 96 tokens, but {long} prompt tokens and 1 completion tokens were requested"),
    ({"model": "{model}", "prompt": "hi", "max_tokens": 200}, "/v1/completions", "max_tokens",
     "this model's maximum context length is 96 tokens, but {short} prompt tokens and 200 completion tokens were requested"),
    ({"model": "{model}", "prompt": "hi", "temperature": 3}, "/v1/completions", "temperature",
     "`temperature`: must be a number in [0, 2], got 3"),
    ({"model": "{model}", "prompt": "hi", "top_p": 0}, "/v1/completions", "top_p",
     "`top_p`: must be a number in (0, 1], got 0"),
    ({"model": "{model}", "prompt": "hi", "max_tokens": 0}, "/v1/completions", "max_tokens",
     "must be an integer in [1, 4294967295], got 0"),
    ({"model": "{model}", "prompt": "hi", "n": 3}, "/v1/completions", "n", "only 1 is supported, got 3"),
    ({"model": "{model}", "prompt": [5, 100000]}, "/v1/completions", "prompt",
     "`prompt`: token 100000 is outside the vocabulary of {vocab}"),
    ({"model": "{model}", "messages": "hi"}, "/v1/chat/completions", "messages",
     "you must provide messages: a non-empty array"),
    ({"model": "{model}", "messages": [{"role": "user", "content": 5}]}, "/v1/chat/completions", "messages",
     "message 0: `content` must be a string or an array of text parts"),
]


def test_bad_requests_are_400s_naming_the_field(exported, llama_server):
    model = server_model(llama_server)
    vocab = json.loads((exported[0]["llama"][0] / "serve.json").read_text())["vocab_size"]
    tokenizer = exported[1]
    counts = {"{long}": len(tokenizer("hi " * 200).input_ids), "{short}": len(tokenizer("hi").input_ids),
              "{model}": model, "{vocab}": str(vocab)}
    for body, path, param, message in ERRORS:
        if isinstance(body, bytes):
            status, response = llama_server.request("POST", path, raw=body)
        else:
            body = json.loads(json.dumps(body).replace("{model}", model))
            status, response = llama_server.post(path, body)
        assert status == 400, (body, response)
        expected = message
        for name, value in counts.items():
            expected = expected.replace(name, str(value))
        assert response == {"error": {"message": expected, "type": "invalid_request_error", "param": param,
                                      "code": None}}, body
    # The server is still serving.
    assert llama_server.request("GET", "/health") == (200, {"status": "ok"})
    assert complete(llama_server, "Hello", max_tokens=3, temperature=0)["usage"]["completion_tokens"] == 3
    status, response = llama_server.request("GET", "/v1/nothing")
    assert status == 404 and response["error"]["code"] == "not_found"


def test_a_cancelled_request_frees_its_slot_and_overflow_is_429(exported, cache_dir):
    models, _ = exported
    server = Server(models["llama"][0], "--max-batch", "1", "--max-queue", "0", cache_dir=cache_dir)
    try:
        model = server_model(server)
        long = {"model": model, "prompt": "Hello", "max_tokens": 90, "temperature": 0, "ignore_eos": True,
                "stream": True}
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        connection.request("POST", "/v1/completions", body=json.dumps(long))
        response = connection.getresponse()
        assert response.status == 200
        assert response.readline().startswith(b"data: ")  # running: it holds the only slot
        status, refused = server.post("/v1/completions", {"model": model, "prompt": "Hi", "max_tokens": 2})
        assert status == 429, refused
        assert refused["error"]["type"] == "rate_limit_exceeded"
        assert refused["error"]["message"] == (
            "the server is at capacity: 1 requests running and 0 queued (the limit); retry later"
        )
        connection.close()  # the client goes away mid-stream
        deadline = time.monotonic() + 30
        while server.metric('ttpu_requests_total{outcome="cancelled"}') < 1:
            assert time.monotonic() < deadline, "the cancelled request was never freed"
            time.sleep(0.05)
        # The slot is free at once: the next request runs although max-queue is 0, and the long
        # one never finished.
        assert complete(server, "Hi", max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2
        assert server.metric('ttpu_requests_total{outcome="finished"}') == 1
        assert server.metric('ttpu_requests_total{outcome="rejected"}') == 1
    finally:
        server.stop()


def test_load_200_requests_at_concurrency_32(exported, llama_server):
    models, tokenizer = exported
    model = models["llama"][1]
    words = " ".join(CORPUS).split()
    prompts = [" ".join(words[i % 40: i % 40 + 1 + i % 7]) + f" {i}" for i in range(200)]
    lengths = [4 + i % 9 for i in range(200)]
    jobs = list(zip(prompts, lengths))
    before = llama_server.metric('ttpu_requests_total{outcome="finished"}')
    responses = _concurrently(lambda job: complete(llama_server, job[0], max_tokens=job[1], temperature=0), jobs, 32)
    for (prompt, length), response in zip(jobs, responses):
        choice = response["choices"][0]
        want = hf_greedy(model, tokenizer(prompt).input_ids, length)
        assert choice["token_ids"] == want, prompt
        assert response["usage"]["completion_tokens"] == len(want)
        assert response["prompt_token_ids"] == tokenizer(prompt).input_ids
    assert llama_server.metric('ttpu_requests_total{outcome="finished"}') == before + 200
    assert llama_server.metric("ttpu_running_requests") == 0


def test_ttpu_generate_streams_the_completion(exported, cache_dir):
    models, tokenizer = exported
    folder, model = models["llama"]
    env = dict(os.environ, TTPU_CACHE_DIR=str(cache_dir))
    out = subprocess.run(
        [_ttpu_binary(), "generate", str(folder), "--prompt", "Hello world", "--max-tokens", "12", "--temperature", "0"],
        capture_output=True, env=env, check=True,
    )
    want = hf_greedy(model, tokenizer("Hello world").input_ids, 12)
    assert out.stdout.decode() == tokenizer.decode(want, skip_special_tokens=True) + "\n"
    bad = subprocess.run(
        [_ttpu_binary(), "generate", str(folder), "--prompt", "Hello", "--top-p", "2"], capture_output=True, env=env,
    )
    assert bad.returncode == 1
    assert bad.stderr.decode().strip().endswith("error: --top-p: must be a number in (0, 1], got 2"), bad.stderr
