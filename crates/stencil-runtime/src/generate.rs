//! The generation loop: prompt -> tokens -> streamed text, with sampling and stopping.
//!
//! [`Generator`] is an iterator of final text chunks (whole UTF-8 characters, never part of a
//! stop string). [`generate`] drives it with a callback and returns the full [`Generation`].
//!
//! With a [`Constraint`], every step masks the logits of the
//! tokens the constraint forbids (`-inf`, so the sampler never picks them) and end-of-sequence
//! is possible only once the output is complete. `max_tokens` is the matcher's token budget:
//! every step allows only tokens after which the output can still be completed in the tokens
//! left, so a constrained output always ends complete (`stop`); a budget smaller than the
//! shortest completion is an error before generation. The loop guard forbids the token that
//! would continue a run of back-to-back repetitions. Unconstrained text cut by `max_tokens`
//! reports `length`. Under a reasoning prefix (`GenerateParams::reasoning`, whose grammar the
//! caller has put in front of the constraint) the end marker is written for the model once the
//! reasoning has used its `max_tokens`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::{Storage, Tensor};
use serde::Serialize;
use stencil_grammar::ir::special_token_bytes;
use stencil_mask::{Constraint, MaskError, Matcher, TokenSet};
use stencil_types::GenerateParams;
use stencil_types::{Timings, Usage};
use stencil_vocab::TokenKind;

use crate::error::{CandleContext, Result, RuntimeError};
use crate::models::{LanguageModel, Session};
use crate::sampler::Sampler;
use crate::stream::{StreamEvent, TextStream};
use crate::tokenizer::Tokenizer;
use mask_thread::MaskThread;

mod mask_thread;

/// Why generation ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` or the end of the context window.
    Length,
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
    /// The token budget removed tokens the constraint allowed, steering the output to close
    /// before `max_tokens` (the output is complete; `finish_reason` is `stop`).
    pub closed_by_budget: bool,
    /// Steps at which the loop guard forbade the token continuing a repetition.
    pub loop_guard_hits: usize,
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
    /// The bytes the constraint sees: the text of the generated tokens, control tokens spelled
    /// as the token trie spells them.
    output: Vec<u8>,
    /// Where the text stream and `output` differ: one entry per control token.
    controls: Vec<ControlSpan>,
    /// Bytes fed to the text stream so far.
    streamed: usize,
    text: String,
    finish: Option<FinishReason>,
    matched_stop: Option<String>,
    timings: Timings,
    matcher: Option<Matcher>,
    /// The constraint's mask for the current step: always computed during the forward pass
    /// that produced `logits`.
    mask: TokenSet,
    /// Whether a constraint masks every step (then `matcher` is `None` only if it was lost).
    constrained: bool,
    /// Computes the masks during the forward pass of a session that computes on this thread;
    /// a batched session's forward runs on the scheduler's threads, and this thread computes
    /// them while it waits.
    mask_thread: Option<MaskThread>,
    fast_forward: bool,
    forced_tokens: usize,
    loop_guard: bool,
    loop_guard_hits: usize,
    /// Under a reasoning prefix: its end marker, token limit, and whether it has ended.
    reasoning: Option<ReasoningState>,
}

/// A control token in the output: at these offsets of the text stream and of the constraint's
/// bytes, these many bytes in each (none in the stream unless it is a reasoning marker).
struct ControlSpan {
    stream_at: usize,
    output_at: usize,
    stream_len: usize,
    output_len: usize,
}

/// The offset in the constraint's bytes of offset `at` of the text stream: a control token
/// that the stream shows nothing of counts as before `at`; one shown as text (a reasoning
/// marker) counts as after an `at` inside that text.
fn output_offset(controls: &[ControlSpan], at: usize) -> usize {
    let mut shift = 0isize;
    for c in controls {
        if at >= c.stream_at + c.stream_len && (c.stream_len > 0 || at >= c.stream_at) {
            shift += c.output_len as isize - c.stream_len as isize;
        } else if at >= c.stream_at {
            return c.output_at;
        } else {
            break;
        }
    }
    (at as isize + shift) as usize
}

