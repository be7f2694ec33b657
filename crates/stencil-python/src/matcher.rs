//! `stencil.Matcher`: one sequence's position in a constraint; fills bitmask rows, accepts
//! tokens, rolls back. `fill_next_token_bitmasks` fills many rows at once on rayon's threads.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use rayon::prelude::*;
use stencil_mask::{Constraint, MaskError, Matcher, TokenSet};

use crate::bitmask::{Bitmask, ViewCache};
use crate::constraint::PyConstraint;
use crate::errors::{budget_error, mask_error, mask_error_in_row};
use crate::tokenizer::TokenizerData;

/// Per-sequence constraint state. Not shared between threads at once (Python objects are
/// borrowed exclusively while a method runs); make one per sequence.
#[pyclass(name = "Matcher", module = "stencil")]
pub struct PyMatcher {
    matcher: Matcher,
    tokenizer: Arc<TokenizerData>,
    max_tokens: Option<usize>,
    /// Scratch for the next mask (vocabulary-sized, reused).
    mask: TokenSet,
    /// The last bitmask filled, kept to skip re-reading it (see `ViewCache`).
    views: ViewCache,
}

impl PyMatcher {
    pub fn new(py: Python<'_>, c: &PyConstraint, max_tokens: Option<usize>) -> PyResult<Self> {
        let matcher = start(py, &c.inner, max_tokens)?;
        Ok(Self {
            matcher,
            tokenizer: c.tokenizer.clone(),
            max_tokens,
            mask: TokenSet::new(c.tokenizer.trie.vocab_size()),
            views: ViewCache::default(),
        })
    }

    /// Computes the next mask into row `index` of `bm`.
    fn fill(&mut self, bm: &Bitmask, index: usize) -> Result<(), MaskError> {
        self.matcher.compute_mask(&mut self.mask)?;
        bm.write_row(index, &self.mask);
        Ok(())
    }
}

/// A matcher at the start, under `max_tokens` if given (`BudgetError` when even the shortest
/// output needs more).
fn start(py: Python<'_>, c: &Arc<Constraint>, max_tokens: Option<usize>) -> PyResult<Matcher> {
    py.detach(|| match max_tokens {
        Some(max) => c.matcher_with_budget(max),
        None => c.matcher(),
    })
    .map_err(|e| match e {
        MaskError::BudgetTooSmall { needed, max_tokens } => {
            budget_error(py, &e, needed, max_tokens)
        }
        e => mask_error(py, &e),
    })
}

/// Why a fast-forward failed: a matcher step, or the tokenizer.
enum Forced {
    Mask(MaskError),
    Encode(PyErr),
}

impl From<MaskError> for Forced {
    fn from(e: MaskError) -> Self {
        Self::Mask(e)
    }
}

#[pymethods]
impl PyMatcher {
    /// Writes the tokens allowed next into row `index` of `bitmask` (see
    /// `allocate_token_bitmask`); end-of-sequence ids are allowed exactly when the output is
    /// complete. The GIL is released while the mask is computed.
    #[pyo3(signature = (bitmask, index=0))]
    fn fill_next_token_bitmask(
        &mut self,
        py: Python<'_>,
        bitmask: &Bound<'_, PyAny>,
        index: usize,
    ) -> PyResult<()> {
        let bm = self.views.view(bitmask, self.tokenizer.vocab_size)?;
        bm.check_row(index)?;
        py.detach(|| self.fill(&bm, index))
            .map_err(|e| mask_error(py, &e))
    }

    /// The ids allowed next (for inspection; generation loops should use bitmasks).
    fn allowed_tokens(&mut self, py: Python<'_>) -> PyResult<Vec<u32>> {
        py.detach(|| {
            self.matcher.compute_mask(&mut self.mask)?;
            Ok(self.mask.iter().collect())
        })
        .map_err(|e: MaskError| mask_error(py, &e))
    }

    /// Advances over token `id`. False (and no change) when the constraint forbids it;
    /// raises `MaskError` when the step fails for another reason (a limit).
    fn accept_token(&mut self, py: Python<'_>, id: i64) -> PyResult<bool> {
        let Ok(id) = u32::try_from(id) else {
            return Ok(false);
        };
        if id as usize >= self.tokenizer.trie.vocab_size() {
            // A padding id of the model: never allowed.
            return Ok(false);
        }
        match py.detach(|| self.matcher.commit(id)) {
            Ok(()) => Ok(true),
            Err(MaskError::TokenNotAllowed { .. } | MaskError::OverBudget { .. }) => Ok(false),
            Err(e) => Err(mask_error(py, &e)),
        }
    }

    /// Undoes the last `n` accepted tokens.
    fn rollback(&mut self, py: Python<'_>, n: usize) -> PyResult<()> {
        self.matcher.rollback(n).map_err(|e| mask_error(py, &e))
    }

    /// True when the output so far is complete (end-of-sequence would be allowed).
    fn is_accepting(&self) -> bool {
        self.matcher.is_accepting()
    }

    /// True once an end-of-sequence token was accepted.
    fn is_terminated(&self) -> bool {
        self.matcher.is_finished()
    }

    /// Tokens accepted so far.
    #[getter]
    fn num_tokens(&self) -> usize {
        self.matcher.num_tokens()
    }

