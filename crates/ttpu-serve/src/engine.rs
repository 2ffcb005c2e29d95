//! [`Engine`]: a [`Generator`] on a thread of its own, shared by many callers.
//!
//! [`Engine::submit`] checks a request on the caller's thread (so a bad one is refused at
//! once), refuses it when the running and queued requests already reach the limit, and hands it
//! to the step loop; the returned [`Stream`] yields its events, usable from async code
//! ([`Stream::next`]) or blocking code ([`Stream::blocking_next`]). Dropping a stream before its
//! end cancels the request, which frees its slot before the next step: a client that goes away
//! costs nothing more.
//!
//! The loop sleeps when there is nothing to do and runs steps back to back otherwise, taking
//! new requests and cancellations between steps. A device error stops the engine: every
//! request then gets [`Error::Stopped`] (a failed step may have donated the KV cache, so no
//! later step can be trusted).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc as channel;

use crate::generator::{EventKind, Generator, ModelInfo, Request, RequestId};
use crate::metrics::{Metrics, Outcome};
use crate::{Error, Result};

/// Limits of an engine.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// Requests that may wait for a slot; one more is refused ([`Error::QueueFull`]).
    pub max_queue: usize,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions { max_queue: 256 }
    }
}

enum Command {
    Submit { ticket: u64, request: Request, events: channel::UnboundedSender<Result<EventKind>>, arrived: Instant },
    Cancel { ticket: u64 },
}

struct Shared {
    info: Arc<ModelInfo>,
    metrics: Metrics,
    /// Requests submitted and not yet ended.
    in_flight: AtomicUsize,
    limit: usize,
    next_ticket: AtomicUsize,
    stopped: Mutex<Option<String>>,
}

/// A generator serving many callers from one thread (see the module docs).
pub struct Engine {
    shared: Arc<Shared>,
    commands: Mutex<Option<mpsc::Sender<Command>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

/// The events of one request, in order; its end is a [`EventKind::Finished`] or an error.
pub struct Stream {
    ticket: u64,
    events: channel::UnboundedReceiver<Result<EventKind>>,
    commands: mpsc::Sender<Command>,
    ended: bool,
}

impl Stream {
    /// The next event, `None` after the last.
    pub async fn next(&mut self) -> Option<Result<EventKind>> {
        if self.ended {
            return None;
        }
        let event = self.events.recv().await;
        self.note(&event);
        event
    }

    /// The next event, blocking the thread (not for async code).
    pub fn blocking_next(&mut self) -> Option<Result<EventKind>> {
        if self.ended {
            return None;
        }
        let event = self.events.blocking_recv();
        self.note(&event);
        event
    }

    fn note(&mut self, event: &Option<Result<EventKind>>) {
        if matches!(event, None | Some(Err(_)) | Some(Ok(EventKind::Finished { .. }))) {
            self.ended = true;
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.ended {
            // The worker may be gone already; then there is nothing to free.
            let _ = self.commands.send(Command::Cancel { ticket: self.ticket });
        }
    }
}

impl Engine {
    /// Starts the step loop over `generator`.
    pub fn start(generator: Generator, options: EngineOptions) -> Engine {
        let info = Arc::clone(generator.info());
        let limit = info.max_batch.saturating_add(options.max_queue);
        let shared = Arc::new(Shared {
            metrics: Metrics::new(info.max_batch),
            info,
            in_flight: AtomicUsize::new(0),
            limit,
            next_ticket: AtomicUsize::new(0),
            stopped: Mutex::new(None),
        });
        let (sender, receiver) = mpsc::channel();
        let worker_shared = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name("ttpu-serve-steps".into())
            .spawn(move || run(generator, receiver, &worker_shared))
            .expect("the step thread starts");
        Engine { shared, commands: Mutex::new(Some(sender)), worker: Mutex::new(Some(worker)) }
    }

    /// The model's manifest and text codec.
    pub fn info(&self) -> &Arc<ModelInfo> {
        &self.shared.info
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Why the engine stopped, if it has.
    pub fn stopped(&self) -> Option<String> {
        self.shared.stopped.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Checks `request` and queues it; refuses it when the running and queued requests reach
    /// the limit.
    pub fn submit(&self, request: Request) -> Result<Stream> {
        if let Some(reason) = self.stopped() {
            return Err(Error::Stopped { reason });
        }
        if let Err(error) = self.shared.info.check(&request) {
            self.shared.metrics.outcome(Outcome::Invalid);
            return Err(error);
        }
        let admitted = self.shared.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
            (count < self.shared.limit).then_some(count + 1)
        });
        if let Err(count) = admitted {
            self.shared.metrics.outcome(Outcome::Rejected);
            let running = count.min(self.shared.info.max_batch);
            return Err(Error::QueueFull { running, queued: count - running });
        }
        let commands = self.commands.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        let Some(commands) = commands else {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Stopped { reason: "the engine was shut down".into() });
        };
        let ticket = self.shared.next_ticket.fetch_add(1, Ordering::Relaxed) as u64;
        let (events, receiver) = channel::unbounded_channel();
        self.shared.metrics.prompt_tokens(request.prompt.len());
        let command = Command::Submit { ticket, request, events, arrived: Instant::now() };
        if commands.send(command).is_err() {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Stopped { reason: self.stopped().unwrap_or_else(|| "the step loop ended".into()) });
        }
        Ok(Stream { ticket, events: receiver, commands, ended: false })
    }

