//! Token bitmasks owned by Python: a C-contiguous `int32` array of shape `[batch, words]` (or
//! `[words]`), bit `i % 32` of word `i // 32` set when token `i` is allowed. Read from a numpy
//! array's `__array_interface__` or a CPU torch tensor's `data_ptr()`, so the native module
//! needs neither numpy's nor torch's headers and works on the stable ABI.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use stencil_mask::TokenSet;

/// A validated view of a bitmask buffer. The caller keeps the Python object alive while the
/// view is used (it holds a reference for the whole call).
#[derive(Clone, Copy, Debug)]
pub struct Bitmask {
    addr: usize,
    pub rows: usize,
    pub words: usize,
}

const WHAT: &str = "bitmask must be a C-contiguous int32 array (numpy, or a CPU torch tensor) of shape [batch, ceil(vocab_size / 32)]; make one with stencil.allocate_token_bitmask";

/// The last numpy bitmask a matcher filled and its view: a `numpy.ndarray` cannot move or
/// reshape its data while referenced (`resize` refuses), so holding it makes the view
/// reusable, sparing a fresh `__array_interface__` dict per mask. Other objects (torch
/// tensors can `set_()` new storage) are read anew every call.
#[derive(Default)]
pub struct ViewCache(Option<(Py<PyAny>, Bitmask)>);

static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();

impl ViewCache {
    pub fn view(&mut self, obj: &Bound<'_, PyAny>, vocab_size: usize) -> PyResult<Bitmask> {
        if let Some((last, view)) = &self.0 {
            if last.is(obj) {
                return Ok(*view);
            }
        }
        let view = Bitmask::of(obj, vocab_size)?;
        let py = obj.py();
        let is_ndarray = NDARRAY
            .import(py, "numpy", "ndarray")
            .is_ok_and(|t| obj.get_type().is(t));
        self.0 = is_ndarray.then(|| (obj.clone().unbind(), view));
        Ok(view)
    }
}

impl Bitmask {
    /// Reads `obj`'s buffer; its rows must hold at least `vocab_size` bits.
    pub fn of(obj: &Bound<'_, PyAny>, vocab_size: usize) -> PyResult<Self> {
        let (addr, shape) = if let Ok(iface) = obj.getattr("__array_interface__") {
            numpy_view(iface.cast::<PyDict>()?)?
        } else if obj.hasattr("data_ptr")? {
            torch_view(obj)?
        } else {
            return Err(PyTypeError::new_err(format!(
                "{WHAT}; got {}",
                obj.get_type().name()?
            )));
        };
        let (rows, words) = match shape.as_slice() {
            [w] => (1, *w),
            [r, w] => (*r, *w),
            other => {
                return Err(PyValueError::new_err(format!(
                    "{WHAT}; got shape {other:?}"
                )))
            }
        };
        let need = vocab_size.div_ceil(32);
        if words < need {
            return Err(PyValueError::new_err(format!(
                "bitmask rows have {words} words, fewer than the {need} that vocab_size={vocab_size} needs"
            )));
        }
        if addr == 0 && rows * words > 0 {
            return Err(PyValueError::new_err("bitmask has no data"));
        }
        Ok(Self { addr, rows, words })
    }

    /// Checks `index` is a row of the mask.
    pub fn check_row(&self, index: usize) -> PyResult<()> {
        if index >= self.rows {
            return Err(PyValueError::new_err(format!(
                "index {index} is out of range for a bitmask of {} rows",
                self.rows
            )));
        }
        Ok(())
    }

    /// Writes `set` into row `index` (checked by `check_row`); words past the set are zero.
    ///
    /// Rows written concurrently must differ.
    pub fn write_row(&self, index: usize, set: &TokenSet) {
        debug_assert!(index < self.rows);
        // SAFETY: `of` checked that the buffer is a writable, C-contiguous int32 array of
        // `rows * words` elements, and `check_row` that `index < rows`; the Python object
        // stays referenced by the caller for the whole call, and each row has one writer.
        let row = unsafe {
            std::slice::from_raw_parts_mut(
                (self.addr as *mut u32).add(index * self.words),
                self.words,
            )
        };
        set.write_u32_words(row);
    }
}

fn numpy_view(iface: &Bound<'_, PyDict>) -> PyResult<(usize, Vec<usize>)> {
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        iface
            .get_item(k)?
            .ok_or_else(|| PyTypeError::new_err(format!("{WHAT}; __array_interface__ has no {k}")))
    };
    let typestr: String = get("typestr")?.extract()?;
    if typestr != "<i4" && typestr != "<u4" {
        return Err(PyTypeError::new_err(format!("{WHAT}; got dtype {typestr}")));
    }
    let (addr, readonly): (usize, bool) = get("data")?.extract()?;
    if readonly {
        return Err(PyValueError::new_err("bitmask is read-only"));
    }
    let shape: Vec<usize> = get("shape")?.extract()?;
    let strides = get("strides")?;
    if !strides.is_none() {
        let strides: Vec<isize> = strides.extract()?;
        let mut expect = 4isize;
        for (dim, stride) in shape.iter().zip(&strides).rev() {
            if *dim > 1 && *stride != expect {
                return Err(PyValueError::new_err(format!(
                    "{WHAT}; got strides {strides:?} (not C-contiguous)"
                )));
            }
            expect *= *dim as isize;
        }
    }
    Ok((addr, shape))
}

fn torch_view(t: &Bound<'_, PyAny>) -> PyResult<(usize, Vec<usize>)> {
    let dtype = t.getattr("dtype")?.str()?.to_string();
    if dtype != "torch.int32" {
        return Err(PyTypeError::new_err(format!("{WHAT}; got {dtype}")));
    }
    let device = t.getattr("device")?.getattr("type")?.extract::<String>()?;
    if device != "cpu" {
        return Err(PyValueError::new_err(format!(
            "{WHAT}; got a tensor on {device}: fill a CPU bitmask and copy it over (stencil.fill_bitmask does)"
        )));
    }
    if !t.call_method0("is_contiguous")?.extract::<bool>()? {
        return Err(PyValueError::new_err(format!(
            "{WHAT}; got a non-contiguous tensor"
        )));
    }
    let addr: usize = t.call_method0("data_ptr")?.extract()?;
    let shape: Vec<usize> = t.getattr("shape")?.extract()?;
    Ok((addr, shape))
}
