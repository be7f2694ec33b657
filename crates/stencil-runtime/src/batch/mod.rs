//! Continuous batching: many sequences, one forward pass per step.
//!
//! A [`Batcher`] owns a scheduler thread that owns every batched sequence's KV cache. A
//! caller first [`admits`](Batcher::admit) a sequence (a slot among `max_batch`, and KV cache
//! positions for `prompt + max_tokens` against the cache's capacity; it waits while either is
//! short) and gets an [`Admission`], a [`LanguageModel`] whose sessions are handles: a
//! handle's `forward` goes to the scheduler and returns when the step that finished its tokens
//! has run. Between steps the scheduler takes in new work; each step is one
//! [`LanguageModel::forward_batch`] over every sequence with tokens to run, where a prompt
//! contributes at most `prefill_chunk` tokens per step, so long prompts interleave with the
//! decode steps of running sequences instead of stalling them.
//!
//! Everything else of a generation (sampling, constraint masks, stop strings, fast-forward,
//! tool calls, cancellation) stays on the caller's thread in the ordinary
//! [`Generator`](crate::generate::Generator), which is why a batched sequence produces exactly
//! what it produces alone: the model's rows are independent and the chunking of a prompt
//! depends on nothing but its length. The generator computes a step's mask on its own thread
//! while it waits for the forward, so the masks of all sequences are computed while the
//! batched forward runs.
//!
//! A prompt that starts like a recent one (same system prompt, tools or conversation so far)
//! copies the shared part of its KV cache from the scheduler's prefix cache
//! (`batch/prefix.rs`) instead of recomputing it, where the model guarantees the copy is exact.
//!
//! Dropping a handle (a finished, failed or cancelled generation) frees its cache at once;
//! dropping the admission frees its slot and reservation.

mod prefix;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use candle_core::Tensor;

use crate::error::{Result, RuntimeError};
use crate::models::{BatchStep, LanguageModel, Session};
use prefix::PrefixCache;

/// How the scheduler batches.
#[derive(Debug, Clone)]
pub struct BatchConfig {
    /// Sequences generating at once (more wait for a slot).
    pub max_batch: usize,
    /// Prompt tokens one sequence runs per step.
    pub prefill_chunk: usize,
    /// KV cache positions all sequences together may reserve (`prompt + max_tokens` each).
    pub kv_cache_tokens: usize,
    /// How long a step waits for running sequences that have not sent their next token yet.
    pub gather_window: Duration,
    /// KV cache positions kept for recent prompts (0: no prefix reuse).
    pub prefix_cache_tokens: usize,
}

impl BatchConfig {
    /// `max_batch` sequences sharing `kv_cache_bytes` of KV cache of `model`.
    pub fn new(model: &dyn LanguageModel, max_batch: usize, kv_cache_bytes: usize) -> Self {
        let per_token = model.kv_bytes_per_token().max(1);
        let kv_cache_tokens = kv_cache_bytes / per_token;
        Self {
            max_batch: max_batch.max(1),
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            kv_cache_tokens,
            gather_window: Duration::from_millis(10),
            // An eighth of the running sequences' memory, on top of it.
            prefix_cache_tokens: kv_cache_tokens / 8,
        }
    }
}

/// Default prompt tokens per sequence and step.
pub const DEFAULT_PREFILL_CHUNK: usize = 256;

/// Counters of the scheduler, for monitoring.
#[derive(Debug, Clone, Default)]
pub struct BatchStats {
    /// Sequences admitted and not yet finished.
    pub running: usize,
    /// Callers waiting for a slot or KV cache positions.
    pub waiting: usize,
    /// KV cache positions reserved by running sequences, and the capacity.
    pub kv_reserved: usize,
    pub kv_capacity: usize,
    /// Forward steps run, the sequences they ran (summed over steps: `sequence_steps /
    /// steps` is the mean batch size) and the tokens they processed (prompt and generated).
    pub steps: u64,
    pub sequence_steps: u64,
    pub tokens: u64,
    /// Prompts that copied a cached prefix, and the prompt tokens so not recomputed.
    pub prefix_hits: u64,
    pub prefix_tokens: u64,
    /// Tokens processed per second over the last ten seconds.
    pub tokens_per_s: f64,
}

/// The scheduler; cheap to clone (clones share it).
#[derive(Clone)]
pub struct Batcher {
    shared: Arc<Shared>,
}

struct Shared {
    model: Arc<dyn LanguageModel>,
    config: BatchConfig,
    to_scheduler: Sender<Msg>,
    next_id: AtomicU64,
    slots: Mutex<Slots>,
    freed: Condvar,
    throughput: Mutex<Throughput>,
}

