//! The model's own Jinja chat template, and prompts built with it.
//!
//! Templates on the Hub are written for Python's jinja2 (string methods like `.strip()`,
//! `raise_exception(...)`, `tojson`). [`ChatTemplate`] renders them with minijinja plus the
//! Python-compatibility layer and those helpers, with Hugging Face's settings (`trim_blocks`,
//! `lstrip_blocks`). Messages are validated first: every problem names the message index.

use std::sync::Arc;

use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};
use serde::Serialize;
use stencil_types::{message_texts, ChatMessage, RequestError, Role, TruncationPolicy};

use crate::error::{Result, RuntimeError};
use crate::tokenizer::special::SpecialText;
use crate::tokenizer::Tokenizer;

/// ChatML, used when a model ships no template of its own.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// Special-token strings defused in caller text before rendering (none for a template
    /// made without a tokenizer).
    special: Arc<SpecialText>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

fn raise_exception(msg: String) -> std::result::Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
}

/// `tojson` as Python's `json.dumps(ensure_ascii=False)`: no HTML escaping, optional indent.
fn tojson(
    value: Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<Value, JinjaError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let text = match indent {
        Some(n) => {
            let ind = " ".repeat(n);
            let fmt = serde_json::ser::PrettyFormatter::with_indent(ind.as_bytes());
            let mut buf = Vec::new();
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            json.serialize(&mut ser)
                .map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?;
            String::from_utf8(buf).expect("serde_json writes UTF-8")
        }
        None => python_style_json(&json),
    };
    Ok(Value::from_safe_string(text))
}

/// `json.dumps` default separators: `", "` and `": "`.
fn python_style_json(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(python_style_json).collect();
            format!("[{}]", items.join(", "))
        }
        serde_json::Value::Object(o) => {
            let items: Vec<String> = o
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}: {}",
                        serde_json::Value::from(k.as_str()),
                        python_style_json(v)
                    )
                })
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        other => other.to_string(),
    }
}

fn strftime_now(format: String) -> String {
    // Templates use this for "Today Date"; a fixed, documented date keeps prompts reproducible.
    format
        .replace("%d", "01")
        .replace("%b", "Jan")
        .replace("%B", "January")
        .replace("%Y", "2025")
        .replace("%m", "01")
}

impl ChatTemplate {
    /// Compiles `source`. Syntax errors are reported with the template's line.
    pub fn new(source: &str, bos: Option<&str>, eos: Option<&str>) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| {
                RuntimeError::Template(format!("the chat template does not compile: {e:#}"))
            })?;
        Ok(Self {
            env,
            bos: bos.unwrap_or_default().to_string(),
            eos: eos.unwrap_or_default().to_string(),
            special: Arc::new(SpecialText::new(Vec::new())),
        })
    }

    /// The model's template, or ChatML when it has none. Caller text it renders has the
    /// tokenizer's special-token strings defused (see [`crate::tokenizer::special`]).
    pub fn for_tokenizer(source: Option<&str>, tok: &Tokenizer) -> Result<Self> {
        let mut template = Self::new(
            source.unwrap_or(CHATML_TEMPLATE),
            tok.bos_token(),
            tok.eos_token(),
        )?;
        template.special = tok.special_text().clone();
        Ok(template)
    }

    /// True if the template renders a `tools` list itself (probed by rendering a dummy tool:
    /// templates that ignore `tools` get the Hermes convention instead).
    pub fn handles_tools(&self) -> bool {
        let probe = serde_json::json!([{"type": "function", "function": {"name": "stencil_probe_tool", "description": "probe", "parameters": {"type": "object", "properties": {}}}}]);
        self.render(&[ChatMessage::user("hi")], true, Some(&probe))
            .is_ok_and(|out| out.contains("stencil_probe_tool"))
    }

    /// Renders `messages` (validated first). `tools` is passed to templates that support it.
    /// Special-token strings in messages and tools come out as placeholders: tokenize the result
    /// with [`Tokenizer::encode_rendered`], show it with [`SpecialText::restore`].
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
    ) -> Result<String> {
        let texts = message_texts(messages)?;
        // Every string the template sees from the caller (content, tool calls, names) is
        // defused once, here; `texts` become the defused contents.
        let ctx_messages: Vec<serde_json::Value> = messages
            .iter()
            .zip(texts)
            .map(|(m, text)| {
                let mut v = serde_json::to_value(m).expect("messages serialize");
                v["content"] = serde_json::Value::String(text);
                if m.role == Role::Developer {
                    v["role"] = "system".into();
                }
                self.special.defuse_json(&mut v);
                v
            })
            .collect();
        let tools = tools.map(|t| {
            let mut t = t.clone();
            self.special.defuse_json(&mut t);
            t
        });
        let tmpl = self.env.get_template("chat").expect("added in new()");
        let out = tmpl
            .render(minijinja::context! {
                messages => ctx_messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos,
                eos_token => self.eos,
                tools => tools.as_ref().map(Value::from_serialize),
            })
            .map_err(|e| RuntimeError::Template(format!("rendering failed: {e:#}")))?;
        // A template that silently drops a system turn it has no place for would change the
        // request's meaning; refuse instead. (Only system turns: templates legitimately
        // rewrite other content, e.g. strip reasoning from assistant turns.)
        let mut cursor = 0;
        for (i, (m, v)) in messages.iter().zip(&ctx_messages).enumerate() {
            let t = v["content"].as_str().unwrap_or_default().trim();
            if t.is_empty() || !m.role.is_system() {
                continue;
            }
            match out[cursor..].find(t) {
                Some(at) => cursor += at + t.len(),
                None => {
                    return Err(RequestError::messages(format!(
                        "messages[{i}] (role `{}`) does not appear in the prompt rendered by the model's chat template: the template cannot place it here",
                        m.role
                    ))
                    .into())
                }
            }
        }
        Ok(out)
    }
}

