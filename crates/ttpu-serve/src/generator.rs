//! [`Generator`]: the step loop over one exported model, synchronous and single-threaded.
//!
//! `submit` queues a request, `step` runs one scheduling round (admits waiting requests into
//! free slots, prefills them, then runs one decode step for every running request) and returns
//! what each request produced, `cancel` frees a request's slot at once. Each round is one or a
//! few calls of the step program on the resident weights and KV cache; only token ids come back
//! from the device.
//!
//! **Invariant:** a slot belongs to at most one request, and a request's cache rows are written
//! only by its own rows (padding rows write the scratch slot), so batching never changes a
//! request's tokens.
//! **Invariant:** a token outside the vocabulary, or an output of the wrong shape, stops the
//! step with [`Error::BadOutput`]; no such token is ever streamed.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use ttpu::{DType, HostTensor, LoadedModel, Session, TensorMap};

use crate::manifest::Manifest;
use crate::sampling::{Sampling, subset};
use crate::scheduler::{self, Buckets, Slots};
use crate::text::{Detokenizer, StopText, TextCodec};
use crate::{Error, Result};

/// A request, tokenized.
#[derive(Clone, Debug)]
pub struct Request {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// The request field the prompt came from (`prompt` or `messages`), named in errors.
    pub prompt_field: &'static str,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// How tokens are picked.
    pub sampling: Sampling,
    /// Texts that end the completion (not included in it).
    pub stop: Vec<String>,
    /// Keep going past the end-of-sequence tokens.
    pub ignore_eos: bool,
}

/// A request's handle within one generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// Why a completion ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token or a stop sequence.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl FinishReason {
    /// OpenAI's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// What a request produced in one step.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    /// A token, and the text it releases (empty while held back).
    Token {
        /// The token id.
        token: u32,
        /// New text of the completion.
        text: String,
    },
    /// The completion ended; `text` is what was held back until now.
    Finished {
        /// Why.
        reason: FinishReason,
        /// Remaining text.
        text: String,
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// Tokens generated.
        completion_tokens: usize,
    },
}

/// One request's event.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The request.
    pub request: RequestId,
    /// What happened.
    pub kind: EventKind,
}

/// What a loaded model serves: its manifest and text codec. Shared with request handlers, which
/// check and tokenize requests before they reach the step loop.
pub struct ModelInfo {
    /// `serve.json`.
    pub manifest: Manifest,
    /// The tokenizer and chat template.
    pub codec: TextCodec,
    /// Requests that run at once (at most the manifest's `max_batch`).
    pub max_batch: usize,
}

impl ModelInfo {
    /// Checks a request against the model: a prompt of known tokens that leaves room for
    /// `max_tokens` in the context, and valid sampling parameters.
    pub fn check(&self, request: &Request) -> Result<()> {
        let manifest = &self.manifest;
        if request.prompt.is_empty() {
            return Err(Error::invalid(request.prompt_field, "the prompt has no tokens"));
        }
        if let Some(&token) = request.prompt.iter().find(|&&token| token as usize >= manifest.vocab_size) {
            return Err(Error::invalid(
                request.prompt_field,
                format!("token {token} is outside the vocabulary of {}", manifest.vocab_size),
            ));
        }
        if request.max_tokens == 0 {
            return Err(Error::invalid("max_tokens", "must be at least 1"));
        }
        let total = request.prompt.len().checked_add(request.max_tokens);
        if total.is_none_or(|total| total > manifest.max_seq_len) {
            let param = if request.prompt.len() >= manifest.max_seq_len { request.prompt_field } else { "max_tokens" };
            return Err(Error::ContextLength {
                param,
                max_seq_len: manifest.max_seq_len,
                prompt_tokens: request.prompt.len(),
                max_tokens: request.max_tokens,
            });
        }
        for stop in &request.stop {
            if stop.is_empty() {
                return Err(Error::invalid("stop", "stop sequences must not be empty"));
            }
        }
        request.sampling.check()
    }

