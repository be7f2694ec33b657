//! Tools the model may call, the choice among them, and the calls it made.

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use stencil_grammar::tools::ToolChoice;

use crate::error::RequestError;

/// One tool (`{"type": "function", "function": {...}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionDef,
}

fn function_type() -> String {
    "function".into()
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments object (absent: no parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A call the model made. `arguments` is the JSON text of an object, as generated.
///
/// It serializes in the shape OpenAI's API and Hugging Face chat templates share:
/// `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "CallShape", from = "CallShape")]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Serialize, Deserialize)]
struct CallShape {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    function: FunctionShape,
}

#[derive(Serialize, Deserialize)]
struct FunctionShape {
    name: String,
    arguments: String,
}

impl From<ToolCall> for CallShape {
    fn from(c: ToolCall) -> Self {
        Self {
            id: c.id,
            kind: "function".into(),
            function: FunctionShape {
                name: c.name,
                arguments: c.arguments,
            },
        }
    }
}

impl From<CallShape> for ToolCall {
    fn from(c: CallShape) -> Self {
        Self {
            id: c.id,
            name: c.function.name,
            arguments: c.function.arguments,
        }
    }
}

/// Checks tool kinds and names ([`stencil_grammar::tools::check_tool_names`] is the rule).
pub fn validate_tools(tools: &[Tool]) -> Result<(), RequestError> {
    if let Some((i, t)) = tools.iter().enumerate().find(|(_, t)| t.kind != "function") {
        return Err(RequestError::tools(format!(
            "tools[{i}].type is `{}`; only `function` tools exist",
            t.kind
        )));
    }
    stencil_grammar::tools::check_tool_names(tools.iter().map(|t| t.function.name.as_str()))
        .map_err(RequestError::tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_serialize_in_the_shared_shape() {
        let c = ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: "{}".into(),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            json!({"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}})
        );
        assert_eq!(serde_json::from_value::<ToolCall>(v).unwrap(), c);
    }

    #[test]
    fn tool_rules_name_the_tool() {
        let tools: Vec<Tool> = serde_json::from_value(json!([
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "a"}}
        ]))
        .unwrap();
        let e = validate_tools(&tools).unwrap_err();
        assert_eq!(e.field, crate::RequestField::Tools);
        assert!(e
            .message
            .contains("tools[1].function.name `a` is used by an earlier tool too"));
        let odd: Vec<Tool> =
            serde_json::from_value(json!([{"type": "retrieval", "function": {"name": "a"}}]))
                .unwrap();
        assert!(validate_tools(&odd)
            .unwrap_err()
            .message
            .contains("only `function` tools"));
    }
}