    /// Text tokens left under `max_tokens` (None without a budget).
    #[getter]
    fn tokens_left(&self) -> Option<usize> {
        self.matcher.token_budget()
    }

    /// Fewest tokens that complete the output from here (None if it cannot be completed).
    fn min_tokens_to_finish(&mut self, py: Python<'_>) -> PyResult<Option<usize>> {
        py.detach(|| self.matcher.min_tokens_to_finish())
            .map_err(|e| mask_error(py, &e))
    }

    /// The bytes the constraint forces next, whatever is sampled (nothing is accepted).
    fn forced_bytes(&mut self, py: Python<'_>) -> PyResult<Vec<u8>> {
        py.detach(|| self.matcher.forced_bytes())
            .map_err(|e| mask_error(py, &e))
    }

    /// Fast-forward: tokenizes the forced text with the tokenizer (or `encode`, a callable
    /// `str -> list[int]`), ACCEPTS those tokens and returns them, for the caller to append
    /// to the sequence without sampling. The last token of the run is held back (it might
    /// merge with what follows); at most `max` tokens.
    #[pyo3(signature = (max=64, encode=None))]
    fn forced_tokens(
        &mut self,
        py: Python<'_>,
        max: usize,
        encode: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<u32>> {
        let tokenizer = self.tokenizer.clone();
        let r = match encode {
            None => py.detach(|| {
                self.matcher.forced_tokens(max, |text| {
                    tokenizer
                        .encode(text)
                        .map_err(|e| Forced::Encode(PyValueError::new_err(e)))
                })
            }),
            Some(f) => self.matcher.forced_tokens(max, |text| {
                f.call1((text,))
                    .and_then(|ids| ids.extract::<Vec<u32>>())
                    .map_err(Forced::Encode)
            }),
        };
        r.map_err(|e| match e {
            Forced::Mask(m) => mask_error(py, &m),
            Forced::Encode(e) => e,
        })
    }

    /// Back to the start of the output (same constraint and `max_tokens`).
    fn reset(&mut self, py: Python<'_>) -> PyResult<()> {
        self.matcher = start(py, &self.matcher.constraint().clone(), self.max_tokens)?;
        Ok(())
    }

    /// The model's vocabulary size (bitmask width in bits).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.tokenizer.vocab_size
    }

    fn __repr__(&self) -> String {
        format!(
            "Matcher(tokens={}, accepting={}, terminated={})",
            self.matcher.num_tokens(),
            self.matcher.is_accepting(),
            self.matcher.is_finished()
        )
    }
}

/// Fills row `indices[i]` (default `i`) of `bitmask` for each `matchers[i]`, the masks
/// computed in parallel on rayon's threads with the GIL released.
#[pyfunction]
#[pyo3(signature = (matchers, bitmask, indices=None))]
pub fn fill_next_token_bitmasks(
    py: Python<'_>,
    matchers: &Bound<'_, PyList>,
    bitmask: &Bound<'_, PyAny>,
    indices: Option<Vec<usize>>,
) -> PyResult<()> {
    let mut guards: Vec<PyRefMut<'_, PyMatcher>> = Vec::with_capacity(matchers.len());
    for (i, m) in matchers.iter().enumerate() {
        let m = m
            .cast::<PyMatcher>()
            .map_err(|_| PyTypeError::new_err(format!("matchers[{i}] is not a stencil.Matcher")))?;
        guards.push(m.try_borrow_mut().map_err(|_| {
            PyValueError::new_err(format!(
                "matchers[{i}] is in use (the same matcher twice in the list?)"
            ))
        })?);
    }
    let Some(first) = guards.first() else {
        return Ok(());
    };
    let vocab_size = first.tokenizer.vocab_size;
    if let Some(i) = guards
        .iter()
        .position(|g| g.tokenizer.vocab_size != vocab_size)
    {
        return Err(PyValueError::new_err(format!(
            "matchers[{i}] has vocab_size {}, matchers[0] {vocab_size}: one bitmask needs one vocabulary size",
            guards[i].tokenizer.vocab_size
        )));
    }
    let bm = Bitmask::of(bitmask, vocab_size)?;
    let rows = indices.unwrap_or_else(|| (0..guards.len()).collect());
    if rows.len() != guards.len() {
        return Err(PyValueError::new_err(format!(
            "{} indices for {} matchers",
            rows.len(),
            guards.len()
        )));
    }
    let mut seen = vec![false; bm.rows];
    for &r in &rows {
        bm.check_row(r)?;
        if std::mem::replace(&mut seen[r], true) {
            return Err(PyValueError::new_err(format!(
                "row {r} is named twice in indices"
            )));
        }
    }
    let mut work: Vec<(&mut PyMatcher, usize)> =
        guards.iter_mut().map(|g| &mut **g).zip(rows).collect();
    let failed = py.detach(|| {
        work.par_iter_mut()
            .map(|(m, row)| m.fill(&bm, *row).map_err(|e| (*row, e)))
            .find_any(Result::is_err)
    });
    match failed {
        Some(Err((row, e))) => Err(mask_error_in_row(py, row, &e)),
        _ => Ok(()),
    }
}
