//! Chat requests end to end: conversation checks, prompt, constraint (cached), generation,
//! tool-call parsing. What the CLI's `generate --tools` and `batch` and the server run.
//!
//! [`ChatEngine`] owns a loaded model, the token trie of its vocabulary (built once) and a
//! cache of compiled constraints keyed by what was asked, so a schema or tool set used by many
//! requests is compiled once. [`ChatEngine::prepare`] does every check that can fail before
//! generation starts (a server answers those with 400); [`ChatEngine::run`] generates and
//! reports [`ToolEvent`]s as they become final. With [`ChatEngine::with_batching`], `run`
//! called from several threads at once shares one batched forward pass per step
//! ([`crate::batch`]).

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stencil_grammar::ir::{CharRanges, Expr};
use stencil_grammar::tools::{free_text, tool_grammar, ToolSchema};
use stencil_grammar::{compile, reasoning_then, ConstraintSpec, FormatMode, Grammar, Options};
use stencil_mask::{Constraint, Limits, TokenTrie};
use stencil_types::conversation::validate_conversation;
use stencil_types::{
    validate_tools, ChatFinish, ChatOutcome, ChatRequest, GenerateParams, RequestError, Role,
    ToolCall, ToolChoice,
};

use crate::batch::{BatchConfig, BatchStats, Batcher};
use crate::chat::{build_prompt, Prompt};
use crate::error::{Result, RuntimeError};
use crate::generate::{FinishReason, Generator};
use crate::loader::LoadedModel;
use crate::models::LanguageModel;
use crate::reasoning::ReasoningSplitter;
use crate::tools::{hermes_messages, template_messages, ToolCallParser, ToolEvent};

/// A request ready to run: prompt tokens and compiled constraint.
pub struct Prepared {
    pub prompt: Prompt,
    pub params: GenerateParams,
    /// The output constraint compiled for this model's vocabulary (`None`: unconstrained).
    pub constraint: Option<Arc<Constraint>>,
    pub warnings: Vec<String>,
    /// Whether generated text is parsed for `<tool_call>` blocks.
    pub tools: bool,
    timeout: Option<Duration>,
}

/// Compiled constraints kept for reuse (least recently used dropped first).
struct ConstraintCache {
    entries: VecDeque<(String, Arc<Constraint>, Vec<String>)>,
    capacity: usize,
}

/// A loaded model ready for chat requests.
pub struct ChatEngine {
    pub loaded: LoadedModel,
    trie: Arc<TokenTrie>,
    cache: Mutex<ConstraintCache>,
    handles_tools: bool,
    pub limits: Limits,
    batcher: Option<Batcher>,
}

impl ChatEngine {
    pub fn new(loaded: LoadedModel) -> Self {
        let trie = Arc::new(TokenTrie::new(loaded.tokenizer.vocab()));
        let handles_tools = loaded.template.handles_tools();
        Self {
            loaded,
            trie,
            cache: Mutex::new(ConstraintCache {
                entries: VecDeque::new(),
                capacity: 64,
            }),
            handles_tools,
            limits: Limits::default(),
            batcher: None,
        }
    }

    /// Runs generations through a continuous-batching scheduler: concurrent [`run`]s
    /// (from several threads) share each forward pass, up to `config.max_batch` at once.
    ///
    /// [`run`]: ChatEngine::run
    pub fn with_batching(mut self, config: BatchConfig) -> Result<Self> {
        self.batcher = Some(Batcher::new(self.loaded.model.clone(), config)?);
        Ok(self)
    }

    /// Generations that run at once: the batch size, or 1 without batching.
    pub fn max_batch(&self) -> usize {
        self.batcher.as_ref().map_or(1, |b| b.config().max_batch)
    }

    /// The scheduler's counters, when batching.
    pub fn batch_stats(&self) -> Option<BatchStats> {
        self.batcher.as_ref().map(Batcher::stats)
    }

    /// The token trie of the model's vocabulary.
    pub fn trie(&self) -> &Arc<TokenTrie> {
        &self.trie
    }