/// Where a reasoning prefix stands.
struct ReasoningState {
    end: String,
    /// The markers that are control tokens of the vocabulary (written as their text into the
    /// stream, so that the reasoning can be split from the content).
    end_token: Option<u32>,
    start_token: Option<u32>,
    max_tokens: Option<usize>,
    /// Output bytes before this offset have been searched for the end marker.
    searched: usize,
    ended: bool,
}

impl<'m> Generator<'m> {
    /// Runs the prompt through the model. Errors if the prompt does not fit the context.
    pub fn new(
        model: &'m dyn LanguageModel,
        tokenizer: &'m Tokenizer,
        prompt: &[u32],
        params: &GenerateParams,
        constraint: Option<&Arc<Constraint>>,
    ) -> Result<Self> {
        let context = model.context_length();
        if prompt.is_empty() {
            return Err(RuntimeError::EmptyPrompt);
        }
        if prompt.len() >= context {
            return Err(RuntimeError::PromptTooLong {
                tokens: prompt.len(),
                context,
                reserved: 1,
            });
        }
        let sampler = Sampler::new(params.sampling.clone())?;
        let max_tokens = params.max_tokens.min(context - prompt.len());
        let mut matcher = match constraint {
            Some(c) => Some(budgeted_matcher(c, max_tokens)?),
            None => None,
        };
        let mut mask = TokenSet::new(if matcher.is_some() {
            tokenizer.vocab().len()
        } else {
            0
        });
        let mut session = model.new_session()?;
        let constrained = matcher.is_some();
        let mask_thread = (constrained && !session.runs_elsewhere())
            .then(MaskThread::start)
            .transpose()?;
        let start = Instant::now();
        let mut logits = Vec::new();
        forward_with_mask(
            &mut *session,
            prompt,
            mask_thread.as_ref(),
            (&mut matcher, &mut mask),
            &mut logits,
        )?;
        let timings = Timings {
            prompt: start.elapsed(),
            decode: Duration::ZERO,
        };
        Ok(Self {
            session,
            tokenizer,
            sampler,
            stream: TextStream::new(&params.stop),
            max_tokens,
            logits,
            prompt_len: prompt.len(),
            generated: Vec::new(),
            output: Vec::new(),
            controls: Vec::new(),
            streamed: 0,
            text: String::new(),
            finish: None,
            matched_stop: None,
            timings,
            mask,
            constrained,
            mask_thread,
            matcher,
            fast_forward: params.fast_forward,
            forced_tokens: 0,
            loop_guard: params.loop_guard,
            loop_guard_hits: 0,
            reasoning: params.reasoning.as_ref().map(|r| ReasoningState {
                end: r.end.clone(),
                end_token: tokenizer.vocab().control_token(&r.end),
                start_token: tokenizer.vocab().control_token(&r.start),
                max_tokens: r.max_tokens,
                searched: 0,
                ended: false,
            }),
        })
    }

    /// Sets the logits of every token the constraint forbids to `-inf` (ids beyond the
    /// tokenizer's vocabulary, which some models pad to, included).
    fn apply_mask(&mut self, logits: &mut [f32]) -> Result<()> {
        if !self.constrained {
            return Ok(());
        }
        if self.matcher.is_none() {
            return Err(RuntimeError::Generation(
                "the constraint's state was lost (the mask thread failed)".into(),
            ));
        }
        self.mask.fill_outside(logits, f32::NEG_INFINITY);
        Ok(())
    }

