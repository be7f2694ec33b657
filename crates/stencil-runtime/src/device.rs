//! `--device cpu|cuda[:N]|metal` parsing. A device this build lacks is an error that names the
//! cargo feature to enable.

use candle_core::Device;

use crate::error::{Result, RuntimeError};

/// Parses a device spec and opens the device.
pub fn open_device(spec: &str) -> Result<Device> {
    let s = spec.trim().to_ascii_lowercase();
    let (kind, index) = match s.split_once(':') {
        Some((k, i)) => {
            let n = i.parse::<usize>().map_err(|_| {
                RuntimeError::Device(format!("`{spec}`: `{i}` is not a device index"))
            })?;
            (k.to_string(), n)
        }
        None => (s.clone(), 0),
    };
    match kind.as_str() {
        "cpu" if index == 0 => Ok(Device::Cpu),
        "cpu" => Err(RuntimeError::Device(format!(
            "`{spec}`: cpu takes no index"
        ))),
        "cuda" => {
            if !candle_core::utils::cuda_is_available() {
                return Err(RuntimeError::Device(format!(
                    "`{spec}`: this binary was built without CUDA support; rebuild with `--features cuda`"
                )));
            }
            Device::new_cuda(index).map_err(|e| RuntimeError::Device(format!("`{spec}`: {e}")))
        }
        "metal" => {
            if !candle_core::utils::metal_is_available() {
                return Err(RuntimeError::Device(format!(
                    "`{spec}`: this binary was built without Metal support; rebuild with `--features metal`"
                )));
            }
            Device::new_metal(index).map_err(|e| RuntimeError::Device(format!("`{spec}`: {e}")))
        }
        _ => Err(RuntimeError::Device(format!(
            "`{spec}` is not a device; use cpu, cuda, cuda:N or metal"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        assert!(open_device("cpu").unwrap().is_cpu());
        assert!(open_device("CPU").unwrap().is_cpu());
        for bad in ["gpu", "cuda:x", "cpu:1", ""] {
            assert!(open_device(bad).is_err(), "{bad}");
        }
        #[cfg(not(feature = "cuda"))]
        {
            let e = open_device("cuda:0").unwrap_err().to_string();
            assert!(e.contains("--features cuda"), "{e}");
        }
        #[cfg(not(feature = "metal"))]
        {
            let e = open_device("metal").unwrap_err().to_string();
            assert!(e.contains("--features metal"), "{e}");
        }
    }
}