    /// Stops taking requests, lets the step loop finish the running ones, and waits for it.
    pub fn shutdown(&self) {
        self.commands.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        let worker = self.worker.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some(worker) = worker {
            let _ = worker.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One request as the loop tracks it.
struct Live {
    id: RequestId,
    events: channel::UnboundedSender<Result<EventKind>>,
    arrived: Instant,
    last_token: Option<Instant>,
}

/// The step loop: takes commands between steps, sleeps when idle, ends when every sender is
/// gone and no work is left.
fn run(mut generator: Generator, commands: mpsc::Receiver<Command>, shared: &Shared) {
    let mut live: HashMap<u64, Live> = HashMap::new();
    let mut tickets: HashMap<RequestId, u64> = HashMap::new();
    let mut open = true;
    loop {
        // Block for a command only when there is nothing else to do.
        let first = if generator.has_work() || !open {
            None
        } else {
            match commands.recv() {
                Ok(command) => Some(command),
                Err(_) => break,
            }
        };
        let mut pending: Vec<Command> = first.into_iter().collect();
        if open {
            loop {
                match commands.try_recv() {
                    Ok(command) => pending.push(command),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
        }
        for command in pending {
            match command {
                Command::Submit { ticket, request, events, arrived } => match generator.submit(request) {
                    Ok(id) => {
                        tickets.insert(id, ticket);
                        live.insert(ticket, Live { id, events, arrived, last_token: None });
                    }
                    Err(error) => {
                        shared.metrics.outcome(Outcome::Invalid);
                        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                        let _ = events.send(Err(error));
                    }
                },
                Command::Cancel { ticket } => {
                    if let Some(request) = live.remove(&ticket) {
                        generator.cancel(request.id);
                        tickets.remove(&request.id);
                        shared.metrics.outcome(Outcome::Cancelled);
                        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            }
        }
        if !generator.has_work() {
            shared.metrics.step(0, 0);
            if open {
                continue;
            }
            break;
        }
        let events = match generator.step() {
            Ok(events) => events,
            Err(error) => {
                let reason = error.to_string();
                tracing::error!("step failed, the engine stops: {reason}");
                *shared.stopped.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(reason.clone());
                for (_, request) in live.drain() {
                    shared.metrics.outcome(Outcome::Failed);
                    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                    let _ = request.events.send(Err(Error::Stopped { reason: reason.clone() }));
                }
                // Refuse what is still queued in the channel.
                while let Ok(command) = commands.recv() {
                    if let Command::Submit { events, .. } = command {
                        shared.metrics.outcome(Outcome::Failed);
                        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                        let _ = events.send(Err(Error::Stopped { reason: reason.clone() }));
                    }
                }
                return;
            }
        };
        let now = Instant::now();
        for event in events {
            let Some(&ticket) = tickets.get(&event.request) else { continue };
            let request = live.get_mut(&ticket).expect("every ticket is live");
            let finished = matches!(event.kind, EventKind::Finished { .. });
            if let EventKind::Token { .. } = event.kind {
                shared.metrics.generated_token();
                match request.last_token {
                    None => shared.metrics.time_to_first_token(now - request.arrived),
                    Some(last) => shared.metrics.inter_token_latency(now - last),
                }
                request.last_token = Some(now);
            }
            if finished {
                // Counted before the caller hears of it, so its next request finds the slot
                // free and the metrics current.
                let request = live.remove(&ticket).expect("the ticket is live");
                tickets.remove(&request.id);
                shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                shared.metrics.outcome(Outcome::Finished);
                let _ = request.events.send(Ok(event.kind));
            } else if request.events.send(Ok(event.kind)).is_err() {
                // The caller went away between steps: free the slot now.
                let request = live.remove(&ticket).expect("the ticket is live");
                tickets.remove(&request.id);
                generator.cancel(request.id);
                shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                shared.metrics.outcome(Outcome::Cancelled);
            }
        }
        shared.metrics.step(generator.running(), generator.waiting());
    }
}
