//! Fuzz target: HTTP request bodies -> the OpenAI request validation of `stencil-openai`.
//!
//! The input drives a JSON body built mostly from the fields the API knows (the generator is
//! shared with the `validation` property test), and is also tried as a body when it is JSON.
//! Invariants: no panic, and every rejection is a 4xx error that names the field (`param`).

#![no_main]

#[path = "../../crates/stencil-openai/tests/bodies/mod.rs"]
mod bodies;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        bodies::check(&v);
    }
    bodies::check(&bodies::body(data));
});
