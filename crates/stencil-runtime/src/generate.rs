//! The generation loop: prompt -> tokens -> streamed text, with sampling and stopping.
//!
//! [`Generator`] is an iterator of final text chunks (whole UTF-8 characters, never part of a
//! stop string). [`generate`] drives it with a callback and returns the full [`Generation`].
//!
//! With a [`Constraint`] in [`GenerateParams::constraint`], every step masks the logits of the
//! tokens the constraint forbids (`-inf`, so the sampler never picks them), end-of-sequence is
//! possible only once the output is complete, and a `max_tokens` cut reports `length`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use stencil_mask::{Constraint, Matcher, TokenSet};
use stencil_vocab::TokenKind;

use crate::error::{CandleContext, Result, RuntimeError};
use crate::models::{LanguageModel, Session};
use crate::sampler::{Sampler, SamplingParams};
use crate::stream::{StreamEvent, TextStream};
use crate::tokenizer::Tokenizer;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation ends *before* the first occurrence of any of these (not emitted). With a
    /// constraint, only an occurrence where the output before it is complete ends it, so a stop
    /// string can never cut a value short.
    pub stop: Vec<String>,
    /// Output constraint, compiled for this model's vocabulary.
    pub constraint: Option<Arc<Constraint>>,
    /// Feed the tokens a constraint forces (`{"name": "` after `{` in a fixed-order object)
    /// to the model in one forward pass instead of sampling them one by one.
    pub fast_forward: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            constraint: None,
            fast_forward: true,
        }
    }
}

/// Why generation ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` or the end of the context window.
    Length,
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

/// Wall-clock time spent in the prompt pass and in decoding.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub prompt: Duration,
    pub decode: Duration,
}

impl Timings {
    pub fn prompt_tokens_per_s(&self, usage: &Usage) -> f64 {
        usage.prompt_tokens as f64 / self.prompt.as_secs_f64().max(1e-9)
    }
    pub fn decode_ms_per_token(&self, usage: &Usage) -> f64 {
        self.decode.as_secs_f64() * 1e3 / usage.completion_tokens.max(1) as f64
    }
}

/// A finished generation.
#[derive(Debug, Clone)]
pub struct Generation {
    pub text: String,
    pub tokens: Vec<u32>,
    pub finish_reason: FinishReason,
    /// The stop string that ended generation, if any.
    pub matched_stop: Option<String>,
    /// Tokens the constraint forced and that were fed without sampling.
    pub forced_tokens: usize,
    pub usage: Usage,
    pub timings: Timings,
}

/// Step-by-step generation; iterate to get text chunks.
pub struct Generator<'m> {
    session: Box<dyn Session + 'm>,
    tokenizer: &'m Tokenizer,
    sampler: Sampler,
    stream: TextStream,
    max_tokens: usize,
    logits: Vec<f32>,
    prompt_len: usize,
    generated: Vec<u32>,
    /// Bytes of the generated text tokens (what the constraint sees).
    output: Vec<u8>,
    text: String,
    finish: Option<FinishReason>,
    matched_stop: Option<String>,
    timings: Timings,
    matcher: Option<Matcher>,
    /// The constraint's mask for the current step: always computed during the forward pass
    /// that produced `logits`.
    mask: TokenSet,
    fast_forward: bool,
    forced_tokens: usize,
}

impl<'m> Generator<'m> {
    /// Runs the prompt through the model. Errors if the prompt does not fit the context.
    pub fn new(
        model: &'m dyn LanguageModel,
        tokenizer: &'m Tokenizer,
        prompt: &[u32],
        params: &GenerateParams,
    ) -> Result<Self> {
        let context = model.context_length();
        if prompt.is_empty() {
            return Err(RuntimeError::InvalidChat("the prompt is empty".into()));
        }
        if prompt.len() >= context {
            return Err(RuntimeError::PromptTooLong {
                tokens: prompt.len(),
                context,
                reserved: 1,
            });
        }
        let sampler = Sampler::new(params.sampling.clone())?;
        let mut matcher = match &params.constraint {
            Some(c) => Some(c.matcher()?),
            None => None,
        };
        let mut mask = TokenSet::new(if matcher.is_some() {
            tokenizer.vocab().len()
        } else {
            0
        });
        let mut session = model.new_session()?;
        let start = Instant::now();
        let logits = forward_with_mask(&mut *session, prompt, matcher.as_mut(), &mut mask)?;
        let timings = Timings {
            prompt: start.elapsed(),
            decode: Duration::ZERO,
        };
        Ok(Self {
            session,
            tokenizer,
            sampler,
            stream: TextStream::new(&params.stop),
            max_tokens: params.max_tokens.min(context - prompt.len()),
            logits,
            prompt_len: prompt.len(),
            generated: Vec::new(),
            output: Vec::new(),
            text: String::new(),
            finish: None,
            matched_stop: None,
            timings,
            mask,
            matcher,
            fast_forward: params.fast_forward,
            forced_tokens: 0,
        })
    }

