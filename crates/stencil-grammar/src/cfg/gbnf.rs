//! llama.cpp's GBNF grammars -> the grammar IR.
//!
//! The syntax of llama.cpp's `grammars/README.md`: rules `name ::= alternatives`, the start
//! rule `root`, literals `"…"`, character classes `[a-z]` / `[^…]`, `.` (any character),
//! grouping `( … )`, repetition `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, comments `#`, escapes
//! `\t \r \n \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH`. A rule ends at the end of its line, except
//! inside parentheses (or where the next line continues it with `|`). Characters are Unicode
//! scalar values written as UTF-8. Rules that are not part of a cycle are inlined; recursive
//! ones become rule calls. Direct left recursion (`expr ::= expr "+" term | term`) is rewritten
//! as repetition; left recursion through other rules is refused, naming the cycle; so are
//! undefined rules and a missing `root`.
//!
//! Tokens: `<|im_end|>` (by text) and `<[42]>` (by id) name one token of the model, checked
//! against its vocabulary when the automaton is built (a control token is the token itself;
//! an ordinary token stands for its text). `!<t>*` and `!<t>+` are text in which `t` does not
//! occur, as in llama.cpp's `thinking ::= !</think>*`; a single `!<t>` (exactly one token) is
//! refused.

use super::{Cursor, Node, RuleSet};
use crate::error::GrammarError;
use crate::expr::{CharRanges, Expr, Grammar};

struct Parser<'a> {
    cur: Cursor<'a>,
}

