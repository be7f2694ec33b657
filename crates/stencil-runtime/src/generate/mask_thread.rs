//! The helper thread of a constrained generation: it computes the constraint's mask for the
//! next step while the forward pass runs on the generation's own thread. (A batched session's
//! forward runs on the scheduler's threads instead; the generation's thread then computes the
//! mask itself while it waits, with no helper: [`crate::models::Session::forward_overlapped`].)
//!
//! One thread for the whole generation, handed the matcher and the mask each step (moves, no
//! copies), instead of a thread spawned per token: a spawn and join cost tens of microseconds
//! of CPU per token, and in a batch of sixteen constrained sequences that CPU is taken from
//! the batched forward pass.

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

use stencil_mask::{MaskError, Matcher, TokenSet};

use crate::error::{Result, RuntimeError};

/// A matcher and the mask to compute into, and once computed the outcome.
struct Job {
    matcher: Matcher,
    mask: TokenSet,
    result: std::result::Result<(), MaskError>,
}

/// See the module docs. Dropping it ends the thread.
pub(super) struct MaskThread {
    jobs: Option<Sender<Job>>,
    done: Receiver<Job>,
    thread: Option<JoinHandle<()>>,
}

impl MaskThread {
    pub fn start() -> Result<Self> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (outbox, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("stencil-mask".into())
            .spawn(move || {
                for mut job in inbox {
                    job.result = job.matcher.compute_mask(&mut job.mask);
                    if outbox.send(job).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| RuntimeError::Generation(format!("cannot start the mask thread: {e}")))?;
        Ok(Self {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Runs `work` on this thread while the helper computes `matcher`'s mask into `mask`;
    /// both are back in place when it returns, unless the helper died computing it (then
    /// `matcher` is left `None` and the error says so: the caller must not sample without the
    /// mask).
    pub fn alongside<T>(
        &self,
        matcher: &mut Option<Matcher>,
        mask: &mut TokenSet,
        work: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let Some(m) = matcher.take() else {
            return work();
        };
        let job = Job {
            matcher: m,
            mask: std::mem::replace(mask, TokenSet::new(0)),
            result: Ok(()),
        };
        let sent = match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        if let Err(job) = sent {
            // The helper stops only when dropped or after a panic, which lost the matcher
            // then; should it be gone anyway, the matcher goes back with the error.
            (*matcher, *mask) = (Some(job.matcher), job.mask);
            return Err(stopped());
        }
        let out = work();
        let job = self.done.recv().map_err(|_| stopped())?;
        (*matcher, *mask) = (Some(job.matcher), job.mask);
        job.result?;
        out
    }
}

fn stopped() -> RuntimeError {
    RuntimeError::Generation("the mask thread has stopped".into())
}

impl Drop for MaskThread {
    fn drop(&mut self) {
        // Closing the channel ends the helper's loop.
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use stencil_grammar::{compile, ConstraintSpec, Options};
    use stencil_mask::{Constraint, Limits, TokenTrie};
    use stencil_vocab::{Vocab, VocabStyle};

    fn choice() -> (Arc<Constraint>, usize) {
        let tokens: Vec<Option<String>> = ["</s>", "yes", "no", "y", "es", "!"]
            .iter()
            .map(|t| Some(t.to_string()))
            .collect();
        let special = [true, false, false, false, false, false];
        let vocab =
            Vocab::from_token_strings(&tokens, &special, VocabStyle::SentencePiece, vec![0])
                .unwrap();
        let trie = Arc::new(TokenTrie::new(&vocab));
        let spec = ConstraintSpec::Choice(vec!["yes".into(), "no".into()]);
        let grammar = compile(&spec, &Options::default()).unwrap().grammar;
        let constraint = Constraint::new(&grammar, trie, Limits::default()).unwrap();
        (constraint, vocab.len())
    }

    /// Step by step, the helper's masks are the ones computed in place, the work runs and its
    /// result comes back, and the matcher is back to commit the next token.
    #[test]
    fn masks_computed_alongside_equal_masks_computed_in_place() {
        let (constraint, n) = choice();
        let helper = MaskThread::start().unwrap();
        let mut matcher = Some(constraint.matcher().unwrap());
        let mut reference = constraint.matcher().unwrap();
        let mut mask = TokenSet::new(n);
        let mut want = TokenSet::new(n);
        for token in [3, 4] {
            let got = helper.alongside(&mut matcher, &mut mask, || Ok(token * 10));
            assert_eq!(got.unwrap(), token * 10);
            reference.compute_mask(&mut want).unwrap();
            assert_eq!(
                mask.iter().collect::<Vec<_>>(),
                want.iter().collect::<Vec<_>>()
            );
            assert!(mask.contains(token));
            let m = matcher.as_mut().expect("the matcher is back");
            m.commit(token).unwrap();
            reference.commit(token).unwrap();
        }
        helper
            .alongside(&mut matcher, &mut mask, || Ok(()))
            .unwrap();
        assert_eq!(
            mask.iter().collect::<Vec<_>>(),
            [0],
            "complete: only end-of-sequence"
        );
    }

    /// The work's error is returned, and the matcher and mask still come back.
    #[test]
    fn a_failed_forward_keeps_the_matcher() {
        let (constraint, n) = choice();
        let helper = MaskThread::start().unwrap();
        let mut matcher = Some(constraint.matcher().unwrap());
        let mut mask = TokenSet::new(n);
        let r: Result<()> = helper.alongside(&mut matcher, &mut mask, || {
            Err(RuntimeError::Generation("forward failed".into()))
        });
        assert!(r.unwrap_err().to_string().contains("forward failed"));
        assert!(matcher.is_some());
        assert_eq!(mask.iter().collect::<Vec<_>>(), [1, 2, 3]);
    }
}