#[derive(Default)]
struct Slots {
    running: usize,
    waiting: usize,
    reserved: usize,
}

#[derive(Default)]
struct Throughput {
    steps: u64,
    sequence_steps: u64,
    tokens: u64,
    prefix_hits: u64,
    prefix_tokens: u64,
    /// (when, tokens) of the steps of the last ten seconds.
    recent: VecDeque<(Instant, usize)>,
}

const RATE_WINDOW: Duration = Duration::from_secs(10);

enum Msg {
    Open {
        id: u64,
        reserve: usize,
    },
    Forward {
        id: u64,
        tokens: Vec<u32>,
        reply: Sender<Result<Tensor>>,
    },
    Truncate {
        id: u64,
        len: usize,
        reply: Sender<Result<()>>,
    },
    Close {
        id: u64,
    },
}

impl Batcher {
    /// Starts the scheduler thread for `model`.
    pub fn new(model: Arc<dyn LanguageModel>, config: BatchConfig) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            model: model.clone(),
            config: config.clone(),
            to_scheduler: tx,
            next_id: AtomicU64::new(0),
            slots: Mutex::new(Slots::default()),
            freed: Condvar::new(),
            throughput: Mutex::new(Throughput::default()),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("stencil-batch".into())
            .spawn(move || {
                let record = |e: Event| {
                    if let Some(s) = weak.upgrade() {
                        s.record(e);
                    }
                };
                schedule(model.as_ref(), &config, rx, record);
            })
            .map_err(|e| RuntimeError::Generation(format!("cannot start the scheduler: {e}")))?;
        Ok(Self { shared })
    }

    pub fn config(&self) -> &BatchConfig {
        &self.shared.config
    }

    /// Waits for a slot and `positions` KV cache positions (a sequence's prompt plus its
    /// `max_tokens`), then returns the admitted sequence's model. Errors at once when the
    /// reservation exceeds the whole cache.
    pub fn admit(&self, positions: usize) -> Result<Admission> {
        self.check_fits(positions)?;
        let s = &self.shared;
        let capacity = s.config.kv_cache_tokens;
        let mut slots = s.lock_slots();
        slots.waiting += 1;
        while slots.running >= s.config.max_batch || slots.reserved + positions > capacity {
            slots = s.freed.wait(slots).unwrap_or_else(|e| e.into_inner());
        }
        slots.waiting -= 1;
        slots.running += 1;
        slots.reserved += positions;
        Ok(Admission {
            shared: s.clone(),
            positions,
        })
    }

    /// [`RuntimeError::KvCacheTooSmall`] when a sequence of `positions` (prompt plus
    /// `max_tokens`) could never be admitted, whatever else runs.
    pub fn check_fits(&self, positions: usize) -> Result<()> {
        let capacity = self.shared.config.kv_cache_tokens;
        if positions > capacity {
            return Err(RuntimeError::KvCacheTooSmall {
                needed: positions,
                capacity,
            });
        }
        Ok(())
    }

    /// The scheduler's counters now.
    pub fn stats(&self) -> BatchStats {
        let s = &self.shared;
        let slots = s.lock_slots();
        let mut t = s.throughput.lock().unwrap_or_else(|e| e.into_inner());
        t.forget_old(Instant::now());
        let window = t.recent.front().map_or(RATE_WINDOW, |(at, _)| {
            at.elapsed().max(Duration::from_secs(1))
        });
        let recent: usize = t.recent.iter().map(|(_, n)| n).sum();
        BatchStats {
            running: slots.running,
            waiting: slots.waiting,
            kv_reserved: slots.reserved,
            kv_capacity: s.config.kv_cache_tokens,
            steps: t.steps,
            sequence_steps: t.sequence_steps,
            tokens: t.tokens,
            prefix_hits: t.prefix_hits,
            prefix_tokens: t.prefix_tokens,
            tokens_per_s: recent as f64 / window.as_secs_f64(),
        }
    }
}

impl Shared {
    fn lock_slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, msg: Msg) -> Result<()> {
        self.to_scheduler.send(msg).map_err(|_| stopped())
    }

    fn record(&self, e: Event) {
        let mut t = self.throughput.lock().unwrap_or_else(|e| e.into_inner());
        match e {
            Event::Step { sequences, tokens } => {
                let now = Instant::now();
                t.steps += 1;
                t.sequence_steps += sequences as u64;
                t.tokens += tokens as u64;
                t.recent.push_back((now, tokens));
                t.forget_old(now);
            }
            Event::PrefixHit { tokens } => {
                t.prefix_hits += 1;
                t.prefix_tokens += tokens as u64;
            }
        }
    }
}

