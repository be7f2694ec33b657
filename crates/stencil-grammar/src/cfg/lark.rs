//! Lark grammars -> the grammar IR.
//!
//! The subset llguidance and OpenAI's custom tools use: rules `name: alternatives` (start rule
//! `start`; modifiers `?`/`!`, priorities `.N` and aliases `-> name` are accepted and shape
//! nothing here), terminals `NAME: …`, literals `"…"` (`"…"i` ignores case), ranges
//! `"a".."z"`, regex terminals `/…/flags` (Rust `regex` syntax, flags `imsx`; `l`/`u` ignored),
//! grouping `( … )`, optional `[ … ]`, repetition `?`, `*`, `+`, `~ n`, `~ m..n`, comments
//! `//` and `#`, `%ignore`, `%import common.NAME [-> ALIAS]` / `%import common (A, B)`, and
//! llguidance's `%json { schema }`: a JSON value that schema accepts, compiled by the JSON
//! Schema compiler and called from the rule.
//!
//! Language: each terminal written in a rule (a literal, a regex or a reference to an
//! upper-case name) may be preceded by any number of `%ignore`d terminals. Lark also accepts
//! them after the last terminal; stencil does not, so that a generation ends with its last
//! terminal instead of a model padding it with ignored whitespace (a subset of Lark's
//! language, never more). What Lark's lexer adds on top is not modelled: it splits the text into the
//! longest terminals first, so where two adjacent terminals can run into each other without an
//! ignored separator (`start: WORD WORD`), stencil accepts splits that Lark's standard lexer
//! would not (Lark's Earley parser with `lexer="dynamic"` accepts the same texts as stencil).
//! Tokens are named by their text, `<|im_end|>`, or by id, `<[42]>`: a control token is the
//! token itself (a model without it cannot write it; an end-of-sequence token ends the output
//! instead, so a grammar names it nowhere but at its end, where it is not needed); an ordinary
//! token stands for its text. Names are checked against the vocabulary when the automaton is
//! built. Direct left recursion (`sum: sum "+" term | term`) is rewritten as repetition; left
//! recursion through other rules, templates (`_sep{x}`), `%declare`/`%override`/`%extend` and
//! imports from modules other than `common` are refused with the line they are on.

use std::collections::HashMap;

use super::{case_insensitive, Cursor, Node, RuleSet};
use crate::error::{GrammarError, Warning};
use crate::expr::CharRanges;
use crate::regex::regex_to_expr;
use crate::{compile_schema, Compiled, Options};

/// Lark's `common` module, as terminal definitions.
const COMMON: &str = include_str!("lark_common.lark");

/// The synthetic rule holding the `%ignore`d terminals (any number of them, before each
/// terminal of a rule); its name cannot be written in a grammar.
const IGNORE: &str = "%ignore";

fn err(line: usize, message: impl Into<String>) -> GrammarError {
    GrammarError::Lark {
        line,
        message: message.into(),
    }
}

fn is_terminal(name: &str) -> bool {
    name.trim_start_matches('_')
        .starts_with(|c: char| c.is_ascii_uppercase())
}

/// Compiles Lark text; the output must match rule `start`. `options` apply to the `%json`
/// schemas (their warnings are returned).
pub fn compile_lark(text: &str, options: &Options) -> Result<Compiled, GrammarError> {
    let mut p = Parser::new(text, options);
    p.definitions()?;
    let Parser {
        mut defs,
        ignore,
        imports,
        embeds,
        warnings,
        ..
    } = p;
    // Terminals may use only terminals.
    for (name, body, _) in &defs {
        if is_terminal(name) {
            let mut bad = None;
            let _ = super::visit_refs(body, &mut |r, line| {
                if !is_terminal(r) && bad.is_none() {
                    bad = Some((r.to_string(), line));
                }
                Ok(())
            });
            if let Some((r, line)) = bad {
                return Err(err(
                    line,
                    format!(
                        "terminal `{name}` refers to rule `{r}`; terminals may use only terminals"
                    ),
                ));
            }
        }
    }
    import_common(&mut defs, &imports)?;
    let ignored = if ignore.is_empty() {
        Node::Literal(String::new())
    } else {
        Node::Repeat(Box::new(Node::alt(ignore)), 0, None)
    };
    defs.push((IGNORE.into(), ignored, 1));
    let grammar = RuleSet {
        rules: defs,
        embeds,
        error: |line, message| err(line, message),
    }
    .lower("start")?;
    Ok(Compiled { grammar, warnings })
}