/// A rendered, tokenized prompt.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub text: String,
    pub tokens: Vec<u32>,
    /// Messages dropped by truncation.
    pub dropped_messages: usize,
}

/// Renders and tokenizes so that `budget` tokens (context minus room for output) are not
/// exceeded, applying `policy`.
pub fn build_prompt(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
    tools: Option<&serde_json::Value>,
    context: usize,
    reserved: usize,
    policy: TruncationPolicy,
) -> Result<Prompt> {
    let budget = context.saturating_sub(reserved);
    let mut kept: Vec<ChatMessage> = messages.to_vec();
    let mut dropped = 0;
    loop {
        let rendered = template.render(&kept, true, tools)?;
        let tokens = tokenizer.encode_rendered(&rendered, true)?;
        if tokens.len() <= budget {
            return Ok(Prompt {
                text: tokenizer.special_text().restore(&rendered),
                tokens,
                dropped_messages: dropped,
            });
        }
        let too_long = RuntimeError::PromptTooLong {
            tokens: tokens.len(),
            context,
            reserved,
        };
        if policy == TruncationPolicy::Error {
            return Err(too_long);
        }
        // Turn starts: indices of user messages among the non-system ones.
        let starts: Vec<usize> = kept
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::User)
            .map(|(i, _)| i)
            .collect();
        if starts.len() < 2 {
            return Err(too_long);
        }
        // Drop everything non-system before the second turn start.
        let cut = starts[1];
        let before = kept.len();
        let mut i = 0;
        kept.retain(|m| {
            let keep = i >= cut || m.role.is_system();
            i += 1;
            keep
        });
        dropped += before - kept.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use stencil_types::{ContentPart, MessageContent};

    fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
        pairs
            .iter()
            .map(|(r, t)| ChatMessage::new(Role::parse(r).expect("a role"), t))
            .collect()
    }

    #[test]
    fn chatml_renders_and_accepts_parts_and_null_content() {
        let t = ChatTemplate::new(CHATML_TEMPLATE, None, None).unwrap();
        let mut m = msgs(&[("user", "hi")]);
        m.push(ChatMessage {
            content: None,
            ..ChatMessage::assistant("")
        });
        m.push(ChatMessage {
            content: Some(MessageContent::Parts(vec![ContentPart {
                kind: "text".into(),
                text: Some("again".into()),
            }])),
            ..ChatMessage::user("")
        });
        let out = t.render(&m, true, None).unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn bad_messages_are_named() {
        let t = ChatTemplate::new(CHATML_TEMPLATE, None, None).unwrap();
        let img: ChatMessage = serde_json::from_value(serde_json::json!({
            "role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]
        }))
        .unwrap();
        let err = t.render(&[img], true, None).unwrap_err();
        assert!(
            err.to_string()
                .contains("messages[0].content[0] has type `image_url`"),
            "{err}"
        );
        assert!(t.render(&[], true, None).is_err());
    }

    #[test]
    fn python_isms_raise_exception_and_dropped_system_messages() {
        let src = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}[{{ m.content.strip() }}]{% endfor %}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        assert_eq!(
            t.render(&msgs(&[("user", "  hi ")]), true, None).unwrap(),
            "[hi]"
        );
        let err = t
            .render(&msgs(&[("system", "s"), ("user", "u")]), true, None)
            .unwrap_err();
        assert!(
            err.to_string().contains("System role not supported"),
            "{err}"
        );
        // A template that silently ignores system messages is caught too.
        let t = ChatTemplate::new("{% for m in messages %}{% if m.role != 'system' %}{{ m.content }}{% endif %}{% endfor %}", None, None).unwrap();
        let err = t
            .render(&msgs(&[("system", "be brief"), ("user", "u")]), true, None)
            .unwrap_err();
        assert!(
            err.to_string().contains("messages[0] (role `system`)"),
            "{err}"
        );
        assert!(ChatTemplate::new("{% for %}", None, None).is_err());
    }

    #[test]
    fn tojson_is_python_style_and_unescaped() {
        let tools = serde_json::json!([{"name": "f", "d": "<b>&'中"}]);
        let t = ChatTemplate::new("{{ tools[0] | tojson(indent=2) }}", None, None).unwrap();
        let out = t
            .render(&msgs(&[("user", "x")]), false, Some(&tools))
            .unwrap();
        assert_eq!(out, "{\n  \"name\": \"f\",\n  \"d\": \"<b>&'中\"\n}");
        let t =
            ChatTemplate::new("{{ messages[0].content }}{{ tools | tojson }}", None, None).unwrap();
        let out = t
            .render(&msgs(&[("user", "x")]), false, Some(&tools))
            .unwrap();
        assert_eq!(out, r#"x[{"name": "f", "d": "<b>&'中"}]"#);
    }

    /// Constructs the common Hub templates use: slicing, namespaces, `loop` helpers,
    /// `raise_exception` for bad alternation, `strftime_now`, `.strip()` on content.
    #[test]
    fn mistral_and_llama3_style_constructs() {
        let mistral = "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}{%- if message['role'] == 'user' %}{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}{%- endif %}{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token}}{%- endif %}{%- endfor %}";
        let t = ChatTemplate::new(mistral, Some("<s>"), Some("</s>")).unwrap();
        let out = t
            .render(
                &msgs(&[
                    ("system", "S"),
                    ("user", "U1"),
                    ("assistant", "A1"),
                    ("user", "U2"),
                ]),
                true,
                None,
            )
            .unwrap();
        assert_eq!(out, "<s> [INST] S\n\nU1 [/INST] A1</s> [INST] U2 [/INST]");
        let err = t
            .render(&msgs(&[("user", "a"), ("user", "b")]), true, None)
            .unwrap_err();
        assert!(err.to_string().contains("must alternate"), "{err}");

        let llama3 = "{{- bos_token }}{%- set ns = namespace(sys='') %}{%- for m in messages %}{%- if m.role == 'system' %}{%- set ns.sys = m.content | trim %}{%- endif %}{%- endfor %}{{- '<|start_header_id|>system<|end_header_id|>\n\n' }}{{- 'Today Date: ' + strftime_now('%d %b %Y') + '\n\n' }}{{- ns.sys + '<|eot_id|>' }}{%- for m in messages if m.role != 'system' %}{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + m.content.strip() + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}";
        let t = ChatTemplate::new(llama3, Some("<|begin_of_text|>"), Some("<|eot_id|>")).unwrap();
        let out = t
            .render(
                &msgs(&[("system", " Be nice. "), ("user", " hi ")]),
                true,
                None,
            )
            .unwrap();
        assert_eq!(out, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nToday Date: 01 Jan 2025\n\nBe nice.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    }
}
