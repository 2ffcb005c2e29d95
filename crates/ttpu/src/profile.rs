//! Seeing where time goes: ttpu's `tracing` spans recorded as a Chrome trace, and the work of a
//! compiled program.
//!
//! Every stage opens a span: `parse`, `import`, `pass`/`fuse`, `lower`, `compile` (or
//! `cache_hit`), `weights_in`, `prepare` with its `transfer_in`s, `execute`, `to_host` with its
//! `transfer_out`s, and `train_step` per training step. A [`TraceRecorder`] is a
//! `tracing-subscriber` layer that keeps each closed span of a `ttpu*` target as a complete
//! event (`"ph": "X"`) of the Trace Event Format, with the span's fields as its `args`, so
//! Perfetto and `chrome://tracing` show a timeline per thread. The CLI installs one for
//! `--trace FILE`; an embedder adds [`TraceRecorder::layer`] to its own subscriber, and opens its
//! own spans (`tracing::info_span!("request", id)`) around work it wants to see grouped.
//!
//! Device events per HLO op come from a plugin's PJRT profiler extension, which the CPU plugin
//! (0.115) does not export; [`TraceRecorder::write`] notes which plugins had none.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde_json::{Map, Value, json};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use ttpu_ir::{Dim, Graph, Op, TensorType};

/// Records ttpu's spans for a Chrome trace. Cheap to clone: clones share one recording.
#[derive(Clone)]
pub struct TraceRecorder {
    inner: Arc<Mutex<Recording>>,
    start: Instant,
}

struct Recording {
    events: Vec<Value>,
    /// Small thread numbers, in order of first appearance.
    threads: HashMap<std::thread::ThreadId, u64>,
    metadata: Map<String, Value>,
}

/// A span's fields, kept until it closes.
struct Fields(Map<String, Value>);

/// When the span was entered, per open entry (a span can be entered again before it exits).
struct Entered(Vec<Instant>);

impl Default for TraceRecorder {
    fn default() -> TraceRecorder {
        TraceRecorder::new()
    }
}

impl TraceRecorder {
    /// An empty recording; times count from now.
    pub fn new() -> TraceRecorder {
        TraceRecorder {
            inner: Arc::new(Mutex::new(Recording {
                events: Vec::new(),
                threads: HashMap::new(),
                metadata: Map::new(),
            })),
            start: Instant::now(),
        }
    }

    /// The layer that records into this recording: spans of `ttpu*` targets at `DEBUG` and
    /// above, whatever the other layers of the subscriber print.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        use tracing_subscriber::layer::Layer as _;
        let filter = tracing_subscriber::filter::filter_fn(|metadata: &Metadata<'_>| {
            metadata.target().starts_with("ttpu") && *metadata.level() <= tracing::Level::DEBUG
        });
        self.clone().with_filter(filter)
    }

    /// Adds `key: value` to the trace's metadata (the plugin, the model, ...).
    pub fn set_metadata(&self, key: &str, value: Value) {
        self.lock().metadata.insert(key.to_owned(), value);
    }

    /// How many span events were recorded so far.
    pub fn event_count(&self) -> usize {
        self.lock().events.len()
    }

    /// The names of the recorded spans, in the order they closed.
    pub fn span_names(&self) -> Vec<String> {
        self.lock().events.iter().filter_map(|event| event["name"].as_str().map(str::to_owned)).collect()
    }

    /// The trace as Trace Event Format JSON: `{"traceEvents": [...], "displayTimeUnit": "ms",
    /// "metadata": {...}}`, events sorted by start time.
    pub fn to_json(&self) -> Value {
        let recording = self.lock();
        let mut events = recording.events.clone();
        events.sort_by(|a, b| a["ts"].as_f64().unwrap_or(0.0).total_cmp(&b["ts"].as_f64().unwrap_or(0.0)));
        let pid = std::process::id();
        let mut threads: Vec<(&std::thread::ThreadId, &u64)> = recording.threads.iter().collect();
        threads.sort_by_key(|(_, number)| **number);
        for (_, number) in threads {
            events.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": number,
                "args": {"name": if *number == 0 { "main".to_owned() } else { format!("thread {number}") }}}));
        }
        json!({"traceEvents": events, "displayTimeUnit": "ms", "metadata": Value::Object(recording.metadata.clone())})
    }

    /// Writes [`TraceRecorder::to_json`] to `path` (through a temporary file, renamed).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = self.to_json().to_string();
        let temporary = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, path)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The recording `start_global` began, if one is on.
static GLOBAL: Mutex<Option<TraceRecorder>> = Mutex::new(None);

/// Forwards every callback to the global recording while one is on.
struct Forward;