impl Throughput {
    fn forget_old(&mut self, now: Instant) {
        while self
            .recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RATE_WINDOW)
        {
            self.recent.pop_front();
        }
    }
}

/// An admitted sequence: a [`LanguageModel`] whose sessions run in the batch. Dropping it frees
/// the slot and the reservation.
pub struct Admission {
    shared: Arc<Shared>,
    positions: usize,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut slots = self.shared.lock_slots();
        slots.running -= 1;
        slots.reserved -= self.positions;
        drop(slots);
        self.shared.freed.notify_all();
    }
}

impl LanguageModel for Admission {
    fn describe(&self) -> String {
        format!("{} (batched)", self.shared.model.describe())
    }
    fn vocab_size(&self) -> usize {
        self.shared.model.vocab_size()
    }
    fn context_length(&self) -> usize {
        self.shared.model.context_length()
    }
    fn kv_bytes_per_token(&self) -> usize {
        self.shared.model.kv_bytes_per_token()
    }
    fn new_session(&self) -> Result<Box<dyn Session + '_>> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        self.shared.send(Msg::Open {
            id,
            reserve: self.positions,
        })?;
        Ok(Box::new(Handle {
            shared: self.shared.clone(),
            id,
            tokens: Vec::new(),
        }))
    }
}

/// A session whose state lives on the scheduler thread.
struct Handle {
    shared: Arc<Shared>,
    id: u64,
    tokens: Vec<u32>,
}

impl Session for Handle {
    fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        self.forward_overlapped(tokens, &mut || {})
    }
    fn runs_elsewhere(&self) -> bool {
        true
    }
    fn forward_overlapped(
        &mut self,
        tokens: &[u32],
        meanwhile: &mut dyn FnMut(),
    ) -> Result<Tensor> {
        let (reply, answer) = mpsc::channel();
        self.shared.send(Msg::Forward {
            id: self.id,
            tokens: tokens.to_vec(),
            reply,
        })?;
        meanwhile();
        let logits = answer.recv().map_err(|_| stopped())??;
        self.tokens.extend_from_slice(tokens);
        Ok(logits)
    }
    fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    fn truncate(&mut self, len: usize) -> Result<()> {
        let (reply, answer) = mpsc::channel();
        self.shared.send(Msg::Truncate {
            id: self.id,
            len,
            reply,
        })?;
        answer.recv().map_err(|_| stopped())??;
        self.tokens.truncate(len);
        Ok(())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.shared.send(Msg::Close { id: self.id });
    }
}

/// What the scheduler reports for the counters.
enum Event {
    Step { sequences: usize, tokens: usize },
    PrefixHit { tokens: usize },
}

/// A forward in progress: `done` of its tokens have run.
struct Work {
    id: u64,
    tokens: Vec<u32>,
    done: usize,
    reply: Sender<Result<Tensor>>,
    /// The session's first forward (its prompt): remembered in the prefix cache when done.
    prompt: bool,
}