    /// Every check that can fail before generation: messages, tools, tool_choice, the
    /// constraint (compiled or taken from the cache), the prompt's length.
    pub fn prepare(&self, req: &ChatRequest) -> Result<Prepared> {
        req.params.sampling.validate()?;
        if req.params.max_tokens == 0 {
            return Err(
                RequestError::sampling("max_tokens", "max_tokens must be at least 1").into(),
            );
        }
        let choice = match &req.prompt {
            Some(_) if !req.messages.is_empty() || !req.tools.is_empty() => {
                return Err(
                    RequestError::messages("a raw prompt goes without messages and tools").into(),
                )
            }
            Some(_) => ToolChoice::None,
            None => {
                validate_tools(&req.tools)?;
                validate_conversation(&req.messages)?;
                match (&req.tool_choice, req.tools.is_empty()) {
                    (Some(ToolChoice::None), _) | (None, true) => ToolChoice::None,
                    (None, false) => ToolChoice::Auto,
                    (Some(c), true) => {
                        return Err(RequestError::tool_choice(format!(
                            "tool_choice is {c:?} but the request has no tools"
                        ))
                        .into())
                    }
                    (Some(c), false) => c.clone(),
                }
            }
        };
        let (constraint, warnings) = self.constraint_for(req, &choice)?;
        let reserved = if req.reserve_max_tokens {
            req.params.max_tokens
        } else {
            1
        };
        let prompt = match &req.prompt {
            Some(text) => self.raw_prompt(text, req.special_tokens, reserved)?,
            None => self.chat_prompt(req, reserved)?,
        };
        let params = req.params.clone();
        let max_tokens = self.output_room(&prompt, &params);
        if let Some(c) = &constraint {
            // The budget check of generation, before anything is streamed.
            crate::generate::budgeted_matcher(c, max_tokens)?;
        }
        if let Some(b) = &self.batcher {
            // The batch's KV cache must be able to hold the whole sequence.
            b.check_fits(prompt.tokens.len() + max_tokens)?;
        }
        Ok(Prepared {
            prompt,
            params,
            constraint,
            warnings,
            tools: !req.tools.is_empty() && choice != ToolChoice::None,
            timeout: req.timeout,
        })
    }

    /// Tokens the output may take: `max_tokens`, within the context the prompt leaves.
    fn output_room(&self, prompt: &Prompt, params: &GenerateParams) -> usize {
        let context = self.loaded.model.context_length();
        params
            .max_tokens
            .min(context.saturating_sub(prompt.tokens.len()))
    }

    /// A completion prompt, tokenized as text (control tokens only if `special_tokens`).
    fn raw_prompt(&self, text: &str, special_tokens: bool, reserved: usize) -> Result<Prompt> {
        let tokens = self
            .loaded
            .tokenizer
            .encode_raw_prompt(text, special_tokens)?;
        if tokens.is_empty() {
            return Err(RuntimeError::EmptyPrompt);
        }
        let context = self.loaded.model.context_length();
        if tokens.len() + reserved > context {
            return Err(RuntimeError::PromptTooLong {
                tokens: tokens.len(),
                context,
                reserved,
            });
        }
        Ok(Prompt {
            text: text.to_string(),
            tokens,
            dropped_messages: 0,
        })
    }

    /// The conversation through the chat template, with tools placed where the template (or
    /// the Hermes convention) wants them.
    fn chat_prompt(&self, req: &ChatRequest, reserved: usize) -> Result<Prompt> {
        let history_has_tools = req
            .messages
            .iter()
            .any(|m| m.tool_calls.is_some() || m.role == Role::Tool);
        let (messages, tools_json) = if self.handles_tools {
            let tools = (!req.tools.is_empty())
                .then(|| serde_json::to_value(&req.tools).expect("tools serialize"));
            (template_messages(&req.messages)?, tools)
        } else if !req.tools.is_empty() || history_has_tools {
            (hermes_messages(&req.messages, &req.tools)?, None)
        } else {
            (req.messages.clone(), None)
        };
        build_prompt(
            &self.loaded.template,
            &self.loaded.tokenizer,
            &messages,
            tools_json.as_ref(),
            self.loaded.model.context_length(),
            reserved,
            req.truncation,
        )
    }