/// Adds the `common` terminals `imports` names (alias, name in `common`, line), and those they
/// use under `common.NAME`, a name no grammar can write.
fn import_common(
    defs: &mut Vec<(String, Node, usize)>,
    imports: &[(String, String, usize)],
) -> Result<(), GrammarError> {
    if imports.is_empty() {
        return Ok(());
    }
    let options = Options::default();
    let mut common = Parser::new(COMMON, &options);
    common
        .definitions()
        .expect("the built-in common module parses");
    let table: HashMap<String, Node> = common
        .defs
        .into_iter()
        .map(|(n, body, _)| (n, body))
        .collect();
    let mut queue: Vec<(String, String, usize)> = imports.to_vec();
    while let Some((alias, name, line)) = queue.pop() {
        if defs.iter().any(|(n, _, _)| *n == alias) {
            if alias.starts_with("common.") {
                continue;
            }
            return Err(err(line, format!("`{alias}` is imported but also defined")));
        }
        let body = table
            .get(&name)
            .ok_or_else(|| err(line, format!("the common module has no terminal `{name}`")))?;
        let mut deps = Vec::new();
        let body = rename_refs(body, &mut |r| {
            deps.push(r.to_string());
            format!("common.{r}")
        });
        for d in deps {
            queue.push((format!("common.{d}"), d, line));
        }
        defs.push((alias, body, line));
    }
    Ok(())
}

fn rename_refs(n: &Node, f: &mut impl FnMut(&str) -> String) -> Node {
    match n {
        Node::Ref(r, line) => Node::Ref(f(r), *line),
        Node::Seq(v) => Node::Seq(v.iter().map(|k| rename_refs(k, f)).collect()),
        Node::Alt(v) => Node::Alt(v.iter().map(|k| rename_refs(k, f)).collect()),
        Node::Repeat(k, min, max) => Node::Repeat(Box::new(rename_refs(k, f)), *min, *max),
        other => other.clone(),
    }
}