    /// The room a prompt of `prompt_tokens` leaves for the completion.
    pub fn room(&self, prompt_tokens: usize) -> usize {
        self.manifest.max_seq_len.saturating_sub(prompt_tokens)
    }
}

/// How to load a model.
#[derive(Clone, Debug, Default)]
pub struct GeneratorOptions {
    /// The PJRT plugin (`None`: `$TTPU_PJRT_PLUGIN`, else the installed CPU plugin).
    pub plugin: Option<PathBuf>,
    /// Keep compiled programs on disk across processes (`$TTPU_CACHE_DIR`, as the CLI does).
    pub disk_cache: bool,
    /// Requests that run at once; `None` (or more than exported): the export's `max_batch`.
    pub max_batch: Option<usize>,
    /// Padded tokens one prefill call may hold; `None`: the context length.
    pub prefill_token_budget: Option<usize>,
}

struct Entry {
    id: RequestId,
    request: Request,
    generated: Vec<u32>,
    detokenizer: Detokenizer,
    stop: StopText,
}

/// The step loop over one exported model (see the module docs).
pub struct Generator {
    info: std::sync::Arc<ModelInfo>,
    model: LoadedModel,
    buckets: Buckets,
    token_budget: usize,
    slots: Slots,
    waiting: VecDeque<Entry>,
    /// By slot.
    running: BTreeMap<usize, Entry>,
    next_id: u64,
}

/// One row of a step call.
struct Row<'a> {
    slot: usize,
    position: usize,
    tokens: &'a [u32],
    sampling: Sampling,
    counter: usize,
}

impl Generator {
    /// Loads the model `ttpu.export_llm` wrote into `dir`: its weights go to the device and its
    /// KV cache starts as zeros there; nothing is compiled until a step needs it.
    pub fn load(dir: &Path, options: &GeneratorOptions) -> Result<Generator> {
        let manifest = Manifest::read(dir)?;
        let codec = TextCodec::read(dir)?;
        let runtime =
            ttpu::Runtime::from_plugin_or_default(options.plugin.as_deref(), &ttpu::RuntimeOptions::default())
                .map_err(ttpu::Error::from)?;
        if options.disk_cache {
            match ttpu::default_disk_cache_dir() {
                Some(cache) => runtime.set_disk_cache(&cache).map_err(ttpu::Error::from)?,
                None => {
                    tracing::warn!("no compile cache on disk: neither TTPU_CACHE_DIR, XDG_CACHE_HOME nor HOME is set")
                }
            }
        }
        let mut session = Session::with_runtime(runtime);
        // The engine pads every input to its buckets itself.
        session.set_bucketing(ttpu::Bucketing::Exact);
        let program_path = manifest.program_path(dir);
        let source = std::fs::read_to_string(&program_path)
            .map_err(|source| Error::Io { path: program_path.clone(), source })?;
        let mut weights = ttpu::read_safetensors(&manifest.weights_path(dir)).map_err(ttpu::Error::from)?;
        for (key, buffer) in &manifest.kv_cache {
            let dtype = crate::manifest::dtype(&buffer.dtype).expect("the manifest check accepted the dtype");
            let bytes =
                buffer.shape.iter().try_fold(dtype.byte_size(), |bytes, &dim| bytes.checked_mul(dim)).ok_or_else(
                    || Error::Manifest {
                        path: dir.join("serve.json"),
                        message: format!("kv_cache `{key}` is too large"),
                    },
                )?;
            let shape = buffer.shape.iter().map(|&dim| dim as i64).collect();
            weights.insert(key.clone(), HostTensor { dtype, shape, data: vec![0; bytes] });
        }
        let model = session.load(&source, &program_path.to_string_lossy(), &weights)?;
        drop(weights);
        let max_batch = options.max_batch.unwrap_or(manifest.max_batch).clamp(1, manifest.max_batch);
        let info = ModelInfo { max_batch, codec, manifest };
        Ok(Generator::with_model(info, model, options.prefill_token_budget))
    }