    /// Sets the logits of every token the constraint forbids to `-inf` (ids beyond the
    /// tokenizer's vocabulary, which some models pad to, included).
    fn apply_mask(&mut self, logits: &mut [f32]) -> Result<()> {
        if self.matcher.is_none() {
            return Ok(());
        }
        for (id, l) in logits.iter_mut().enumerate() {
            if !self.mask.contains(id as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// The next final text chunk, or `None` once generation has finished.
    pub fn next_chunk(&mut self) -> Result<Option<String>> {
        loop {
            if self.finish.is_some() {
                return Ok(None);
            }
            if self.generated.len() >= self.max_tokens {
                return Ok(self.end(FinishReason::Length));
            }
            let start = Instant::now();
            let mut logits = std::mem::take(&mut self.logits);
            self.sampler.penalize(&mut logits, self.session.tokens());
            self.apply_mask(&mut logits)?;
            let Some(token) = self.sampler.sample(&logits) else {
                return Err(RuntimeError::Sampling(
                    "every token has probability zero (NaN or -inf logits)".into(),
                ));
            };
            self.logits = logits;
            self.generated.push(token);
            if self.tokenizer.vocab().is_eos(token) {
                self.timings.decode += start.elapsed();
                return Ok(self.end(FinishReason::Stop));
            }
            let mut feed = vec![token];
            if let Some(m) = self.matcher.as_mut() {
                m.commit(token)?;
                if self.fast_forward {
                    let budget = self.max_tokens - self.generated.len();
                    let forced = m.forced_tokens(budget, |text| {
                        // Special tokens never stand for constrained text.
                        let ids = self.tokenizer.encode(text, false)?;
                        let vocab = self.tokenizer.vocab();
                        let normal = ids
                            .iter()
                            .take_while(|&&id| vocab.kind(id) == TokenKind::Normal);
                        Ok::<_, RuntimeError>(normal.copied().collect())
                    })?;
                    self.forced_tokens += forced.len();
                    self.generated.extend_from_slice(&forced);
                    feed.extend(forced);
                }
            }
            let mut chunk = String::new();
            for &t in &feed {
                match self.push_text(t) {
                    StreamEvent::Text(text) => chunk.push_str(&text),
                    StreamEvent::Stopped { text, stop } => {
                        chunk.push_str(&text);
                        self.matched_stop = Some(stop);
                        self.text.push_str(&chunk);
                        self.finish = Some(FinishReason::Stop);
                        self.timings.decode += start.elapsed();
                        return Ok(Some(chunk));
                    }
                }
            }
            if self.generated.len() < self.max_tokens {
                self.logits = forward_with_mask(
                    &mut *self.session,
                    &feed,
                    self.matcher.as_mut(),
                    &mut self.mask,
                )?;
            }
            self.timings.decode += start.elapsed();
            if !chunk.is_empty() {
                self.text.push_str(&chunk);
                return Ok(Some(chunk));
            }
        }
    }

    /// Feeds one generated token's text to the stream. Control tokens are not text. Under a
    /// constraint a stop string ends the output only where the output before it is complete.
    fn push_text(&mut self, token: u32) -> StreamEvent {
        let vocab = self.tokenizer.vocab();
        if vocab.kind(token) != TokenKind::Normal {
            return StreamEvent::Text(String::new());
        }
        let bytes = vocab.token_bytes(token);
        self.output.extend_from_slice(bytes);
        let (output, matcher) = (&self.output, &self.matcher);
        self.stream.push_checked(bytes, |at| match matcher {
            None => true,
            Some(m) => m
                .constraint()
                .matcher()
                .and_then(|mut m| m.accepts_after(&output[..at]))
                .unwrap_or(false),
        })
    }

    fn end(&mut self, reason: FinishReason) -> Option<String> {
        self.finish = Some(reason);
        let rest = self.stream.finish();
        self.text.push_str(&rest);
        (!rest.is_empty()).then_some(rest)
    }

    /// Why generation ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Ends generation here, for `reason`, without generating more.
    pub fn finish_now(mut self, reason: FinishReason) -> Generation {
        if self.finish.is_none() {
            self.end(reason);
        }
        self.result()
    }

    fn result(self) -> Generation {
        Generation {
            text: self.text,
            usage: Usage {
                prompt_tokens: self.prompt_len,
                completion_tokens: self.generated.len(),
            },
            tokens: self.generated,
            finish_reason: self.finish.unwrap_or(FinishReason::Length),
            matched_stop: self.matched_stop,
            forced_tokens: self.forced_tokens,
            timings: self.timings,
        }
    }

    /// Consumes the generator (finishing it first) into the full result.
    pub fn into_generation(mut self) -> Result<Generation> {
        while self.next_chunk()?.is_some() {}
        Ok(self.result())
    }
}

impl Iterator for Generator<'_> {
    type Item = Result<String>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_chunk().transpose()
    }
}

/// Generates from `prompt` token ids, calling `on_text` with each final chunk.
pub fn generate(
    model: &dyn LanguageModel,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    mut on_text: impl FnMut(&str),
) -> Result<Generation> {
    let mut g = Generator::new(model, tokenizer, prompt, params)?;
    while let Some(chunk) = g.next_chunk()? {
        on_text(&chunk);
    }
    g.into_generation()
}

/// Runs `tokens` through the model and, at the same time on another thread, computes the
/// constraint's mask for the step after them, so that the mask costs no wall time when it is
/// cheaper than the forward pass.
fn forward_with_mask(
    session: &mut dyn Session,
    tokens: &[u32],
    matcher: Option<&mut Matcher>,
    mask: &mut TokenSet,
) -> Result<Vec<f32>> {
    let forward = |session: &mut dyn Session| -> Result<Vec<f32>> {
        session
            .forward(tokens)?
            .to_vec1::<f32>()
            .ctx("reading logits")
    };
    match matcher {
        None => forward(session),
        Some(m) => std::thread::scope(|s| {
            let masking = s.spawn(|| m.compute_mask(mask));
            let logits = forward(session);
            match masking.join() {
                Ok(r) => r?,
                Err(_) => return Err(RuntimeError::Sampling("the mask thread panicked".into())),
            }
            logits
        }),
    }
}