struct Parser<'a> {
    cur: Cursor<'a>,
    options: &'a Options,
    defs: Vec<(String, Node, usize)>,
    ignore: Vec<Node>,
    /// `%import common.NAME -> ALIAS`: (alias, name, line).
    imports: Vec<(String, String, usize)>,
    embeds: Vec<crate::Grammar>,
    warnings: Vec<Warning>,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str, options: &'a Options) -> Self {
        Self {
            cur: Cursor::new(src),
            options,
            defs: Vec::new(),
            ignore: Vec::new(),
            imports: Vec::new(),
            embeds: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Skips blanks and comments; newlines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.cur.peek() {
            match c {
                ' ' | '\t' => self.cur.pos += 1,
                '\r' | '\n' if newlines => self.cur.pos += 1,
                '#' => self.cur.skip_line(),
                '/' if self.cur.rest().starts_with("//") => self.cur.skip_line(),
                _ => return,
            }
        }
    }

    fn name(&mut self) -> Option<&'a str> {
        let start = self.cur.pos;
        if self
            .cur
            .peek()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        {
            while self
                .cur
                .peek()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                self.cur.pos += 1;
            }
        }
        (self.cur.pos > start).then(|| &self.cur.src[start..self.cur.pos])
    }

    /// The rest of the current line must be blank (or a comment).
    fn end_of_line(&mut self, what: &str) -> Result<(), GrammarError> {
        self.space(false);
        match self.cur.peek() {
            None | Some('\n' | '\r') => Ok(()),
            Some(c) => Err(err(self.cur.line(), format!("unexpected {c:?} in {what}"))),
        }
    }

    fn definitions(&mut self) -> Result<(), GrammarError> {
        loop {
            self.space(true);
            let line = self.cur.line();
            if self.cur.peek().is_none() {
                return Ok(());
            }
            if self.cur.eat("%") {
                let word = self.name().unwrap_or_default();
                self.space(false);
                match word {
                    "ignore" => {
                        let body = self.alternates(false, false)?;
                        self.ignore.push(body);
                        self.end_of_line("%ignore")?;
                    }
                    "import" => self.import(line)?,
                    other => {
                        return Err(err(
                            line,
                            format!(
                            "`%{other}` is not supported (only %ignore, %import common and %json)"
                        ),
                        ))
                    }
                }
                continue;
            }
            // Modifiers: `?rule` (inline) and `!rule` (keep tokens) shape trees only.
            if matches!(self.cur.peek(), Some('?' | '!')) {
                self.cur.pos += 1;
            }
            let name = self.name().ok_or_else(|| {
                err(
                    line,
                    format!(
                        "expected a rule or terminal name, found {:?}",
                        self.cur.rest().chars().take(20).collect::<String>()
                    ),
                )
            })?;
            if self.cur.peek() == Some('{') {
                return Err(err(
                    line,
                    format!(
                        "`{name}` is a template (`name{{params}}`); templates are not supported"
                    ),
                ));
            }
            // Priority `.N`.
            if self.cur.eat(".") {
                self.cur.eat("-");
                if self.cur.digits().is_empty() {
                    return Err(err(
                        line,
                        format!("expected a priority number after `{name}.`"),
                    ));
                }
            }
            self.space(false);
            if !self.cur.eat(":") {
                return Err(err(line, format!("expected `:` after `{name}`")));
            }
            self.space(false);
            let body = self.alternates(false, !is_terminal(name))?;
            self.end_of_line(&format!("`{name}`"))?;
            if self.defs.iter().any(|(n, _, _)| n == name) {
                return Err(err(line, format!("`{name}` is defined twice")));
            }
            self.defs.push((name.to_string(), body, line));
        }
    }

    /// `%import common.NAME [-> ALIAS]` or `%import common (A, B)`, after `%import`.
    fn import(&mut self, line: usize) -> Result<(), GrammarError> {
        let start = self.cur.pos;
        self.cur.skip_line();
        let text = self.cur.src[start..self.cur.pos]
            .split("//")
            .next()
            .unwrap_or("")
            .trim();
        let unsupported = || {
            err(
                line,
                format!("`%import {text}`: only Lark's `common` module can be imported (`%import common.WS`)"),
            )
        };
        let names: Vec<(String, String)> = if let Some(list) = text.strip_prefix("common") {
            let list = list.trim();
            if let Some(one) = list.strip_prefix('.') {
                match one.split_once("->") {
                    Some((n, a)) => vec![(a.trim().to_string(), n.trim().to_string())],
                    None => vec![(one.trim().to_string(), one.trim().to_string())],
                }
            } else if let Some(inner) = list.strip_prefix('(').and_then(|l| l.strip_suffix(')')) {
                inner
                    .split(',')
                    .map(|n| (n.trim().to_string(), n.trim().to_string()))
                    .collect()
            } else {
                return Err(unsupported());
            }
        } else {
            return Err(unsupported());
        };
        for (alias, name) in names {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(unsupported());
            }
            self.imports.push((alias, name, line));
        }
        Ok(())
    }

    /// Alternatives separated by `|`; outside parentheses a line starting with `|` continues
    /// them. `in_rule`: terminals here may be followed by ignored text.
    fn alternates(&mut self, nested: bool, in_rule: bool) -> Result<Node, GrammarError> {
        let mut alts = vec![self.sequence(nested, in_rule)?];
        loop {
            let save = self.cur.pos;
            self.space(true);
            if self.cur.eat("|") {
                self.space(nested);
                alts.push(self.sequence(nested, in_rule)?);
            } else {
                self.cur.pos = save;
                return Ok(Node::alt(alts));
            }
        }
    }

    fn sequence(&mut self, nested: bool, in_rule: bool) -> Result<Node, GrammarError> {
        let mut items: Vec<Node> = Vec::new();
        loop {
            self.space(nested);
            let line = self.cur.line();
            let ignorable = |n: Node| {
                if in_rule {
                    Node::Seq(vec![Node::Ref(IGNORE.into(), line), n])
                } else {
                    n
                }
            };
            let item = match self.cur.peek() {
                Some('"') => {
                    self.cur.pos += 1;
                    let lit = self.literal()?;
                    ignorable(lit)
                }
                Some('/') => {
                    self.cur.pos += 1;
                    let re = self.regex()?;
                    ignorable(re)
                }
                Some('(') => {
                    self.cur.pos += 1;
                    let inner = self.alternates(true, in_rule)?;
                    self.space(true);
                    if !self.cur.eat(")") {
                        return Err(err(self.cur.line(), "expected `)`"));
                    }
                    inner
                }
                Some('[') => {
                    self.cur.pos += 1;
                    let inner = self.alternates(true, in_rule)?;
                    self.space(true);
                    if !self.cur.eat("]") {
                        return Err(err(self.cur.line(), "expected `]`"));
                    }
                    Node::Repeat(Box::new(inner), 0, Some(1))
                }
                Some('%') if self.cur.rest().starts_with("%json") => {
                    self.cur.pos += "%json".len();
                    let json = self.json(line)?;
                    ignorable(json)
                }
                Some('<') => {
                    let token = self.cur.token().map_err(|m| err(line, m))?;
                    ignorable(Node::Expr(token))
                }
                Some('-') if self.cur.rest().starts_with("->") => {
                    // An alias names the tree node only.
                    self.cur.pos += 2;
                    self.space(false);
                    self.name()
                        .ok_or_else(|| err(line, "expected a name after `->`"))?;
                    self.space(nested);
                    break;
                }
                Some('?' | '*' | '+' | '~') => {
                    let Some(last) = items.pop() else {
                        return Err(err(line, "a repetition operator needs something before it"));
                    };
                    let (min, max) = match self.cur.bump() {
                        Some('?') => (0, Some(1)),
                        Some('*') => (0, None),
                        Some('+') => (1, None),
                        _ => self.tilde_bounds(line)?,
                    };
                    Node::Repeat(Box::new(last), min, max)
                }
                Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                    let save = self.cur.pos;
                    let name = self.name().unwrap_or_default();
                    // A name followed by `:` (or `.N:`) starts the next definition.
                    let after = self.cur.pos;
                    self.space(false);
                    if self.cur.peek() == Some(':') || self.cur.rest().starts_with('.') {
                        self.cur.pos = save;
                        break;
                    }
                    self.cur.pos = after;
                    let r = Node::Ref(name.to_string(), line);
                    if is_terminal(name) {
                        ignorable(r)
                    } else {
                        r
                    }
                }
                _ => break,
            };
            items.push(item);
        }
        Ok(Node::seq(items))
    }

    /// `n` or `m..n` after `~`.
    fn tilde_bounds(&mut self, line: usize) -> Result<(u32, Option<u32>), GrammarError> {
        self.space(false);
        let number = |p: &mut Self| {
            p.cur
                .digits()
                .parse::<u32>()
                .map_err(|_| err(line, "expected a count after `~` (`x ~ 3` or `x ~ 2..5`)"))
        };
        let min = number(self)?;
        let max = if self.cur.eat("..") {
            number(self)?
        } else {
            min
        };
        if max < min {
            return Err(err(
                line,
                format!("repetition ~ {min}..{max} has its maximum below its minimum"),
            ));
        }
        Ok((min, Some(max)))
    }

    /// A string literal after its opening quote, with an optional `i` flag or `.."z"` range.
    fn literal(&mut self) -> Result<Node, GrammarError> {
        let line = self.cur.line();
        let s = self.string_body(line)?;
        if self.cur.eat("..") {
            if !self.cur.eat("\"") {
                return Err(err(line, "expected a one-character string after `..`"));
            }
            let hi = self.string_body(line)?;
            let (mut a, mut b) = (s.chars(), hi.chars());
            return match (a.next(), a.next(), b.next(), b.next()) {
                (Some(lo), None, Some(hi), None) if lo <= hi => {
                    Ok(Node::Chars(CharRanges::new(vec![(lo, hi)])))
                }
                _ => Err(err(
                    line,
                    format!("range {s:?}..{hi:?} needs two single characters, the first not above the second"),
                )),
            };
        }
        if self.cur.rest().starts_with('i')
            && !self.cur.rest()[1..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            self.cur.pos += 1;
            return Ok(case_insensitive(&s));
        }
        Ok(Node::Literal(s))
    }

    /// The characters of a string literal up to its closing quote, Python escapes decoded.
    fn string_body(&mut self, line: usize) -> Result<String, GrammarError> {
        let mut s = String::new();
        loop {
            match self.cur.bump() {
                Some('"') => return Ok(s),
                None | Some('\n') => return Err(err(line, "unterminated string literal")),
                Some('\\') => {
                    let c = self
                        .cur
                        .bump()
                        .ok_or_else(|| err(line, "unterminated string literal"))?;
                    let mut hex = |n| self.cur.hex(n).map_err(|m| err(line, m));
                    match c {
                        'n' => s.push('\n'),
                        't' => s.push('\t'),
                        'r' => s.push('\r'),
                        'f' => s.push('\x0c'),
                        'v' => s.push('\x0b'),
                        'a' => s.push('\x07'),
                        'b' => s.push('\x08'),
                        '0' => s.push('\0'),
                        '\\' | '"' | '\'' => s.push(c),
                        'x' => s.push(hex(2)?),
                        'u' => s.push(hex(4)?),
                        'U' => s.push(hex(8)?),
                        // Python keeps an unknown escape as written.
                        other => {
                            s.push('\\');
                            s.push(other);
                        }
                    }
                }
                Some(c) => s.push(c),
            }
        }
    }

    /// A regex terminal after its opening `/`, with its flags.
    fn regex(&mut self) -> Result<Node, GrammarError> {
        let line = self.cur.line();
        let mut re = String::new();
        loop {
            match self.cur.bump() {
                Some('/') => break,
                None | Some('\n') => return Err(err(line, "unterminated regex (`/…/`)")),
                Some('\\') => match self.cur.bump() {
                    Some('/') => re.push('/'),
                    Some('\n') | None => return Err(err(line, "unterminated regex (`/…/`)")),
                    Some(c) => {
                        re.push('\\');
                        re.push(c);
                    }
                },
                Some(c) => re.push(c),
            }
        }
        let mut flags = String::new();
        while let Some(c) = self.cur.peek().filter(|c| c.is_ascii_alphabetic()) {
            match c {
                'i' | 'm' | 's' | 'x' => flags.push(c),
                'l' | 'u' => {}
                other => {
                    return Err(err(
                        line,
                        format!("unknown regex flag `{other}` (Lark's are i, m, s, l, u, x)"),
                    ))
                }
            }
            self.cur.pos += 1;
        }
        let full = if flags.is_empty() {
            re.clone()
        } else {
            format!("(?{flags}){re}")
        };
        let expr = regex_to_expr(&full).map_err(|e| {
            let reason = match e {
                GrammarError::InvalidRegex { reason, .. } => reason,
                other => other.to_string(),
            };
            err(line, format!("invalid regex /{re}/: {reason}"))
        })?;
        Ok(Node::Expr(expr))
    }

    /// `%json { schema }`: the schema parsed as JSON text and compiled.
    fn json(&mut self, line: usize) -> Result<Node, GrammarError> {
        self.space(true);
        let mut values =
            serde_json::Deserializer::from_str(self.cur.rest()).into_iter::<serde_json::Value>();
        let schema = match values.next() {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                return Err(err(
                    line,
                    format!("%json: the schema is not valid JSON: {e}"),
                ))
            }
            None => {
                return Err(err(
                    line,
                    "%json needs a schema after it (`%json { \"type\": \"object\" }`)",
                ))
            }
        };
        self.cur.pos += values.byte_offset();
        let compiled = compile_schema(&schema, self.options)
            .map_err(|e| err(line, format!("%json schema: {e}")))?;
        self.warnings.extend(compiled.warnings);
        self.embeds.push(compiled.grammar);
        Ok(Node::Embed(self.embeds.len() - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::matches;
    use crate::Grammar;

    fn lark(text: &str) -> Grammar {
        compile_lark(text, &Options::generation())
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .grammar
    }

    fn accepts(g: &Grammar, s: &str) -> bool {
        matches(&g.rule(g.start).expr, &g.rules, s.as_bytes())
    }

    #[test]
    fn rules_terminals_and_operators() {
        let g = lark(
            r#"
// a calculator, left-recursive as Lark users write it
?start: sum
?sum: sum "+" product   -> add
    | sum "-" product   -> sub
    | product
?product: product "*" atom | atom
?atom: NUMBER | "(" sum ")" | NAME
NAME: /[a-z_]\w*/
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
"#,
        );
        for ok in ["1", "1+2", " 1 + 2*x", "(a - 3.5e2) * b_1", "2*(3+4)"] {
            assert!(accepts(&g, ok), "{ok}");
        }
        // Ignored text after the last terminal is not accepted (see the module doc).
        for bad in ["", "1+", "+1", "(1", "1 2", "A", "1 "] {
            assert!(!accepts(&g, bad), "{bad}");
        }
        let g = lark("start: \"ab\"i [\"-\"] x ~ 2..3 y~2 \"a\"..\"c\"+\nx: \"x\"\ny: /q/i\n");
        assert!(accepts(&g, "aB-xxqQb") && accepts(&g, "ABxxxqqabc"));
        assert!(!accepts(&g, "abxqqa") && !accepts(&g, "abxxxxqqa") && !accepts(&g, "abxxqqd"));
    }

    #[test]
    fn common_imports_and_ignore() {
        let g = lark(
            "start: \"[\" [item (\",\" item)*] \"]\"\nitem: ESCAPED_STRING | SIGNED_NUMBER | CNAME\n%import common (ESCAPED_STRING, SIGNED_NUMBER, CNAME)\n%import common.WS -> SPACE\n%ignore SPACE\n%ignore /#[^\\n]*\\n/\n",
        );
        for ok in ["[]", " [ \"a\\\"b\" , -1.5e3,x_1 ]", "[1, # a comment\n 2]"] {
            assert!(accepts(&g, ok), "{ok}");
        }
        for bad in ["[\"a\"b\"]", "[1,]", "[1 2 3]x", "[\"a\n\"]"] {
            assert!(!accepts(&g, bad), "{bad}");
        }
    }

    #[test]
    fn json_embeds_are_schema_constrained() {
        let g = lark(
            r#"start: "Answer: " %json {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false} "\n" rest
rest: "done" | "again " %json {"enum": ["x", "y"]}
"#,
        );
        assert!(accepts(&g, "Answer: {\"n\": 3}\ndone"));
        assert!(accepts(&g, "Answer: {\"n\":-1}\nagain \"y\""));
        assert!(!accepts(&g, "Answer: {\"n\": 3.5}\ndone"));
        assert!(!accepts(&g, "Answer: {}\ndone"));
        assert!(!accepts(&g, "Answer: {\"n\": 1}\nagain \"z\""));
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("x: \"a\"", 1, "no `start` rule"),
            ("start: item", 1, "refers to `item`, which is not defined"),
            ("start: \"a\"\n\nstart: \"b\"", 3, "defined twice"),
            (
                "start: a\na: b \"x\" | \"y\"\nb: a",
                2,
                "left-recursive (a -> b -> a)",
            ),
            ("start: \"abc", 1, "unterminated string"),
            ("start: /a(/", 1, "invalid regex /a(/"),
            ("start: /a/q", 1, "unknown regex flag"),
            ("start: \"a\" ~ 3..1", 1, "maximum below its minimum"),
            ("start: \"a\" <[x2]>", 1, "a token id is a decimal number"),
            ("start: \"a\" < x", 1, "expected a token name"),
            ("start = \"a\"", 1, "expected `:`"),
            ("start: (\"a\"", 1, "expected `)`"),
            ("start: * \"a\"", 1, "needs something before it"),
            (
                "start: A\nA: b\nb: \"x\"",
                2,
                "terminals may use only terminals",
            ),
            (
                "start: X\n%import common.NOPE -> X",
                2,
                "no terminal `NOPE`",
            ),
            (
                "start: X\n%import .other.X",
                2,
                "only Lark's `common` module",
            ),
            (
                "start: %json {\"type\": \"strung\"}",
                1,
                "%json schema: invalid JSON Schema",
            ),
            ("start: %json {\"type\": ", 1, "not valid JSON"),
            ("%declare X\nstart: X", 1, "`%declare` is not supported"),
            ("start: x\n_sep{x}: x", 2, "template"),
        ];
        for (text, line, message) in cases {
            match compile_lark(text, &Options::generation()) {
                Err(GrammarError::Lark {
                    line: l,
                    message: m,
                }) => {
                    assert!(m.contains(message), "{text}: {m}");
                    assert_eq!(l, line, "{text}: {m}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