    fn with_model(info: ModelInfo, model: LoadedModel, budget: Option<usize>) -> Generator {
        let manifest = &info.manifest;
        let buckets = Buckets {
            batch: manifest.batch_buckets.clone(),
            prompt: manifest.prompt_buckets.clone(),
            window: manifest.window_buckets.clone(),
        };
        let token_budget = budget.unwrap_or(manifest.max_seq_len).max(1);
        Generator {
            slots: Slots::new(info.max_batch),
            info: std::sync::Arc::new(info),
            model,
            buckets,
            token_budget,
            waiting: VecDeque::new(),
            running: BTreeMap::new(),
            next_id: 0,
        }
    }

    /// The manifest and text codec, shared.
    pub fn info(&self) -> &std::sync::Arc<ModelInfo> {
        &self.info
    }

    /// The most programs greedy serving compiles at these buckets (sampling adds one per count
    /// of sampling and filtering rows met, in powers of two).
    pub fn program_count(&self) -> usize {
        scheduler::program_count(&self.buckets, self.token_budget, self.info.max_batch)
    }

    /// How many sizes of the step program have been compiled so far.
    pub fn compiled(&self) -> usize {
        self.model.model().compile_count()
    }

    /// Requests holding a slot.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether a step would do anything.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Queues a request after checking it ([`ModelInfo::check`]).
    pub fn submit(&mut self, request: Request) -> Result<RequestId> {
        self.info.check(&request)?;
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let stop = StopText::new(request.stop.clone());
        self.waiting.push_back(Entry { id, request, generated: Vec::new(), detokenizer: Detokenizer::default(), stop });
        Ok(id)
    }