    /// The compiled constraint for a request (`None`: unconstrained).
    fn constraint_for(
        &self,
        req: &ChatRequest,
        choice: &ToolChoice,
    ) -> Result<(Option<Arc<Constraint>>, Vec<String>)> {
        let reasoning = req.params.reasoning.as_ref();
        if req.tools.is_empty() && req.constraint.is_none() && reasoning.is_none() {
            return Ok((None, Vec::new()));
        }
        let key = format!(
            "{:?}|{:?}|{}|{:?}|{}|{}|{:?}|{}|{}|{}|{:?}",
            reasoning.map(|r| (&r.start, &r.end)),
            req.constraint.as_ref().map(spec_key),
            serde_json::to_string(&req.tools).expect("tools serialize"),
            choice,
            req.parallel_tool_calls,
            req.max_tool_calls,
            req.whitespace,
            req.lenient,
            req.strict_formats,
            req.oneof_as_anyof,
            req.max_recursion
        );
        if let Some(hit) = self.cache_get(&key) {
            return Ok(hit);
        }
        let options = Options {
            whitespace: req.whitespace.clone(),
            lenient: req.lenient,
            format: if req.strict_formats {
                FormatMode::Strict
            } else {
                FormatMode::Assert
            },
            max_recursion: req.max_recursion,
            oneof_as_anyof: req.oneof_as_anyof,
            ..Options::generation()
        };
        let (mut grammar, warnings) = self.grammar_for(req, choice, &options)?;
        if let Some(r) = reasoning {
            let vocab = self.loaded.tokenizer.vocab();
            grammar = reasoning_then(grammar, &r.start, &r.end, |m| {
                vocab.control_token(m).is_some()
            })?;
        }
        let constraint = Constraint::new(&grammar, self.trie.clone(), self.limits.clone())?;
        let warnings: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.entries.len() >= cache.capacity {
            cache.entries.pop_front();
        }
        cache
            .entries
            .push_back((key, constraint.clone(), warnings.clone()));
        Ok((Some(constraint), warnings))
    }

