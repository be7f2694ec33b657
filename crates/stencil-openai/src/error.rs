//! API errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

use serde::{Deserialize, Serialize};
pub use stencil_types::api::{ApiError, ErrorFields};

/// The JSON body of an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub message: String,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub param: Option<String>,
    #[serde(default)]
    pub code: Option<serde_json::Value>,
}

impl From<&ApiError> for ErrorBody {
    fn from(e: &ApiError) -> Self {
        ErrorBody {
            error: ErrorObject {
                message: e.message.clone(),
                kind: Some(e.kind.to_string()),
                param: e.param.clone(),
                code: e.code.clone().map(serde_json::Value::String),
            },
        }
    }
}

/// An error's OpenAI JSON body as text.
pub fn error_json(e: &ApiError) -> String {
    serde_json::to_string(&ErrorBody::from(e)).expect("errors serialize")
}
