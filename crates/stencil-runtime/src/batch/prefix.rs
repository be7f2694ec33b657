//! The scheduler's prompt-prefix cache: the KV caches of recent prompts, so a prompt that
//! starts like one of them (the same system prompt, tool definitions or conversation so far)
//! copies the shared part instead of recomputing it.
//!
//! Only models that guarantee the copy equals a recomputation offer it
//! ([`LanguageModel::fork_session`]), so a hit never changes an output.

use std::collections::VecDeque;

use crate::models::{LanguageModel, Session};

/// Shortest shared prefix worth copying, in tokens.
const MIN_PREFIX: usize = 16;

/// Recent prompts' sessions, least recently used first, within `capacity` positions.
pub(super) struct PrefixCache<'m> {
    entries: VecDeque<Box<dyn Session + 'm>>,
    positions: usize,
    capacity: usize,
}

impl<'m> PrefixCache<'m> {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            positions: 0,
            capacity,
        }
    }

    /// A session holding the longest cached prefix of `prompt` (at most all but its last
    /// token, which must run to give logits), if one of at least [`MIN_PREFIX`] tokens exists.
    pub fn fork(
        &mut self,
        model: &'m dyn LanguageModel,
        prompt: &[u32],
    ) -> Option<Box<dyn Session + 'm>> {
        let (at, len) = self.longest(prompt, prompt.len().saturating_sub(1))?;
        if len < MIN_PREFIX {
            return None;
        }
        let entry = self.entries.remove(at)?;
        let fork = model.fork_session(entry.as_ref(), len);
        self.entries.push_back(entry);
        fork
    }

    /// Keeps `session`'s tokens (a prompt just processed) unless a cached entry already holds
    /// them all.
    pub fn remember(&mut self, model: &'m dyn LanguageModel, session: &dyn Session) {
        let len = session.tokens().len();
        if len < MIN_PREFIX || len > self.capacity {
            return;
        }
        if self
            .longest(session.tokens(), len)
            .is_some_and(|(_, l)| l == len)
        {
            return;
        }
        let Some(copy) = model.fork_session(session, len) else {
            return;
        };
        self.positions += len;
        self.entries.push_back(copy);
        while self.positions > self.capacity {
            match self.entries.pop_front() {
                Some(old) => self.positions -= old.tokens().len(),
                None => break,
            }
        }
    }

    /// The entry sharing the longest prefix with `tokens` (capped at `max`), and its length.
    fn longest(&self, tokens: &[u32], max: usize) -> Option<(usize, usize)> {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let shared = e
                    .tokens()
                    .iter()
                    .zip(tokens)
                    .take_while(|(a, b)| a == b)
                    .count();
                (i, shared.min(max))
            })
            .max_by_key(|&(i, len)| (len, i))
    }
}