impl<S> Layer<S> for Forward
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        if let Some(recorder) = active() {
            recorder.on_new_span(attributes, id, context);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        if let Some(recorder) = active() {
            recorder.on_record(id, values, context);
        }
    }
    fn on_enter(&self, id: &Id, context: Context<'_, S>) {
        if let Some(recorder) = active() {
            recorder.on_enter(id, context);
        }
    }
    fn on_exit(&self, id: &Id, context: Context<'_, S>) {
        if let Some(recorder) = active() {
            recorder.on_exit(id, context);
        }
    }
}

fn active() -> Option<TraceRecorder> {
    GLOBAL.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Starts recording ttpu's spans process-wide (for bindings, which own no subscriber): the first
/// call installs a global subscriber that forwards to the current recording. Fails when another
/// global subscriber is installed already (add [`TraceRecorder::layer`] to that one instead), or
/// when a recording is on.
pub fn start_global() -> Result<TraceRecorder, String> {
    static INSTALLED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            use tracing_subscriber::layer::SubscriberExt;
            let filter = tracing_subscriber::filter::filter_fn(|metadata: &Metadata<'_>| {
                metadata.target().starts_with("ttpu") && *metadata.level() <= tracing::Level::DEBUG
            });
            let subscriber = tracing_subscriber::registry().with(Layer::with_filter(Forward, filter));
            tracing::subscriber::set_global_default(subscriber).map_err(|_| {
                "another tracing subscriber is installed: add ttpu's TraceRecorder::layer() to it".to_owned()
            })
        })
        .clone()?;
    let mut global = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
    if global.is_some() {
        return Err("a ttpu profile is already recording".into());
    }
    let recorder = TraceRecorder::new();
    *global = Some(recorder.clone());
    Ok(recorder)
}

/// Ends the recording [`start_global`] began, returning it (`None` when none was on).
pub fn stop_global() -> Option<TraceRecorder> {
    GLOBAL.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// Collects a span's fields as JSON values.
struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl Visit for JsonVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), json!(value));
    }
}

impl<S> Layer<S> for TraceRecorder
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let Some(span) = context.span(id) else { return };
        let mut fields = Map::new();
        attributes.record(&mut JsonVisitor(&mut fields));
        let mut extensions = span.extensions_mut();
        extensions.insert(Fields(fields));
        extensions.insert(Entered(Vec::new()));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        let Some(span) = context.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(Fields(fields)) = extensions.get_mut::<Fields>() {
            values.record(&mut JsonVisitor(fields));
        }
    }

    fn on_enter(&self, id: &Id, context: Context<'_, S>) {
        let Some(span) = context.span(id) else { return };
        if let Some(Entered(times)) = span.extensions_mut().get_mut::<Entered>() {
            times.push(Instant::now());
        }
    }

    fn on_exit(&self, id: &Id, context: Context<'_, S>) {
        let Some(span) = context.span(id) else { return };
        let now = Instant::now();
        let mut extensions = span.extensions_mut();
        let Some(entered) = extensions.get_mut::<Entered>().and_then(|Entered(times)| times.pop()) else { return };
        let args = extensions.get_mut::<Fields>().map(|Fields(fields)| fields.clone()).unwrap_or_default();
        drop(extensions);
        let micros = |instant: Instant| instant.saturating_duration_since(self.start).as_secs_f64() * 1e6;
        let mut recording = self.lock();
        let next = recording.threads.len() as u64;
        let tid = *recording.threads.entry(std::thread::current().id()).or_insert(next);
        recording.events.push(json!({
            "name": span.name(),
            "cat": span.metadata().target(),
            "ph": "X",
            "ts": micros(entered),
            "dur": micros(now) - micros(entered),
            "pid": std::process::id(),
            "tid": tid,
            "args": Value::Object(args),
        }));
    }
}

/// What a program computes, estimated from its IR: floating-point operations (a multiply-add
/// counts two) and bytes read and written by each op on its own (an upper bound: XLA's fusion
/// keeps many intermediates in registers). What `ttpu bench --json` reports as `"cost"` when
/// the plugin has no cost analysis of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Work {
    /// Arithmetic operations.
    pub flops: u64,
    /// Bytes the ops read and write.
    pub bytes_accessed: u64,
}

