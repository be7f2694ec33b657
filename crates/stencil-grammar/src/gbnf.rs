//! llama.cpp's GBNF grammars -> the grammar IR.
//!
//! The syntax of llama.cpp's `grammars/README.md`: rules `name ::= alternatives`, the start
//! rule `root`, literals `"…"`, character classes `[a-z]` / `[^…]`, `.` (any character),
//! grouping `( … )`, repetition `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, comments `#`, escapes
//! `\t \r \n \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH`. A rule ends at the end of its line, except
//! inside parentheses (or where the next line continues it with `|`). Characters are Unicode
//! scalar values written as UTF-8. Rules that are not part of a cycle are inlined; recursive
//! ones become rule calls. Left recursion (a rule reachable from its own start without reading
//! a character) is refused, naming the cycle; so are undefined rules, a missing `root`, and
//! llama.cpp's token references (`<[id]>`), which depend on one model's vocabulary.

use std::collections::HashMap;

use crate::error::GrammarError;
use crate::expr::{CharRanges, Expr, Grammar, Rule, RuleId};

/// A parsed element before rule references are resolved.
#[derive(Debug, Clone)]
enum Node {
    Literal(String),
    Chars(CharRanges),
    Ref(String, usize),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Repeat(Box<Node>, u32, Option<u32>),
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
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
    fn line(&self) -> usize {
        self.src[..self.pos].matches('\n').count() + 1
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    /// Skips blanks and comments; newlines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                _ => return,
            }
        }
    }

    fn name(&mut self) -> Option<&'a str> {
        let start = self.pos;
        while self.peek().is_some_and(is_word) {
            self.pos += 1;
        }
        (self.pos > start).then(|| &self.src[start..self.pos])
    }

    fn hex(&mut self, digits: usize) -> Result<char, GrammarError> {
        let line = self.line();
        let text = self.rest().get(..digits).unwrap_or("");
        let value = (text.len() == digits && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(text, 16).ok())
            .flatten()
            .ok_or_else(|| {
                err(
                    line,
                    format!("expected {digits} hex digits after the escape, found {text:?}"),
                )
            })?;
        self.pos += digits;
        char::from_u32(value).ok_or_else(|| {
            err(
                line,
                format!("\\u{{{value:X}}} is not a Unicode scalar value"),
            )
        })
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GrammarError> {
        let line = self.line();
        match self.bump() {
            None => Err(err(line, "unexpected end of grammar")),
            Some('\\') => match self.bump() {
                Some('x') => self.hex(2),
                Some('u') => self.hex(4),
                Some('U') => self.hex(8),
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
        let line = self.line();
        let mut s = String::new();
        loop {
            match self.peek() {
                Some('"') => {
                    self.pos += 1;
                    return Ok(Node::Literal(s));
                }
                None | Some('\n') => return Err(err(line, "unterminated string literal")),
                _ => s.push(self.char()?),
            }
        }
    }

    fn class(&mut self) -> Result<Node, GrammarError> {
        let line = self.line();
        let negated = self.rest().starts_with('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                Some(']') => {
                    self.pos += 1;
                    break;
                }
                None | Some('\n') => return Err(err(line, "unterminated character class")),
                _ => {
                    let lo = self.char()?;
                    let hi = if self.rest().starts_with('-') && !self.rest().starts_with("-]") {
                        self.pos += 1;
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
        let line = self.line();
        let number = |p: &mut Self| {
            p.space(false);
            let start = p.pos;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.pos += 1;
            }
            let text = &p.src[start..p.pos];
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
        let max = match self.bump() {
            Some('}') => Some(min),
            Some(',') => {
                let max = number(self)?;
                if self.bump() != Some('}') {
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

    /// A sequence of elements; `nested` allows newlines (inside parentheses).
    fn sequence(&mut self, nested: bool) -> Result<Node, GrammarError> {
        let mut items: Vec<Node> = Vec::new();
        loop {
            let line = self.line();
            let item = match self.peek() {
                Some('"') => {
                    self.pos += 1;
                    self.literal()?
                }
                Some('[') => {
                    self.pos += 1;
                    self.class()?
                }
                Some('.') => {
                    self.pos += 1;
                    Node::Chars(CharRanges::all())
                }
                Some('(') => {
                    self.pos += 1;
                    self.space(true);
                    let inner = self.alternates(true)?;
                    if self.bump() != Some(')') {
                        return Err(err(line, "expected `)`"));
                    }
                    inner
                }
                Some('<') | Some('!') => {
                    return Err(err(line, "token references (`<[id]>`, `!<[id]>`) are not supported: they name one model's token ids; write the text instead"))
                }
                Some('*' | '+' | '?' | '{') => {
                    let Some(last) = items.pop() else {
                        return Err(err(line, "a repetition operator needs something before it"));
                    };
                    let (min, max) = match self.bump() {
                        Some('*') => (0, None),
                        Some('+') => (1, None),
                        Some('?') => (0, Some(1)),
                        _ => self.bounds()?,
                    };
                    Node::Repeat(Box::new(last), min, max)
                }
                Some(c) if is_word(c) => {
                    let save = self.pos;
                    let name = self.name().unwrap_or_default();
                    // A name followed by `::=` starts the next rule.
                    let after = self.pos;
                    self.space(true);
                    if self.rest().starts_with("::=") {
                        self.pos = save;
                        break;
                    }
                    self.pos = after;
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
            let save = self.pos;
            // Outside parentheses a `|` may continue the rule on the next line.
            self.space(true);
            if self.peek() == Some('|') {
                self.pos += 1;
                self.space(true);
                alts.push(self.sequence(nested)?);
            } else {
                self.pos = save;
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
            if self.peek().is_none() {
                return Ok(out);
            }
            let line = self.line();
            let name = self.name().ok_or_else(|| {
                err(
                    line,
                    format!(
                        "expected a rule name, found {:?}",
                        self.rest().chars().take(20).collect::<String>()
                    ),
                )
            })?;
            self.space(false);
            if !self.rest().starts_with("::=") {
                return Err(err(
                    line,
                    format!("expected `::=` after rule name `{name}`"),
                ));
            }
            self.pos += 3;
            self.space(true);
            let body = self.alternates(false)?;
            self.space(false);
            match self.peek() {
                None | Some('\n' | '\r') => {}
                Some(c) => {
                    return Err(err(
                        self.line(),
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
    let rules = Parser { src: text, pos: 0 }.rules()?;
    let index: HashMap<&str, usize> = rules
        .iter()
        .enumerate()
        .map(|(i, (n, _, _))| (n.as_str(), i))
        .collect();
    let root = *index.get("root").ok_or_else(|| {
        err(
            1,
            "the grammar has no `root` rule (the rule the whole output must match)",
        )
    })?;
    // References, checked.
    let mut refs: Vec<Vec<usize>> = vec![Vec::new(); rules.len()];
    for (i, (_, body, _)) in rules.iter().enumerate() {
        visit_refs(body, &mut |name, line| match index.get(name) {
            Some(&j) => {
                refs[i].push(j);
                Ok(())
            }
            None => Err(err(
                line,
                format!(
                    "rule `{}` refers to `{name}`, which is not defined",
                    rules[i].0
                ),
            )),
        })?;
    }
    // Nullable rules (fixpoint), then left recursion: a rule that calls itself before reading.
    let mut nullable = vec![false; rules.len()];
    loop {
        let mut changed = false;
        for (i, (_, body, _)) in rules.iter().enumerate() {
            if !nullable[i] && node_nullable(body, &index, &nullable) {
                nullable[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut first: Vec<Vec<usize>> = vec![Vec::new(); rules.len()];
    for (i, (_, body, _)) in rules.iter().enumerate() {
        first_refs(body, &index, &nullable, &mut first[i]);
    }
    for start in 0..rules.len() {
        if let Some(cycle) = find_cycle(start, &first) {
            let names: Vec<&str> = cycle.iter().map(|&i| rules[i].0.as_str()).collect();
            return Err(err(
                rules[start].2,
                format!("rule `{}` is left-recursive ({}): it can reach itself before reading a character; rewrite it with repetition, e.g. `list ::= item (\",\" item)*`", rules[start].0, names.join(" -> ")),
            ));
        }
    }
    // Rules in a cycle stay rules (called); the others are inlined where used.
    let recursive: Vec<bool> = (0..rules.len()).map(|i| reaches(i, i, &refs)).collect();
    let mut ids: Vec<Option<RuleId>> = vec![None; rules.len()];
    let mut order: Vec<usize> = vec![root];
    order.extend((0..rules.len()).filter(|&i| i != root && recursive[i]));
    for (k, &i) in order.iter().enumerate() {
        ids[i] = Some(RuleId(k as u32));
    }
    let mut shared: Vec<Option<Expr>> = vec![None; rules.len()];
    let mut out = Vec::new();
    for &i in &order {
        let expr = lower(
            &rules[i].1,
            &index,
            &rules,
            &ids,
            &mut shared,
            &mut Vec::new(),
        )?;
        out.push(Rule {
            name: rules[i].0.clone(),
            expr,
        });
    }
    Ok(Grammar {
        rules: out,
        start: RuleId(0),
    })
}

fn visit_refs(
    n: &Node,
    f: &mut impl FnMut(&str, usize) -> Result<(), GrammarError>,
) -> Result<(), GrammarError> {
    match n {
        Node::Ref(name, line) => f(name, *line),
        Node::Seq(v) | Node::Alt(v) => v.iter().try_for_each(|k| visit_refs(k, f)),
        Node::Repeat(k, _, _) => visit_refs(k, f),
        Node::Literal(_) | Node::Chars(_) => Ok(()),
    }
}

fn node_nullable(n: &Node, index: &HashMap<&str, usize>, nullable: &[bool]) -> bool {
    match n {
        Node::Literal(s) => s.is_empty(),
        Node::Chars(_) => false,
        Node::Ref(name, _) => nullable[index[name.as_str()]],
        Node::Seq(v) => v.iter().all(|k| node_nullable(k, index, nullable)),
        Node::Alt(v) => v.iter().any(|k| node_nullable(k, index, nullable)),
        Node::Repeat(k, min, _) => *min == 0 || node_nullable(k, index, nullable),
    }
}

/// Rules `n` may call before reading a character.
fn first_refs(n: &Node, index: &HashMap<&str, usize>, nullable: &[bool], out: &mut Vec<usize>) {
    match n {
        Node::Ref(name, _) => out.push(index[name.as_str()]),
        Node::Seq(v) => {
            for k in v {
                first_refs(k, index, nullable, out);
                if !node_nullable(k, index, nullable) {
                    break;
                }
            }
        }
        Node::Alt(v) => v.iter().for_each(|k| first_refs(k, index, nullable, out)),
        Node::Repeat(k, _, _) => first_refs(k, index, nullable, out),
        Node::Literal(_) | Node::Chars(_) => {}
    }
}

/// A path `start -> … -> start` in `edges`, if any.
fn find_cycle(start: usize, edges: &[Vec<usize>]) -> Option<Vec<usize>> {
    let mut parent: Vec<Option<usize>> = vec![None; edges.len()];
    let mut stack = vec![start];
    let mut seen = vec![false; edges.len()];
    while let Some(i) = stack.pop() {
        for &j in &edges[i] {
            if j == start {
                // i, parent(i), …, start; reversed, closed with start again.
                let mut path = vec![i];
                let mut k = i;
                while let Some(p) = parent[k] {
                    path.push(p);
                    k = p;
                }
                if *path.last().expect("non-empty") != start {
                    path.push(start);
                }
                path.reverse();
                path.push(start);
                return Some(path);
            }
            if !seen[j] {
                seen[j] = true;
                parent[j] = Some(i);
                stack.push(j);
            }
        }
    }
    None
}

fn reaches(from: usize, to: usize, edges: &[Vec<usize>]) -> bool {
    let mut seen = vec![false; edges.len()];
    let mut stack = edges[from].clone();
    while let Some(i) = stack.pop() {
        if i == to {
            return true;
        }
        if !std::mem::replace(&mut seen[i], true) {
            stack.extend(&edges[i]);
        }
    }
    false
}

fn lower(
    n: &Node,
    index: &HashMap<&str, usize>,
    rules: &[(String, Node, usize)],
    ids: &[Option<RuleId>],
    shared: &mut Vec<Option<Expr>>,
    inlining: &mut Vec<usize>,
) -> Result<Expr, GrammarError> {
    Ok(match n {
        Node::Literal(s) => Expr::literal(s.as_bytes()),
        Node::Chars(c) => Expr::Chars(c.clone()),
        Node::Ref(name, _) => {
            let i = index[name.as_str()];
            match ids[i] {
                Some(id) => Expr::Call(id),
                None => {
                    if let Some(e) = &shared[i] {
                        return Ok(e.clone());
                    }
                    debug_assert!(
                        !inlining.contains(&i),
                        "a non-recursive rule is inlined in itself"
                    );
                    inlining.push(i);
                    let body = lower(&rules[i].1, index, rules, ids, shared, inlining)?;
                    inlining.pop();
                    let e = Expr::shared(body);
                    shared[i] = Some(e.clone());
                    e
                }
            }
        }
        Node::Seq(v) => Expr::Concat(
            v.iter()
                .map(|k| lower(k, index, rules, ids, shared, inlining))
                .collect::<Result<_, _>>()?,
        ),
        Node::Alt(v) => Expr::Alt(
            v.iter()
                .map(|k| lower(k, index, rules, ids, shared, inlining))
                .collect::<Result<_, _>>()?,
        ),
        Node::Repeat(k, min, max) => Expr::Repeat {
            expr: Box::new(lower(k, index, rules, ids, shared, inlining)?),
            min: *min,
            max: *max,
        },
    })
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
    fn errors_name_the_line_and_the_rule() {
        let cases = [
            ("item ::= \"a\"", 1, "no `root` rule"),
            ("root ::= item", 1, "refers to `item`, which is not defined"),
            ("root ::= \"a\"\n\nroot ::= \"b\"", 3, "defined twice"),
            (
                "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"",
                2,
                "`expr` is left-recursive (expr -> expr)",
            ),
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
            ("root ::= <[1000]>", 1, "token references"),
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