    fn cache_get(&self, key: &str) -> Option<(Option<Arc<Constraint>>, Vec<String>)> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let at = cache.entries.iter().position(|(k, _, _)| k == key)?;
        let entry = cache.entries.remove(at)?;
        let hit = (Some(entry.1.clone()), entry.2.clone());
        cache.entries.push_back(entry);
        Some(hit)
    }

    fn grammar_for(
        &self,
        req: &ChatRequest,
        choice: &ToolChoice,
        options: &Options,
    ) -> Result<(Grammar, Vec<stencil_grammar::Warning>)> {
        let content = match &req.constraint {
            Some(spec) => Some(compile(spec, options)?),
            None => None,
        };
        if req.tools.is_empty() {
            // Without a constraint (only a reasoning prefix), any text follows the reasoning.
            return Ok(match content {
                Some(c) => (c.grammar, c.warnings),
                None => (
                    Grammar::single(Expr::star(Expr::chars(CharRanges::all()))),
                    Vec::new(),
                ),
            });
        }
        let schemas: Vec<ToolSchema> = req
            .tools
            .iter()
            .map(|t| ToolSchema {
                name: &t.function.name,
                parameters: t.function.parameters.as_ref(),
            })
            .collect();
        let mut warnings = Vec::new();
        let content = content.map(|c| {
            warnings.extend(c.warnings);
            c.grammar
        });
        let compiled = if *choice == ToolChoice::None && content.is_none() {
            stencil_grammar::Compiled {
                grammar: Grammar::single(free_text()),
                warnings: vec![],
            }
        } else {
            // A named tool_choice is one call whatever this says (`tool_grammar`).
            let max_calls = if req.parallel_tool_calls {
                req.max_tool_calls.max(1)
            } else {
                1
            };
            tool_grammar(&schemas, choice, max_calls, content, options)?
        };
        warnings.extend(compiled.warnings);
        Ok((compiled.grammar, warnings))
    }

    /// Generates for a prepared request. `sink` gets content and tool-call events as they
    /// become final; returning `Break` cancels generation ([`RuntimeError::Cancelled`]).
    pub fn run(
        &self,
        prepared: &Prepared,
        mut sink: impl FnMut(ToolEvent) -> ControlFlow<()>,
    ) -> Result<ChatOutcome> {
        let started = Instant::now();
        let admission;
        let model: &dyn LanguageModel = match &self.batcher {
            Some(b) => {
                let output = self.output_room(&prepared.prompt, &prepared.params);
                admission = b.admit(prepared.prompt.tokens.len() + output)?;
                &admission
            }
            None => self.loaded.model.as_ref(),
        };
        let mut g = Generator::new(
            model,
            &self.loaded.tokenizer,
            &prepared.prompt.tokens,
            &prepared.params,
            prepared.constraint.as_ref(),
        )?;
        let mut parser = ToolCallParser::new();
        let mut send = |events: Vec<ToolEvent>| -> Result<()> {
            for e in events {
                if sink(e).is_break() {
                    return Err(RuntimeError::Cancelled);
                }
            }
            Ok(())
        };
        // Small models tend to repeat a call forever; an exact repeat ends the output instead.
        // Events of calls after the first are held until the call is known not to repeat.
        let mut held: Vec<ToolEvent> = Vec::new();
        let mut repeated = false;
        // Under a reasoning prefix the reasoning goes out as its own events; the rest is the
        // content (tool calls included).
        let mut splitter = prepared
            .params
            .reasoning
            .as_ref()
            .map(ReasoningSplitter::new);
        let mut content_text = String::new();
        'generation: while let Some(chunk) = g.next_chunk()? {
            if let Some(limit) = prepared.timeout {
                if started.elapsed() > limit {
                    return Err(RuntimeError::Timeout(limit));
                }
            }
            let chunk = match splitter.as_mut() {
                Some(s) => {
                    let (thought, content) = s.push(&chunk);
                    if !thought.is_empty() {
                        send(vec![ToolEvent::Reasoning(thought)])?;
                    }
                    content
                }
                None => chunk,
            };
            if chunk.is_empty() {
                continue;
            }
            content_text.push_str(&chunk);
            let events = if prepared.tools {
                parser.push(&chunk)
            } else {
                vec![ToolEvent::Content(chunk)]
            };
            for e in events {
                match event_index(&e) {
                    Some(0) | None => send(vec![e])?,
                    Some(index) => {
                        let end = matches!(e, ToolEvent::CallEnd { .. });
                        held.push(e);
                        if end {
                            if is_repeat(parser.complete_calls(), index) {
                                repeated = true;
                                break 'generation;
                            }
                            send(std::mem::take(&mut held))?;
                        }
                    }
                }
            }
        }
        if let Some(s) = splitter.as_mut() {
            let (thought, rest) = s.finish();
            if !thought.is_empty() {
                send(vec![ToolEvent::Reasoning(thought)])?;
            }
            if !rest.is_empty() && !repeated {
                content_text.push_str(&rest);
                send(if prepared.tools {
                    parser.push(&rest)
                } else {
                    vec![ToolEvent::Content(rest)]
                })?;
            }
        }
        if !repeated {
            send(parser.finish())?;
        }
        let generation = if repeated {
            g.finish_now(FinishReason::Stop)
        } else {
            g.into_generation()?
        };
        let mut calls = parser.complete_calls().to_vec();
        if repeated {
            calls.pop();
        }
        let (content, tool_calls, finish_reason) = match generation.finish_reason {
            // Calls completed before the cut are reported; a call left open is not.
            FinishReason::Length if !repeated && calls.is_empty() => {
                (Some(content_text.clone()), Vec::new(), ChatFinish::Length)
            }
            FinishReason::Length if !repeated => {
                let text = parser.content().trim();
                (
                    (!text.is_empty()).then(|| text.to_string()),
                    calls,
                    ChatFinish::Length,
                )
            }
            _ if !calls.is_empty() => {
                let text = parser.content().trim();
                (
                    (!text.is_empty()).then(|| text.to_string()),
                    calls,
                    ChatFinish::ToolCalls,
                )
            }
            _ => (Some(content_text.clone()), Vec::new(), ChatFinish::Stop),
        };
        Ok(ChatOutcome {
            content,
            reasoning: splitter.map(|s| s.reasoning().to_string()),
            tool_calls,
            finish_reason,
            stop_sequence: generation.matched_stop.clone(),
            usage: generation.usage,
            timings: generation.timings,
            forced_tokens: generation.forced_tokens,
            closed_by_budget: generation.closed_by_budget,
            loop_guard_hits: generation.loop_guard_hits,
            warnings: prepared.warnings.clone(),
        })
    }

    /// [`prepare`](Self::prepare) then [`run`](Self::run).
    pub fn chat(
        &self,
        req: &ChatRequest,
        sink: impl FnMut(ToolEvent) -> ControlFlow<()>,
    ) -> Result<ChatOutcome> {
        let prepared = self.prepare(req)?;
        self.run(&prepared, sink)
    }
}

/// A cache key for a constraint spec.
fn spec_key(spec: &ConstraintSpec) -> String {
    match spec {
        ConstraintSpec::JsonSchema(v) => format!("schema:{v}"),
        other => format!("{other:?}"),
    }
}

/// True if call `index` is complete and repeats an earlier call exactly.
fn is_repeat(calls: &[ToolCall], index: usize) -> bool {
    calls.get(index).is_some_and(|c| {
        calls[..index]
            .iter()
            .any(|p| p.name == c.name && p.arguments == c.arguments)
    })
}

fn event_index(e: &ToolEvent) -> Option<usize> {
    match e {
        ToolEvent::CallStart { index, .. }
        | ToolEvent::Arguments { index, .. }
        | ToolEvent::CallEnd { index } => Some(*index),
        ToolEvent::Content(_) | ToolEvent::Reasoning(_) => None,
    }
}