    /// The next final text chunk, or `None` once generation has finished.
    pub fn next_chunk(&mut self) -> Result<Option<String>> {
        loop {
            if self.finish.is_some() {
                return Ok(None);
            }
            if self.generated.len() >= self.max_tokens {
                // Under a budget a constrained output is complete here.
                let complete = self.matcher.as_ref().is_some_and(Matcher::is_accepting);
                return Ok(self.end(if complete {
                    FinishReason::Stop
                } else {
                    FinishReason::Length
                }));
            }
            let start = Instant::now();
            self.guard_loop();
            let mut logits = std::mem::take(&mut self.logits);
            self.sampler.penalize(&mut logits, self.session.tokens());
            self.apply_mask(&mut logits)?;
            let Some(token) = self.sampler.sample(&logits) else {
                return Err(RuntimeError::Generation(
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
                feed.extend(self.fast_forward()?);
            }
            let mut chunk = String::new();
            let mut stopped = self.push_all(&feed, &mut chunk);
            if !stopped {
                let closing = self.close_reasoning()?;
                stopped = self.push_all(&closing, &mut chunk);
                feed.extend(closing);
            }
            if stopped {
                self.timings.decode += start.elapsed();
                return Ok(Some(chunk));
            }
            if self.generated.len() < self.max_tokens {
                forward_with_mask(
                    &mut *self.session,
                    &feed,
                    self.mask_thread.as_ref(),
                    (&mut self.matcher, &mut self.mask),
                    &mut self.logits,
                )?;
            }
            self.timings.decode += start.elapsed();
            if !chunk.is_empty() {
                self.text.push_str(&chunk);
                return Ok(Some(chunk));
            }
        }
    }

    /// Under a reasoning prefix: notes when the output has written the end marker, and writes
    /// it for the model once the reasoning has used its `max_tokens` (then what the constraint
    /// forces after it). Returns the tokens written, already counted as generated.
    fn close_reasoning(&mut self) -> Result<Vec<u32>> {
        let Some(r) = self.reasoning.as_mut().filter(|r| !r.ended) else {
            return Ok(Vec::new());
        };
        let from = r.searched.saturating_sub(r.end.len());
        if self.output[from..]
            .windows(r.end.len())
            .any(|w| w == r.end.as_bytes())
        {
            r.ended = true;
            return Ok(Vec::new());
        }
        r.searched = self.output.len();
        if r.max_tokens.is_none_or(|m| self.generated.len() < m) {
            return Ok(Vec::new());
        }
        r.ended = true;
        let mut forced = match r.end_token {
            Some(id) => vec![id],
            None => self.tokenizer.encode(&r.end, false)?,
        };
        self.forced_tokens += forced.len();
        self.generated.extend_from_slice(&forced);
        if let Some(m) = self.matcher.as_mut() {
            for &t in &forced {
                m.commit(t)?;
            }
            forced.extend(self.fast_forward()?);
        }
        Ok(forced)
    }

    /// The tokens the constraint forces next (none without fast-forward), committed and
    /// counted as generated.
    fn fast_forward(&mut self) -> Result<Vec<u32>> {
        let Some(m) = self.matcher.as_mut().filter(|_| self.fast_forward) else {
            return Ok(Vec::new());
        };
        let budget = self.max_tokens.saturating_sub(self.generated.len());
        // `encode` is text-only: special-token text in a forced string is spelled with
        // ordinary tokens, never a control token.
        let forced = m.forced_tokens(budget, |text| self.tokenizer.encode(text, false))?;
        self.forced_tokens += forced.len();
        self.generated.extend_from_slice(&forced);
        Ok(forced)
    }

    /// Feeds the text of `tokens` to the stream, into `chunk`. True when a stop string ended
    /// the output there (the output is then final).
    fn push_all(&mut self, tokens: &[u32], chunk: &mut String) -> bool {
        for &t in tokens {
            match self.push_text(t) {
                StreamEvent::Text(text) => chunk.push_str(&text),
                StreamEvent::Stopped { text, stop } => {
                    chunk.push_str(&text);
                    self.matched_stop = Some(stop);
                    self.text.push_str(chunk);
                    self.finish = Some(FinishReason::Stop);
                    return true;
                }
            }
        }
        false
    }

    /// The loop guard: under a constraint, removes from this step's mask the token that would
    /// continue a degenerate repetition, as long as another token stays allowed (every token
    /// of a budgeted mask can still be completed, so this never makes completion impossible).
    fn guard_loop(&mut self) {
        if !self.loop_guard || self.matcher.is_none() {
            return;
        }
        let Some(next) = repetition_to_break(&self.generated) else {
            return;
        };
        if self.mask.contains(next) && self.mask.count() > 1 {
            self.mask.remove(next);
            self.loop_guard_hits += 1;
        }
    }

    /// Feeds one generated token's text to the stream. Control tokens are not text. Under a
    /// constraint a stop string ends the output only where the output before it is complete.
    /// A control token that is a reasoning marker is written as its text, so the reasoning
    /// can be told from the content.
    fn push_text(&mut self, token: u32) -> StreamEvent {
        let vocab = self.tokenizer.vocab();
        let bytes = vocab.token_bytes(token);
        let shown: &[u8] = if vocab.kind(token) == TokenKind::Normal {
            self.output.extend_from_slice(bytes);
            bytes
        } else {
            let spelled = special_token_bytes(&String::from_utf8_lossy(bytes));
            let marker = self
                .reasoning
                .as_ref()
                .is_some_and(|r| r.end_token == Some(token) || r.start_token == Some(token));
            let shown: &[u8] = if marker { bytes } else { &[] };
            self.controls.push(ControlSpan {
                stream_at: self.streamed,
                output_at: self.output.len(),
                stream_len: shown.len(),
                output_len: spelled.len(),
            });
            self.output.extend_from_slice(&spelled);
            shown
        };
        self.streamed += shown.len();
        let (output, controls, matcher) = (&self.output, &self.controls, &self.matcher);
        self.stream.push_checked(shown, |at| match matcher {
            None => true,
            Some(m) => m
                .constraint()
                .matcher()
                .and_then(|mut m| m.accepts_after(&output[..output_offset(controls, at)]))
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
            closed_by_budget: self
                .matcher
                .as_ref()
                .is_some_and(Matcher::budget_restricted),
            loop_guard_hits: self.loop_guard_hits,
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

/// A matcher at the start of `constraint` under a budget of `max_tokens`, or
/// [`RuntimeError::BudgetTooSmall`] when its shortest output does not fit
/// (`Constraint::matcher_with_budget`, for generation and for `ChatEngine::prepare`).
pub fn budgeted_matcher(constraint: &Arc<Constraint>, max_tokens: usize) -> Result<Matcher> {
    constraint
        .matcher_with_budget(max_tokens)
        .map_err(|e| match e {
            MaskError::BudgetTooSmall { needed, max_tokens } => {
                RuntimeError::BudgetTooSmall { needed, max_tokens }
            }
            other => other.into(),
        })
}

/// Longest repeated unit the loop guard looks for, in tokens.
pub const LOOP_MAX_PERIOD: usize = 64;
/// Back-to-back copies of a unit that make a loop...
pub const LOOP_MIN_COPIES: usize = 3;
/// ...spanning at least this many tokens (so `000` in a number or `---` is not a loop).
pub const LOOP_MIN_SPAN: usize = 16;

/// If `tokens` end in a degenerate repetition (the same unit of at most
/// [`LOOP_MAX_PERIOD`] tokens written [`LOOP_MIN_COPIES`] times back to back, over at least
/// [`LOOP_MIN_SPAN`] tokens), the token that would start the next copy.
pub fn repetition_to_break(tokens: &[u32]) -> Option<u32> {
    let n = tokens.len();
    (1..=LOOP_MAX_PERIOD).find_map(|p| {
        let span = (LOOP_MIN_COPIES * p).max(LOOP_MIN_SPAN);
        if n < span {
            return None;
        }
        let periodic = (n - span + p..n).all(|i| tokens[i] == tokens[i - p]);
        periodic.then(|| tokens[n - p])
    })
}

/// Generates from `prompt` token ids, calling `on_text` with each final chunk.
pub fn generate(
    model: &dyn LanguageModel,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    constraint: Option<&Arc<Constraint>>,
    mut on_text: impl FnMut(&str),
) -> Result<Generation> {
    let mut g = Generator::new(model, tokenizer, prompt, params, constraint)?;
    while let Some(chunk) = g.next_chunk()? {
        on_text(&chunk);
    }
    g.into_generation()
}

/// Runs `tokens` through the model into `logits` and, at the same time, computes the
/// constraint's mask for the step after them (on the mask thread, or on this one while a
/// batched forward runs elsewhere), so that the mask costs no wall time when it is cheaper
/// than the forward pass.
fn forward_with_mask(
    session: &mut dyn Session,
    tokens: &[u32],
    mask_thread: Option<&MaskThread>,
    (matcher, mask): (&mut Option<Matcher>, &mut TokenSet),
    logits: &mut Vec<f32>,
) -> Result<()> {
    match (mask_thread, matcher.as_mut()) {
        (Some(t), _) => t.alongside(matcher, mask, || {
            read_logits(&session.forward(tokens)?, logits)
        }),
        (None, Some(m)) => {
            let mut masked = Ok(());
            let out = session.forward_overlapped(tokens, &mut || masked = m.compute_mask(mask));
            masked?;
            read_logits(&out?, logits)
        }
        (None, None) => read_logits(&session.forward(tokens)?, logits),
    }
}

/// Copies a `[vocab]` logits tensor into `out`, reusing its allocation: a fresh vector per
/// token (`to_vec1`) cost about as much again as the copy, page faults included.
fn read_logits(t: &Tensor, out: &mut Vec<f32>) -> Result<()> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let Storage::Cpu(cpu) = &*storage {
            // Contiguous f32 of one row: copied in place; anything else goes through candle.
            if let Ok((data, [], _)) = crate::models::row_input("logits", cpu, layout) {
                out.clear();
                out.extend_from_slice(data);
                return Ok(());
            }
        }
    }
    *out = t.to_vec1::<f32>().ctx("reading logits")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{output_offset, repetition_to_break, ControlSpan};

    #[test]
    fn stream_offsets_map_past_control_tokens() {
        // Stream "ab" + <|x|> (not shown, 7 bytes in the constraint's spelling) + "cd" +
        // </think> shown as its 8 bytes of text (10 in the spelling) + "e".
        let controls = [
            ControlSpan {
                stream_at: 2,
                output_at: 2,
                stream_len: 0,
                output_len: 7,
            },
            ControlSpan {
                stream_at: 4,
                output_at: 11,
                stream_len: 8,
                output_len: 10,
            },
        ];
        assert_eq!(output_offset(&controls, 0), 0);
        assert_eq!(output_offset(&controls, 1), 1);
        // A stop string starting where the hidden token stands comes after it.
        assert_eq!(output_offset(&controls, 2), 9);
        assert_eq!(output_offset(&controls, 3), 10);
        assert_eq!(output_offset(&controls, 4), 11);
        // Inside the marker's text: before the marker.
        assert_eq!(output_offset(&controls, 7), 11);
        assert_eq!(output_offset(&controls, 12), 21);
        assert_eq!(output_offset(&controls, 13), 22);
        assert_eq!(output_offset(&[], 5), 5);
    }

    #[test]
    fn loop_guard_sees_back_to_back_copies_only() {
        // A 6-token sentence three times: the next copy's first token is the one to forbid.
        let sentence = [10, 11, 12, 13, 14, 15];
        let mut t: Vec<u32> = vec![1, 2, 3];
        for _ in 0..3 {
            t.extend(sentence);
        }
        assert_eq!(repetition_to_break(&t), Some(10));
        // Two copies are not a loop yet.
        assert_eq!(repetition_to_break(&t[..3 + 12]), None);
        // Short units need a 16-token span: `000` in a number is not a loop, 16 zeros are.
        assert_eq!(repetition_to_break(&[7, 0, 0, 0]), None);
        let zeros = [vec![7], vec![0; 16]].concat();
        assert_eq!(repetition_to_break(&zeros), Some(0));
        assert_eq!(repetition_to_break(&zeros[..16]), None);
        // A copy broken anywhere is no repetition; the last unit is what counts.
        let mut broken = t.clone();
        broken[3 + 7] = 99;
        assert_eq!(repetition_to_break(&broken), None);
        assert_eq!(repetition_to_break(&[]), None);
        // Units up to 64 tokens long.
        let long: Vec<u32> = (0..64).chain(0..64).chain(0..64).collect();
        assert_eq!(repetition_to_break(&long), Some(0));
        let too_long: Vec<u32> = (0..65).chain(0..65).chain(0..65).collect();
        assert_eq!(repetition_to_break(&too_long), None);
    }
}
