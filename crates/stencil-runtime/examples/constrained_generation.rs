//! Constrained generation through the runtime in a few lines.
//!
//! ```text
//! scripts/fetch-model.sh          # the default model, once
//! cargo run --release -p stencil-runtime --example constrained_generation
//! ```

use std::ops::ControlFlow;

use serde_json::json;
use stencil_runtime::engine::ChatEngine;
use stencil_runtime::loader::{load, resolve, LoadOptions};
use stencil_runtime::tools::ToolEvent;
use stencil_types::{ChatMessage, ChatRequest, ConstraintSpec};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `None` = the default model; or a GGUF path, a safetensors directory, `org/name`.
    let files = resolve(std::env::args().nth(1).as_deref())?;
    let engine = ChatEngine::new(load(&files, &LoadOptions::default(), |_, _| {})?);

    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "population": {"type": "integer", "minimum": 0}
        },
        "required": ["city", "population"],
        "additionalProperties": false
    });
    let request = ChatRequest {
        messages: vec![ChatMessage::user("The largest city in France, as JSON.")],
        constraint: Some(ConstraintSpec::JsonSchema(schema)),
        ..ChatRequest::default()
    };
    // Text arrives as it becomes final; the outcome says why generation ended.
    let outcome = engine.chat(&request, |event| {
        if let ToolEvent::Content(text) = event {
            print!("{text}");
        }
        ControlFlow::Continue(()) // Break cancels generation
    })?;
    println!("\nfinish_reason: {:?}", outcome.finish_reason);
    Ok(())
}