/// The [`Work`] of `graph` (loops counted once: their trip counts are data).
pub fn estimate_work(graph: &Graph) -> Work {
    let elements = |ty: &TensorType| -> u64 {
        ty.shape.dims().iter().fold(1u64, |acc, dim| match dim {
            Dim::Static(size) => acc.saturating_mul(u64::try_from(*size).unwrap_or(0)),
            _ => acc,
        })
    };
    let bytes = |ty: &TensorType| elements(ty).saturating_mul(ty.dtype.byte_size() as u64);
    let mut work = Work::default();
    for (_, node) in graph.nodes() {
        let operands: Vec<&TensorType> = node.operands.iter().map(|&value| graph.ty(value)).collect();
        let results: Vec<&TensorType> = node.results.iter().map(|&value| graph.ty(value)).collect();
        let Some(&result) = results.first() else { continue };
        let flops = match &node.op {
            Op::DotGeneral(dims) => {
                let contracted = dims.lhs_contracting.iter().fold(1u64, |acc, &dim| {
                    let size = operands[0].shape.dims().get(dim as usize).and_then(Dim::as_static).unwrap_or(1);
                    acc.saturating_mul(u64::try_from(size).unwrap_or(0))
                });
                elements(result).saturating_mul(contracted).saturating_mul(2)
            }
            Op::Convolution(dims) => {
                // Each output element sums kernel elements over one group's input features.
                let kernel = elements(operands[1]);
                let outputs_per_kernel = result
                    .shape
                    .dims()
                    .get(dims.output_feature as usize)
                    .and_then(Dim::as_static)
                    .and_then(|size| u64::try_from(size).ok())
                    .filter(|&size| size > 0)
                    .unwrap_or(1);
                elements(result).saturating_mul(kernel / outputs_per_kernel).saturating_mul(2)
            }
            Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Clamp => elements(result),
            Op::Reduce { .. } | Op::ReduceWindow { .. } => elements(operands[0]),
            Op::While(inner) => {
                let body = estimate_work(&inner.body);
                work.bytes_accessed = work.bytes_accessed.saturating_add(body.bytes_accessed);
                body.flops
            }
            _ => 0,
        };
        work.flops = work.flops.saturating_add(flops);
        let moved = operands.iter().chain(&results).fold(0u64, |acc, ty| acc.saturating_add(bytes(ty)));
        work.bytes_accessed = work.bytes_accessed.saturating_add(moved);
    }
    work
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;
    use ttpu_ir::{DType, DotDims, GraphBuilder, Shape};

    #[test]
    fn closed_spans_become_complete_events_with_their_fields() {
        let recorder = TraceRecorder::new();
        let subscriber = tracing_subscriber::registry().with(recorder.layer());
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!(target: "ttpu::test", "run", step = 3_u64).entered();
            tracing::debug_span!(target: "ttpu::test", "execute").in_scope(|| {});
            // Other targets and TRACE spans are not ttpu's stages: left out.
            tracing::info_span!(target: "other", "elsewhere").in_scope(|| {});
            tracing::trace_span!(target: "ttpu::test", "fine").in_scope(|| {});
            drop(outer);
        });
        assert_eq!(recorder.span_names(), ["execute", "run"]);
        let trace = recorder.to_json();
        let events = trace["traceEvents"].as_array().unwrap();
        let run = events.iter().find(|event| event["name"] == "run").unwrap();
        let execute = events.iter().find(|event| event["name"] == "execute").unwrap();
        assert_eq!(run["ph"], "X");
        assert_eq!(run["args"]["step"], 3);
        assert_eq!(run["cat"], "ttpu::test");
        // The inner span lies inside the outer one, on the same thread.
        let (start, end) = (run["ts"].as_f64().unwrap(), run["ts"].as_f64().unwrap() + run["dur"].as_f64().unwrap());
        let inner = execute["ts"].as_f64().unwrap();
        assert!(start <= inner && inner + execute["dur"].as_f64().unwrap() <= end);
        assert_eq!(run["tid"], execute["tid"]);
        assert!(events.iter().any(|event| event["ph"] == "M" && event["args"]["name"] == "main"));
    }

    #[test]
    fn work_counts_a_matmuls_flops_and_bytes() {
        let f32s = |dims: &[i64]| TensorType::new(DType::F32, Shape::from_static(dims));
        let mut b = GraphBuilder::new();
        let lhs = b.input(f32s(&[8, 16]), None);
        let rhs = b.input(f32s(&[16, 4]), None);
        let dims =
            DotDims { lhs_contracting: [1i64][..].into(), rhs_contracting: [0i64][..].into(), ..Default::default() };
        let product = b.dot_general(lhs, rhs, dims).unwrap();
        let doubled = b.binary(ttpu_ir::BinaryOp::Add, product, product).unwrap();
        let work = estimate_work(&b.finish(&[doubled]));
        assert_eq!(work.flops, 2 * 8 * 4 * 16 + 8 * 4);
        assert_eq!(work.bytes_accessed, 4 * (8 * 16 + 16 * 4 + 8 * 4) + 4 * 3 * (8 * 4));
    }
}