    /// Drops a request, waiting or running; its slot is free for the next step. Returns whether
    /// it was there.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        if let Some(index) = self.waiting.iter().position(|entry| entry.id == id) {
            self.waiting.remove(index);
            return true;
        }
        let slot = self.running.iter().find(|(_, entry)| entry.id == id).map(|(&slot, _)| slot);
        match slot {
            Some(slot) => {
                self.running.remove(&slot);
                self.slots.give(slot);
                true
            }
            None => false,
        }
    }

    /// Compiles every greedy program the buckets allow (each call writes only the scratch
    /// slot), so no request waits for a compile. Returns how many calls ran.
    pub fn warm_up(&mut self) -> Result<usize> {
        let scratch = self.info.manifest.scratch_slot;
        let mut calls = 0;
        let max_rows = self.info.max_batch;
        let batch: Vec<usize> = self.buckets.batch.iter().copied().filter(|&rows| rows <= max_rows).collect();
        let mut shapes: Vec<(usize, usize, usize)> = Vec::new();
        for &steps in &self.buckets.prompt {
            let window = scheduler::bucket(&self.buckets.window, steps).unwrap_or(steps);
            for (index, &rows) in self.buckets.batch.iter().enumerate() {
                if index == 0 || (rows <= max_rows && rows.checked_mul(steps).is_some_and(|t| t <= self.token_budget)) {
                    shapes.push((rows, steps, window));
                }
            }
        }
        for &rows in &batch {
            for &window in &self.buckets.window {
                shapes.push((rows, 1, window));
            }
        }
        let tokens = vec![0u32; self.info.manifest.max_seq_len];
        for (rows, steps, window) in shapes {
            let row =
                Row { slot: scratch, position: 0, tokens: &tokens[..steps], sampling: Sampling::GREEDY, counter: 0 };
            self.call(&[row], rows, steps, window)?;
            calls += 1;
        }
        Ok(calls)
    }

    /// One scheduling round: admit, prefill, decode (see the module docs).
    pub fn step(&mut self) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        let mut admitted = Vec::new();
        while self.slots.free() > 0 {
            let Some(entry) = self.waiting.pop_front() else { break };
            let slot = self.slots.take().expect("a slot is free");
            admitted.push((slot, entry));
        }
        if !admitted.is_empty() {
            let lengths: Vec<usize> = admitted.iter().map(|(_, entry)| entry.request.prompt.len()).collect();
            let groups = scheduler::prefill_groups(&lengths, &self.buckets, self.token_budget, self.info.max_batch);
            let mut admitted = admitted.into_iter();
            for group in groups {
                let members: Vec<(usize, Entry)> = admitted.by_ref().take(group.end - group.start).collect();
                let rows: Vec<Row> = members
                    .iter()
                    .map(|(slot, entry)| Row {
                        slot: *slot,
                        position: 0,
                        tokens: &entry.request.prompt,
                        sampling: entry.request.sampling,
                        counter: 0,
                    })
                    .collect();
                let tokens = self.call(&rows, group.rows, group.steps, group.window)?;
                drop(rows);
                for ((slot, entry), token) in members.into_iter().zip(tokens) {
                    self.accept(slot, entry, token, &mut events)?;
                }
            }
        }
        if !self.running.is_empty() {
            let rows: Vec<Row> = self
                .running
                .iter()
                .map(|(&slot, entry)| Row {
                    slot,
                    // The last token goes in at its own position: after the prompt and the
                    // tokens before it.
                    position: entry.request.prompt.len() + entry.generated.len() - 1,
                    tokens: std::slice::from_ref(entry.generated.last().expect("a running request has a token")),
                    sampling: entry.request.sampling,
                    counter: entry.generated.len(),
                })
                .collect();
            let positions: Vec<usize> = rows.iter().map(|row| row.position).collect();
            let (batch, window) = scheduler::decode_shape(&positions, &self.buckets).ok_or_else(|| {
                Error::BadOutput { message: format!("no bucket for a decode step at positions {positions:?}") }
            })?;
            let tokens = self.call(&rows, batch, 1, window)?;
            let slots: Vec<usize> = rows.iter().map(|row| row.slot).collect();
            drop(rows);
            for (slot, token) in slots.into_iter().zip(tokens) {
                let entry = self.running.remove(&slot).expect("the row's request is running");
                self.accept(slot, entry, token, &mut events)?;
            }
        }
        Ok(events)
    }

    /// Records `token` for the request in `slot`: its text, and whether it ends the completion
    /// (which frees the slot).
    fn accept(&mut self, slot: usize, mut entry: Entry, token: u32, events: &mut Vec<Event>) -> Result<()> {
        entry.generated.push(token);
        let id = entry.id;
        let is_eos = !entry.request.ignore_eos && self.info.manifest.eos_token_ids.contains(&token);
        let (text, stopped) = if is_eos {
            (String::new(), false)
        } else {
            let piece = entry.detokenizer.push(&self.info.codec, token)?;
            entry.stop.push(&piece)
        };
        events.push(Event { request: id, kind: EventKind::Token { token, text } });
        let reason = if is_eos || stopped {
            Some(FinishReason::Stop)
        } else if entry.generated.len() >= entry.request.max_tokens {
            Some(FinishReason::Length)
        } else {
            None
        };
        match reason {
            Some(reason) => {
                // Text held back for an incomplete character is released now; it may still
                // hold a stop sequence.
                let (text, reason) = if stopped {
                    (String::new(), reason)
                } else {
                    let rest = entry.detokenizer.finish(&self.info.codec)?;
                    match entry.stop.push(&rest) {
                        (text, true) => (text, FinishReason::Stop),
                        (text, false) => (text + &entry.stop.finish(), reason),
                    }
                };
                events.push(Event {
                    request: id,
                    kind: EventKind::Finished {
                        reason,
                        text,
                        prompt_tokens: entry.request.prompt.len(),
                        completion_tokens: entry.generated.len(),
                    },
                });
                self.slots.give(slot);
            }
            None => {
                self.running.insert(slot, entry);
            }
        }
        Ok(())
    }

    /// Runs the step program on `rows`, padded to `batch` rows of `steps` tokens (padding rows
    /// write the scratch slot), attending `window` positions; returns one token per row.
    fn call(&self, rows: &[Row], batch: usize, steps: usize, window: usize) -> Result<Vec<u32>> {
        let scratch = self.info.manifest.scratch_slot;
        let padded = |index: usize| rows.get(index);
        let column =
            |value: &dyn Fn(Option<&Row>) -> i64| (0..batch).map(|index| value(padded(index))).collect::<Vec<i64>>();
        let mut tokens = Vec::with_capacity(batch * steps);
        for index in 0..batch {
            let row_tokens = padded(index).map_or(&[][..], |row| row.tokens);
            tokens.extend((0..steps).map(|at| row_tokens.get(at).map_or(0, |&token| i64::from(token))));
        }
        let (b, t, w) = (batch as i64, steps as i64, window as i64);
        let mut inputs = TensorMap::new();
        inputs.insert("tokens".into(), ints(tokens, vec![b, t]));
        inputs.insert("slots".into(), ints(column(&|row| row.map_or(scratch, |row| row.slot) as i64), vec![b]));
        inputs.insert("positions".into(), ints(column(&|row| row.map_or(0, |row| row.position) as i64), vec![b]));
        inputs.insert(
            "last".into(),
            ints(column(&|row| row.map_or(0, |row| row.tokens.len().saturating_sub(1)) as i64), vec![b, 1]),
        );
        inputs.insert("kv_positions".into(), ints((0..w).collect(), vec![w]));
        let sampling = |row: Option<&Row>| row.map_or(Sampling::GREEDY, |row| row.sampling);
        inputs.insert(
            "temperature".into(),
            floats((0..batch).map(|index| sampling(padded(index)).temperature).collect(), vec![b]),
        );
        inputs.insert("top_k".into(), ints(column(&|row| i64::from(sampling(row).top_k)), vec![b]));
        inputs.insert("top_p".into(), floats((0..batch).map(|index| sampling(padded(index)).top_p).collect(), vec![b]));
        inputs.insert("seed".into(), ints(column(&|row| sampling(row).seed32()), vec![b]));
        inputs.insert("counter".into(), ints(column(&|row| row.map_or(0, |row| row.counter) as i64), vec![b]));
        let sample_rows = subset(rows.iter().map(|row| row.sampling.temperature > 0.0), batch);
        let filter_rows = subset(rows.iter().map(|row| row.sampling.filters()), batch);
        let (sampled, filtered) = (sample_rows.len(), filter_rows.len());
        inputs.insert("sample_rows".into(), ints(sample_rows, vec![sampled as i64]));
        inputs.insert("filter_rows".into(), ints(filter_rows, vec![filtered as i64]));
        let _span = tracing::debug_span!("step", rows = rows.len(), batch, steps, window, sampled, filtered).entered();
        let prepared = self.model.prepare(&[&inputs])?;
        let outputs = self.model.execute(prepared)?;
        let ids = outputs.get("output_0", 0)?;
        if ids.dtype != DType::I64 || ids.shape != [b] {
            return Err(Error::BadOutput { message: format!("{} where i64[{batch}] was expected", ids.describe()) });
        }
        let vocab = self.info.manifest.vocab_size;
        rows.iter()
            .enumerate()
            .map(|(index, _)| {
                let bytes: [u8; 8] = ids.data[index * 8..index * 8 + 8].try_into().expect("8 bytes per i64");
                let id = i64::from_le_bytes(bytes);
                u32::try_from(id).ok().filter(|&id| (id as usize) < vocab).ok_or_else(|| Error::BadOutput {
                    message: format!("token {id}, outside the vocabulary of {vocab}"),
                })
            })
            .collect()
    }
}

fn ints(values: Vec<i64>, shape: Vec<i64>) -> HostTensor {
    HostTensor { dtype: DType::I64, shape, data: values.iter().flat_map(|value| value.to_le_bytes()).collect() }
}

fn floats(values: Vec<f32>, shape: Vec<i64>) -> HostTensor {
    HostTensor { dtype: DType::F32, shape, data: values.iter().flat_map(|value| value.to_le_bytes()).collect() }
}
