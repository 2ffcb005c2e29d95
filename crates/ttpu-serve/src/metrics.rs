//! The server's counters, gauges and histograms, rendered in Prometheus' text format.
//!
//! Everything is a relaxed atomic or a short critical section: the step loop and the request
//! handlers update them, `/metrics` reads them.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How requests ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Completed (stop, length).
    Finished,
    /// The client went away.
    Cancelled,
    /// Refused with 429.
    Rejected,
    /// Refused with 400.
    Invalid,
    /// Failed on the device.
    Failed,
}

const OUTCOMES: [(Outcome, &str); 5] = [
    (Outcome::Finished, "finished"),
    (Outcome::Cancelled, "cancelled"),
    (Outcome::Rejected, "rejected"),
    (Outcome::Invalid, "invalid"),
    (Outcome::Failed, "failed"),
];

/// Latency buckets in seconds.
const BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    outcomes: [AtomicU64; 5],
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    running: AtomicU64,
    queued: AtomicU64,
    slots: AtomicU64,
    steps: AtomicU64,
    ttft: Mutex<Histogram>,
    itl: Mutex<Histogram>,
}

impl Metrics {
    /// Metrics for a server with `slots` slots.
    pub fn new(slots: usize) -> Metrics {
        let metrics = Metrics::default();
        metrics.slots.store(slots as u64, Ordering::Relaxed);
        metrics
    }

    /// Counts a request's end.
    pub fn outcome(&self, outcome: Outcome) {
        let index = OUTCOMES.iter().position(|(known, _)| *known == outcome).expect("every outcome is listed");
        self.outcomes[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request's prompt tokens.
    pub fn prompt_tokens(&self, tokens: usize) {
        self.prompt_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
    }

    /// Counts one generated token.
    pub fn generated_token(&self) {
        self.generated_tokens.fetch_add(1, Ordering::Relaxed);
    }

    /// Sets the gauges after a step.
    pub fn step(&self, running: usize, queued: usize) {
        self.running.store(running as u64, Ordering::Relaxed);
        self.queued.store(queued as u64, Ordering::Relaxed);
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a time to first token.
    pub fn time_to_first_token(&self, elapsed: Duration) {
        observe(&self.ttft, elapsed);
    }

    /// Records the time between two tokens of one request.
    pub fn inter_token_latency(&self, elapsed: Duration) {
        observe(&self.itl, elapsed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let load = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        let mut out = String::new();
        out.push_str("# HELP ttpu_requests_total Requests by how they ended.\n# TYPE ttpu_requests_total counter\n");
        for ((_, name), cell) in OUTCOMES.iter().zip(&self.outcomes) {
            let _ = writeln!(out, "ttpu_requests_total{{outcome=\"{name}\"}} {}", load(cell));
        }
        let mut scalar = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        scalar(
            "ttpu_prompt_tokens_total",
            "counter",
            "Prompt tokens of the requests accepted.",
            load(&self.prompt_tokens).to_string(),
        );
        scalar("ttpu_generated_tokens_total", "counter", "Tokens generated.", load(&self.generated_tokens).to_string());
        scalar("ttpu_steps_total", "counter", "Scheduling rounds run.", load(&self.steps).to_string());
        scalar("ttpu_running_requests", "gauge", "Requests holding a slot.", load(&self.running).to_string());
        scalar("ttpu_queued_requests", "gauge", "Requests waiting for a slot.", load(&self.queued).to_string());
        let slots = load(&self.slots).max(1) as f64;
        scalar(
            "ttpu_batch_occupancy",
            "gauge",
            "Running requests over slots, after the last step.",
            format!("{}", load(&self.running) as f64 / slots),
        );
        render_histogram(&mut out, "ttpu_time_to_first_token_seconds", "From arrival to the first token.", &self.ttft);
        render_histogram(&mut out, "ttpu_inter_token_latency_seconds", "Between two tokens of a request.", &self.itl);
        out
    }
}

fn observe(histogram: &Mutex<Histogram>, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    let mut histogram = histogram.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for (bound, count) in BUCKETS.iter().zip(histogram.counts.iter_mut()) {
        if seconds <= *bound {
            *count += 1;
        }
    }
    histogram.count += 1;
    histogram.sum += seconds;
}

fn render_histogram(out: &mut String, name: &str, help: &str, histogram: &Mutex<Histogram>) {
    let histogram = histogram.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (bound, count) in BUCKETS.iter().zip(histogram.counts) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", histogram.count);
    let _ = writeln!(out, "{name}_sum {}", histogram.sum);
    let _ = writeln!(out, "{name}_count {}", histogram.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_holds_every_series() {
        let metrics = Metrics::new(4);
        metrics.outcome(Outcome::Finished);
        metrics.outcome(Outcome::Rejected);
        metrics.prompt_tokens(7);
        metrics.generated_token();
        metrics.step(2, 1);
        metrics.time_to_first_token(Duration::from_millis(30));
        metrics.inter_token_latency(Duration::from_micros(500));
        let text = metrics.render();
        for line in [
            "ttpu_requests_total{outcome=\"finished\"} 1",
            "ttpu_requests_total{outcome=\"rejected\"} 1",
            "ttpu_requests_total{outcome=\"cancelled\"} 0",
            "ttpu_prompt_tokens_total 7",
            "ttpu_generated_tokens_total 1",
            "ttpu_running_requests 2",
            "ttpu_queued_requests 1",
            "ttpu_batch_occupancy 0.5",
            "ttpu_time_to_first_token_seconds_bucket{le=\"0.025\"} 0",
            "ttpu_time_to_first_token_seconds_bucket{le=\"0.05\"} 1",
            "ttpu_time_to_first_token_seconds_count 1",
            "ttpu_inter_token_latency_seconds_bucket{le=\"0.001\"} 1",
        ] {
            assert!(text.lines().any(|known| known == line), "missing `{line}` in\n{text}");
        }
    }
}