fn err(line: usize, message: impl Into<String>) -> GrammarError {
    GrammarError::Gbnf {
        line,
        message: message.into(),
    }
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

impl<'a> Parser<'a> {
    /// Skips blanks and comments; newlines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.cur.peek() {
            match c {
                ' ' | '\t' => self.cur.pos += 1,
                '\r' | '\n' if newlines => self.cur.pos += 1,
                '#' => self.cur.skip_line(),
                _ => return,
            }
        }
    }

    fn name(&mut self) -> Option<&'a str> {
        let start = self.cur.pos;
        while self.cur.peek().is_some_and(is_word) {
            self.cur.pos += 1;
        }
        (self.cur.pos > start).then(|| &self.cur.src[start..self.cur.pos])
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GrammarError> {
        let line = self.cur.line();
        match self.cur.bump() {
            None => Err(err(line, "unexpected end of grammar")),
            Some('\\') => match self.cur.bump() {
                Some('x') => self.cur.hex(2).map_err(|m| err(line, m)),
                Some('u') => self.cur.hex(4).map_err(|m| err(line, m)),
                Some('U') => self.cur.hex(8).map_err(|m| err(line, m)),
                Some('t') => Ok('\t'),
                Some('r') => Ok('\r'),
                Some('n') => Ok('\n'),
                Some(c @ ('\\' | '"' | '[' | ']' | '-' | '^' | '/')) => Ok(c),
                Some(c) => Err(err(line, format!("unknown escape `\\{c}`"))),
                None => Err(err(line, "unexpected end of grammar after `\\`")),
            },
            Some(c) => Ok(c),
        }
    }

    fn literal(&mut self) -> Result<Node, GrammarError> {
        let line = self.cur.line();
        let mut s = String::new();
        loop {
            match self.cur.peek() {
                Some('"') => {
                    self.cur.pos += 1;
                    return Ok(Node::Literal(s));
                }
                None | Some('\n') => return Err(err(line, "unterminated string literal")),
                _ => s.push(self.char()?),
            }
        }
    }

    fn class(&mut self) -> Result<Node, GrammarError> {
        let line = self.cur.line();
        let negated = self.cur.rest().starts_with('^');
        if negated {
            self.cur.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.cur.peek() {
                Some(']') => {
                    self.cur.pos += 1;
                    break;
                }
                None | Some('\n') => return Err(err(line, "unterminated character class")),
                _ => {
                    let lo = self.char()?;
                    let hi =
                        if self.cur.rest().starts_with('-') && !self.cur.rest().starts_with("-]") {
                            self.cur.pos += 1;
                            self.char()?
                        } else {
                            lo
                        };
                    if hi < lo {
                        return Err(err(
                            line,
                            format!("character range {lo:?}-{hi:?} is reversed"),
                        ));
                    }
                    ranges.push((lo, hi));
                }
            }
        }
        let set = CharRanges::new(ranges);
        Ok(Node::Chars(if negated { set.complement() } else { set }))
    }

    /// `{m}`, `{m,}` or `{m,n}` after `{`.
    fn bounds(&mut self) -> Result<(u32, Option<u32>), GrammarError> {
        let line = self.cur.line();
        let number = |p: &mut Self| {
            p.space(false);
            let text = p.cur.digits();
            p.space(false);
            match text {
                "" => Ok(None),
                t => t
                    .parse::<u32>()
                    .map(Some)
                    .map_err(|_| err(line, format!("repetition count `{t}` is too large"))),
            }
        };
        let min = number(self)?.ok_or_else(|| err(line, "expected a number after `{`"))?;
        let max = match self.cur.bump() {
            Some('}') => Some(min),
            Some(',') => {
                let max = number(self)?;
                if self.cur.bump() != Some('}') {
                    return Err(err(line, "expected `}` to close the repetition"));
                }
                max
            }
            _ => return Err(err(line, "expected `}` or `,` in the repetition")),
        };
        if max.is_some_and(|m| m < min) {
            return Err(err(
                line,
                format!(
                    "repetition {{{min},{}}} has its maximum below its minimum",
                    max.unwrap_or(0)
                ),
            ));
        }
        Ok((min, max))
    }

    /// After `!`: `<t>*` or `<t>+`, tokens other than `t`, as any text in which `t`'s text does
    /// not occur (non-empty for `+`). A byte-level automaton cannot count tokens, so `!<t>`
    /// without `*` or `+` (exactly one token) is refused. Other control tokens are not
    /// allowed in that text: a subset of llama.cpp's language, never more.
    fn tokens_except(&mut self, line: usize) -> Result<Node, GrammarError> {
        if self.cur.peek() != Some('<') {
            return Err(err(
                line,
                "expected a token after `!`, like `!<[42]>` or `!</think>`",
            ));
        }
        let name = self.cur.token_name().map_err(|m| err(line, m))?;
        if name.starts_with("<[") {
            return Err(err(line, format!("`!{name}` excludes a token by id, whose text depends on the model; name it by its text, like `!</think>*`")));
        }
        let min = match self.cur.bump() {
            Some('*') => 0,
            Some('+') => 1,
            _ => return Err(err(line, format!("`!{name}` (any one token but `{name}`) is supported only repeated, as `!{name}*` or `!{name}+`: a byte-level automaton cannot tell one token from several"))),
        };
        let text = Expr::text_without_any(&[name]);
        Ok(Node::Expr(if min == 0 {
            text
        } else {
            Expr::and(vec![
                text,
                Expr::repeat(Expr::Bytes(vec![(0, 255)]), 1, None),
            ])
        }))
    }

    /// A sequence of elements; `nested` allows newlines (inside parentheses).
    fn sequence(&mut self, nested: bool) -> Result<Node, GrammarError> {
        let mut items: Vec<Node> = Vec::new();
        loop {
            let line = self.cur.line();
            let item = match self.cur.peek() {
                Some('"') => {
                    self.cur.pos += 1;
                    self.literal()?
                }
                Some('[') => {
                    self.cur.pos += 1;
                    self.class()?
                }
                Some('.') => {
                    self.cur.pos += 1;
                    Node::Chars(CharRanges::all())
                }
                Some('(') => {
                    self.cur.pos += 1;
                    self.space(true);
                    let inner = self.alternates(true)?;
                    if self.cur.bump() != Some(')') {
                        return Err(err(line, "expected `)`"));
                    }
                    inner
                }
                Some('<') => Node::Expr(self.cur.token().map_err(|m| err(line, m))?),
                Some('!') => {
                    self.cur.pos += 1;
                    self.tokens_except(line)?
                }
                Some('*' | '+' | '?' | '{') => {
                    let Some(last) = items.pop() else {
                        return Err(err(line, "a repetition operator needs something before it"));
                    };
                    let (min, max) = match self.cur.bump() {
                        Some('*') => (0, None),
                        Some('+') => (1, None),
                        Some('?') => (0, Some(1)),
                        _ => self.bounds()?,
                    };
                    Node::Repeat(Box::new(last), min, max)
                }
                Some(c) if is_word(c) => {
                    let save = self.cur.pos;
                    let name = self.name().unwrap_or_default();
                    // A name followed by `::=` starts the next rule.
                    let after = self.cur.pos;
                    self.space(true);
                    if self.cur.rest().starts_with("::=") {
                        self.cur.pos = save;
                        break;
                    }
                    self.cur.pos = after;
                    Node::Ref(name.to_string(), line)
                }
                _ => break,
            };
            items.push(item);
            self.space(nested);
        }
        Ok(if items.len() == 1 {
            items.pop().expect("one item")
        } else {
            Node::Seq(items)
        })
    }

    fn alternates(&mut self, nested: bool) -> Result<Node, GrammarError> {
        let mut alts = vec![self.sequence(nested)?];
        loop {
            let save = self.cur.pos;
            // Outside parentheses a `|` may continue the rule on the next line.
            self.space(true);
            if self.cur.peek() == Some('|') {
                self.cur.pos += 1;
                self.space(true);
                alts.push(self.sequence(nested)?);
            } else {
                self.cur.pos = save;
                break;
            }
        }
        Ok(if alts.len() == 1 {
            alts.pop().expect("one alternative")
        } else {
            Node::Alt(alts)
        })
    }

    fn rules(&mut self) -> Result<Vec<(String, Node, usize)>, GrammarError> {
        let mut out: Vec<(String, Node, usize)> = Vec::new();
        loop {
            self.space(true);
            if self.cur.peek().is_none() {
                return Ok(out);
            }
            let line = self.cur.line();
            let name = self.name().ok_or_else(|| {
                err(
                    line,
                    format!(
                        "expected a rule name, found {:?}",
                        self.cur.rest().chars().take(20).collect::<String>()
                    ),
                )
            })?;
            self.space(false);
            if !self.cur.rest().starts_with("::=") {
                return Err(err(
                    line,
                    format!("expected `::=` after rule name `{name}`"),
                ));
            }
            self.cur.pos += 3;
            self.space(true);
            let body = self.alternates(false)?;
            self.space(false);
            match self.cur.peek() {
                None | Some('\n' | '\r') => {}
                Some(c) => {
                    return Err(err(
                        self.cur.line(),
                        format!("unexpected {c:?} in rule `{name}`"),
                    ))
                }
            }
            if out.iter().any(|(n, _, _)| n == name) {
                return Err(err(line, format!("rule `{name}` is defined twice")));
            }
            out.push((name.to_string(), body, line));
        }
    }
}