/// The scheduler loop: runs until every batcher handle and session is gone.
fn schedule(
    model: &dyn LanguageModel,
    config: &BatchConfig,
    rx: Receiver<Msg>,
    record: impl Fn(Event),
) {
    let mut sessions: HashMap<u64, Box<dyn Session + '_>> = HashMap::new();
    let mut reserves: HashMap<u64, usize> = HashMap::new();
    let mut prefixes = PrefixCache::new(config.prefix_cache_tokens);
    let mut work: Vec<Work> = Vec::new();
    // Sequences answered by the last step: the ones worth waiting for (a sequence whose thread
    // is held up elsewhere, by a slow client say, does not hold up the others).
    let mut expected: Vec<u64> = Vec::new();
    let context = model.context_length();
    loop {
        // Take in messages: block while idle; once there is work, wait up to the gather window
        // for the sequences of the last step that have not sent their next tokens yet.
        let mut deadline = None;
        loop {
            let all_in = expected
                .iter()
                .all(|id| !sessions.contains_key(id) || work.iter().any(|w| w.id == *id));
            let msg = if work.is_empty() {
                match rx.recv() {
                    Ok(m) => m,
                    Err(_) => return,
                }
            } else if all_in {
                match rx.try_recv() {
                    Ok(m) => m,
                    Err(_) => break,
                }
            } else {
                let until = *deadline.get_or_insert_with(|| Instant::now() + config.gather_window);
                match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            match msg {
                Msg::Open { id, reserve } => match model.new_session() {
                    Ok(mut s) => {
                        s.reserve(reserve);
                        sessions.insert(id, s);
                        reserves.insert(id, reserve);
                    }
                    Err(e) => tracing::error!("cannot open a session: {e}"),
                },
                Msg::Close { id } => {
                    sessions.remove(&id);
                    reserves.remove(&id);
                    work.retain(|w| w.id != id);
                }
                Msg::Truncate { id, len, reply } => {
                    let r = match sessions.get_mut(&id) {
                        Some(s) => s.truncate(len),
                        None => Err(unknown_session()),
                    };
                    let _ = reply.send(r);
                }
                Msg::Forward { id, tokens, reply } => {
                    match sessions.get(&id).map(|s| s.tokens().len()) {
                        None => {
                            let _ = reply.send(Err(unknown_session()));
                        }
                        Some(_) if tokens.is_empty() => {
                            let _ = reply.send(Err(RuntimeError::Generation(
                                "forward called with no tokens".into(),
                            )));
                        }
                        Some(len) if len + tokens.len() > context => {
                            let _ = reply.send(Err(RuntimeError::PromptTooLong {
                                tokens: len + tokens.len(),
                                context,
                                reserved: 0,
                            }));
                        }
                        Some(len) => {
                            let prompt = len == 0;
                            let mut done = 0;
                            if let Some(mut fork) =
                                prompt.then(|| prefixes.fork(model, &tokens)).flatten()
                            {
                                done = fork.tokens().len();
                                fork.reserve(reserves.get(&id).copied().unwrap_or(0));
                                sessions.insert(id, fork);
                                record(Event::PrefixHit { tokens: done });
                            }
                            work.push(Work {
                                id,
                                tokens,
                                done,
                                reply,
                                prompt,
                            });
                        }
                    }
                }
            }
        }
        if !work.is_empty() {
            let done = step(model, config, &mut sessions, &mut work, &record);
            for id in &done.prompts {
                if let Some(s) = sessions.get(id) {
                    prefixes.remember(model, s.as_ref());
                }
            }
            expected = done.answered;
        }
    }
}

/// What a step finished: the sequences it answered, and those of them whose prompt it was.
struct Finished {
    answered: Vec<u64>,
    prompts: Vec<u64>,
}

/// One batched forward over every sequence with work.
fn step<'m>(
    model: &'m dyn LanguageModel,
    config: &BatchConfig,
    sessions: &mut HashMap<u64, Box<dyn Session + 'm>>,
    work: &mut Vec<Work>,
    record: &impl Fn(Event),
) -> Finished {
    let mut taken: Vec<Box<dyn Session + 'm>> = work
        .iter()
        .map(|w| sessions.remove(&w.id).expect("work has a session"))
        .collect();
    let chunks: Vec<(usize, usize)> = work
        .iter()
        .map(|w| (w.done, (w.tokens.len() - w.done).min(config.prefill_chunk)))
        .collect();
    let mut steps: Vec<BatchStep<'_, 'm>> = taken
        .iter_mut()
        .zip(work.iter().zip(&chunks))
        .map(|(s, (w, &(from, n)))| BatchStep {
            session: s.as_mut(),
            tokens: &w.tokens[from..from + n],
        })
        .collect();
    let result = model.forward_batch(&mut steps);
    drop(steps);
    record(Event::Step {
        sequences: chunks.len(),
        tokens: chunks.iter().map(|c| c.1).sum(),
    });
    let mut done = Finished {
        answered: Vec::new(),
        prompts: Vec::new(),
    };
    for (w, s) in work.iter().zip(taken) {
        sessions.insert(w.id, s);
    }
    match result {
        Ok(logits) => {
            let mut logits = logits.into_iter();
            let mut i = 0;
            work.retain_mut(|w| {
                let l = logits.next();
                w.done += chunks[i].1;
                i += 1;
                if w.done < w.tokens.len() {
                    return true;
                }
                done.answered.push(w.id);
                if w.prompt {
                    done.prompts.push(w.id);
                }
                let _ = w.reply.send(l.ok_or_else(|| {
                    RuntimeError::Generation("the batch returned too few logits".into())
                }));
                false
            });
        }
        Err(e) => {
            let message = e.to_string();
            for w in work.drain(..) {
                let _ = w.reply.send(Err(RuntimeError::Generation(message.clone())));
            }
        }
    }
    done
}

fn stopped() -> RuntimeError {
    RuntimeError::Generation("the batch scheduler has stopped".into())
}

fn unknown_session() -> RuntimeError {
    RuntimeError::Generation("the batched session is gone".into())
}
