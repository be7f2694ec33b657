//! The two threads behind the HTTP handlers: one checks requests (compiling constraints needs
//! a deep stack and must not block the async runtime), one generates, one request at a time,
//! from a bounded queue. A job whose client has gone away is skipped or cancelled.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use stencil_runtime::engine::Prepared;
use stencil_runtime::tools::ToolEvent;
use stencil_runtime::RuntimeError;
use stencil_types::{ChatOutcome, ChatRequest};
use tokio::sync::{mpsc, oneshot};

use crate::engine::Engine;

/// What a running job reports.
#[derive(Debug)]
pub enum JobEvent {
    /// Generation has started (the prompt is being processed).
    Started,
    Event(ToolEvent),
    Done(Result<ChatOutcome, RuntimeError>),
}

struct PrepareJob {
    request: ChatRequest,
    reply: oneshot::Sender<Result<Prepared, RuntimeError>>,
}

struct RunJob {
    prepared: Prepared,
    events: mpsc::Sender<JobEvent>,
}

/// Counts of finished generations, for `/health` and monitoring.
#[derive(Debug, Default)]
pub struct Stats {
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
}

/// Handles to the worker threads.
#[derive(Clone)]
pub struct Workers {
    prepare: SyncSender<PrepareJob>,
    run: SyncSender<RunJob>,
    pub stats: Arc<Stats>,
}

/// Why a job was not accepted.
#[derive(Debug)]
pub enum SubmitError {
    QueueFull,
    Stopped,
}

const STACK: usize = 256 << 20;

impl Workers {
    /// Starts the threads; `queue` is how many generation jobs may wait.
    pub fn start(engine: Arc<dyn Engine>, queue: usize) -> Self {
        let (prepare, prepare_rx) = sync_channel::<PrepareJob>(queue.max(1) * 4);
        let (run, run_rx) = sync_channel::<RunJob>(queue.max(1));
        let e = engine.clone();
        let stats = Arc::new(Stats::default());
        let counts = stats.clone();
        std::thread::Builder::new()
            .name("stencil-prepare".into())
            .stack_size(STACK)
            .spawn(move || {
                for job in prepare_rx {
                    if job.reply.is_closed() {
                        continue;
                    }
                    let _ = job.reply.send(e.prepare(&job.request));
                }
            })
            .expect("spawn the prepare thread");
        std::thread::Builder::new()
            .name("stencil-generate".into())
            .stack_size(STACK)
            .spawn(move || {
                for job in run_rx {
                    if job.events.is_closed() {
                        counts.cancelled.fetch_add(1, Ordering::Relaxed);
                        continue; // the client left while queued
                    }
                    let _ = job.events.blocking_send(JobEvent::Started);
                    let tx = job.events.clone();
                    let mut sink = |e: ToolEvent| {
                        if tx.blocking_send(JobEvent::Event(e)).is_err() {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    };
                    let result = engine.run(&job.prepared, &mut sink);
                    let counter = match &result {
                        Ok(_) => &counts.completed,
                        Err(RuntimeError::Cancelled) => &counts.cancelled,
                        Err(_) => &counts.failed,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    let _ = job.events.blocking_send(JobEvent::Done(result));
                }
            })
            .expect("spawn the generation thread");
        Self {
            prepare,
            run,
            stats,
        }
    }

    /// Checks a request (compiles its constraint, renders its prompt).
    pub async fn prepare(
        &self,
        request: ChatRequest,
    ) -> Result<Result<Prepared, RuntimeError>, SubmitError> {
        let (reply, rx) = oneshot::channel();
        match self.prepare.try_send(PrepareJob { request, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(SubmitError::QueueFull),
            Err(TrySendError::Disconnected(_)) => return Err(SubmitError::Stopped),
        }
        rx.await.map_err(|_| SubmitError::Stopped)
    }

    /// Queues generation; events arrive on the returned receiver.
    pub fn run(&self, prepared: Prepared) -> Result<mpsc::Receiver<JobEvent>, SubmitError> {
        let (events, rx) = mpsc::channel(1024);
        match self.run.try_send(RunJob { prepared, events }) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) => Err(SubmitError::QueueFull),
            Err(TrySendError::Disconnected(_)) => Err(SubmitError::Stopped),
        }
    }
}