/// Compiles GBNF text; the output must match rule `root`.
pub fn compile_gbnf(text: &str) -> Result<Grammar, GrammarError> {
    let rules = Parser {
        cur: Cursor::new(text),
    }
    .rules()?;
    RuleSet {
        rules,
        embeds: Vec::new(),
        error: |line, message| err(line, message),
    }
    .lower("root")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::matches;

    fn accepts(g: &Grammar, s: &str) -> bool {
        matches(&g.rule(g.start).expr, &g.rules, s.as_bytes())
    }

    #[test]
    fn llama_cpp_syntax() {
        let g = compile_gbnf(
            r#"
# arithmetic, from llama.cpp's grammars/ folder
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
"#,
        )
        .unwrap();
        assert!(accepts(&g, "1+2= 3\n"));
        assert!(accepts(&g, "(a*b)-c= x1\n"));
        assert!(!accepts(&g, "1+= 3\n"));
        // Only the recursive rules stay rules: root, expr, term.
        assert_eq!(g.rules.len(), 3);

        let g = compile_gbnf(
            "root ::= [^\"\\\\\\x7F\\x00-\\x1F]{2,3} \"\\u00e9\" . item?\nitem ::= \"a\"\n    | \"b\" # continued with |\n",
        )
        .unwrap();
        assert!(accepts(&g, "xyé世"));
        assert!(accepts(&g, "xyzé\nb"));
        assert!(!accepts(&g, "xé!"));
        assert!(!accepts(&g, "x\"yé!"));
        let g = compile_gbnf("root ::= ws\nws ::= | \" \" | \"\\n\" [ \\t]{0,20}").unwrap();
        assert!(accepts(&g, "") && accepts(&g, " ") && accepts(&g, "\n\t\t"));
    }

    #[test]
    fn tokens_by_name_by_id_and_excluded() {
        // llama.cpp's reasoning example: the control tokens, any text between them.
        let g = compile_gbnf("root ::= <think> thinking </think> \"ok\"\nthinking ::= !</think>*")
            .unwrap();
        let spell = |parts: &[&str]| -> Vec<u8> {
            parts
                .iter()
                .flat_map(|p| match p.starts_with('<') {
                    true => crate::expr::special_token_bytes(p),
                    false => p.as_bytes().to_vec(),
                })
                .collect()
        };
        let accepts_bytes = |b: &[u8]| matches(&g.rule(g.start).expr, &g.rules, b);
        assert!(accepts_bytes(&spell(&[
            "<think>",
            "hmm, fine",
            "</think>",
            "ok"
        ])));
        assert!(accepts_bytes(&spell(&["<think>", "</think>", "ok"])));
        // Neither the end token nor its text inside the thinking; never the text for a token.
        assert!(!accepts_bytes(&spell(&[
            "<think>",
            "a</think>b",
            "</think>",
            "ok"
        ])));
        assert!(!accepts_bytes(&spell(&[
            "<think>", "a", "</think>", "b", "</think>", "ok"
        ])));
        assert!(!accepts(&g, "<think>a</think>ok"));
        let g = compile_gbnf("root ::= \"a\" <[42]> !<x>+").unwrap();
        let spelled = [
            b"a".as_slice(),
            &crate::expr::special_token_bytes("<[42]>"),
            b"y",
        ]
        .concat();
        assert!(matches(&g.rule(g.start).expr, &g.rules, &spelled));
        let empty = [b"a".as_slice(), &crate::expr::special_token_bytes("<[42]>")].concat();
        assert!(!matches(&g.rule(g.start).expr, &g.rules, &empty));
    }

    #[test]
    fn direct_left_recursion_is_repetition() {
        let g = compile_gbnf(
            "root ::= expr\nexpr ::= expr \"+\" num | expr \"-\" num | num\nnum ::= [0-9]+",
        )
        .unwrap();
        for ok in ["1", "1+2", "10-2+33"] {
            assert!(accepts(&g, ok), "{ok}");
        }
        for bad in ["", "+1", "1+", "1+-2"] {
            assert!(!accepts(&g, bad), "{bad}");
        }
    }

    #[test]
    fn errors_name_the_line_and_the_rule() {
        let cases = [
            ("item ::= \"a\"", 1, "no `root` rule"),
            ("root ::= item", 1, "refers to `item`, which is not defined"),
            ("root ::= \"a\"\n\nroot ::= \"b\"", 3, "defined twice"),
            (
                "root ::= a\na ::= ws b\nb ::= a \"x\" | \"y\"\nws ::= \" \"?",
                2,
                "left-recursive (a -> b -> a)",
            ),
            ("root ::= \"abc", 1, "unterminated string"),
            ("root ::= [a-b", 1, "unterminated character class"),
            ("root ::= [a-", 1, "unexpected end"),
            ("root ::= \"\\q\"", 1, "unknown escape"),
            ("root ::= \"a\"{3,1}", 1, "maximum below its minimum"),
            ("root ::= <[1x]>", 1, "a token id is a decimal number"),
            ("root ::= \"a\" !<x>", 1, "supported only repeated"),
            ("root ::= !\"x\"*", 1, "expected a token after `!`"),
            ("root ::= !<[7]>*", 1, "excludes a token by id"),
            ("root = \"a\"", 1, "expected `::=`"),
            ("root ::= (\"a\"", 1, "expected `)`"),
            ("root ::= * \"a\"", 1, "needs something before it"),
        ];
        for (text, line, message) in cases {
            match compile_gbnf(text) {
                Err(GrammarError::Gbnf {
                    line: l,
                    message: m,
                }) => {
                    assert_eq!(l, line, "{text}: {m}");
                    assert!(m.contains(message), "{text}: {m}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
