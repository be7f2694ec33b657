//! Context-free grammars written as text (llama.cpp's GBNF, Lark) -> the grammar IR.
//!
//! Each syntax has its own parser ([`gbnf`], [`lark`]) producing the same [`Node`] trees; one
//! [`RuleSet::lower`] then resolves names, removes direct left recursion, refuses what is left
//! of it (naming the cycle), inlines the rules that are not part of a cycle and keeps the
//! recursive ones as rules.

pub mod gbnf;
pub mod lark;

use std::collections::HashMap;

use crate::error::GrammarError;
use crate::expr::{CharRanges, Expr, Grammar, Rule, RuleId};

/// A parsed element before rule references are resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Literal(String),
    Chars(CharRanges),
    /// A reference to a rule by name, with the line it is written on.
    Ref(String, usize),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Repeat(Box<Node>, u32, Option<u32>),
    /// An expression compiled already (a regex terminal); calls no rule.
    Expr(Expr),
    /// The start of the `k`-th grammar of [`RuleSet::embeds`] (a JSON Schema value).
    Embed(usize),
}

impl Node {
    fn seq(mut items: Vec<Node>) -> Node {
        if items.len() == 1 {
            items.pop().expect("one item")
        } else {
            Node::Seq(items)
        }
    }

    fn alt(mut items: Vec<Node>) -> Node {
        if items.len() == 1 {
            items.pop().expect("one item")
        } else {
            Node::Alt(items)
        }
    }
}

/// A position in a grammar's text, with what both parsers read it by: characters, fixed
/// strings, digit runs, hex escapes and line numbers (found by binary search over the line
/// starts, so that a long grammar is not rescanned per element).
pub(crate) struct Cursor<'a> {
    pub src: &'a str,
    pub pos: usize,
    line_ends: Vec<usize>,
}

impl<'a> Cursor<'a> {
    pub fn new(src: &'a str) -> Self {
        Self {
            src,
            pos: 0,
            line_ends: src.match_indices('\n').map(|(i, _)| i).collect(),
        }
    }

    /// The 1-based line of the current position.
    pub fn line(&self) -> usize {
        self.line_ends.partition_point(|&nl| nl < self.pos) + 1
    }

    pub fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    pub fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    pub fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Steps over `s` if the text continues with it.
    pub fn eat(&mut self, s: &str) -> bool {
        let yes = self.rest().starts_with(s);
        if yes {
            self.pos += s.len();
        }
        yes
    }

    /// Steps to the end of the line (not over its newline).
    pub fn skip_line(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    /// The ASCII digits here (possibly none), stepped over.
    pub fn digits(&mut self) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        &self.src[start..self.pos]
    }

    /// A token named here by its text or id, `<|im_end|>` or `<[42]>` (llguidance's and
    /// llama.cpp's syntax), stepped over; its name with the angle brackets.
    pub fn token_name(&mut self) -> Result<&'a str, String> {
        let rest = self.rest();
        let end = rest
            .find('>')
            .filter(|&e| e > 1 && !rest[..e].contains(char::is_whitespace))
            .ok_or("expected a token name like `<|im_end|>` or a token id like `<[42]>`")?;
        let name = &rest[..=end];
        if let Some(id) = name.strip_prefix("<[").and_then(|r| r.strip_suffix("]>")) {
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "`{name}`: a token id is a decimal number, like `<[42]>`"
                ));
            }
        }
        self.pos += name.len();
        Ok(name)
    }

    /// A token named here ([`Cursor::token_name`]): the token itself, resolved against the
    /// vocabulary when the automaton is built (`Grammar::resolve_token_names`).
    pub fn token(&mut self) -> Result<Expr, String> {
        let name = self.token_name()?;
        Ok(Expr::Literal(crate::expr::special_token_bytes(name)))
    }

    /// The character of the `digits` hex digits here (after `\x`, `\u`, `\U`), stepped over;
    /// the error says what is wrong.
    pub fn hex(&mut self, digits: usize) -> Result<char, String> {
        let text = self.rest().get(..digits).unwrap_or("");
        let value = (text.len() == digits && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(text, 16).ok())
            .flatten()
            .ok_or_else(|| {
                format!("expected {digits} hex digits after the escape, found {text:?}")
            })?;
        self.pos += digits;
        char::from_u32(value)
            .ok_or_else(|| format!("\\u{{{value:X}}} is not a Unicode scalar value"))
    }
}

/// Parsed rules (name, body, line of the definition) and the grammars they embed.
pub(crate) struct RuleSet {
    pub rules: Vec<(String, Node, usize)>,
    /// Grammars compiled separately (`%json` schemas), called by [`Node::Embed`].
    pub embeds: Vec<Grammar>,
    /// Makes this syntax's error from a line and a message.
    pub error: fn(usize, String) -> GrammarError,
}

impl RuleSet {
    /// The grammar whose output must match rule `start`.
    pub fn lower(mut self, start: &str) -> Result<Grammar, GrammarError> {
        let err = self.error;
        let index: HashMap<String, usize> = self
            .rules
            .iter()
            .enumerate()
            .map(|(i, (n, _, _))| (n.clone(), i))
            .collect();
        let root = *index.get(start).ok_or_else(|| {
            err(
                1,
                format!("the grammar has no `{start}` rule (the rule the whole output must match)"),
            )
        })?;
        // References, checked.
        let mut refs: Vec<Vec<usize>> = vec![Vec::new(); self.rules.len()];
        for (i, (_, body, _)) in self.rules.iter().enumerate() {
            visit_refs(body, &mut |name, line| match index.get(name) {
                Some(&j) => {
                    refs[i].push(j);
                    Ok(())
                }
                None => Err(err(
                    line,
                    format!(
                        "rule `{}` refers to `{name}`, which is not defined",
                        self.rules[i].0
                    ),
                )),
            })?;
        }
        for (name, body, _) in &mut self.rules {
            *body = without_direct_left_recursion(name, std::mem::replace(body, Node::Seq(vec![])));
        }
        let rules = &self.rules;
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
        // Embedded grammars follow the rules, in order.
        let mut embed_starts = Vec::new();
        let mut next = order.len() as u32;
        for g in &self.embeds {
            embed_starts.push(RuleId(next + g.start.0));
            next += g.rules.len() as u32;
        }
        let mut cx = Lowering {
            index: &index,
            rules,
            ids: &ids,
            embed_starts: &embed_starts,
            shared: vec![None; rules.len()],
        };
        let mut out = Vec::new();
        for &i in &order {
            let expr = cx.lower(&rules[i].1)?;
            out.push(Rule {
                name: rules[i].0.clone(),
                expr,
            });
        }
        let mut grammar = Grammar {
            rules: out,
            start: RuleId(0),
            distinct: Vec::new(),
        };
        for (g, want) in self.embeds.into_iter().zip(embed_starts) {
            let got = grammar.embed(g);
            debug_assert_eq!(got, want, "embedded grammars are numbered in order");
        }
        Ok(grammar)
    }
}

/// `A: A x | A y | b | c` becomes `A: (b | c) (x | y)*`: the same language, read left to
/// right. Only alternatives that start with `A` itself; left recursion through other rules is
/// refused later, naming the cycle.
fn without_direct_left_recursion(name: &str, body: Node) -> Node {
    let alts = match body {
        Node::Alt(v) => v,
        other => vec![other],
    };
    let is_self = |n: &Node| matches!(n, Node::Ref(r, _) if r == name);
    let (mut tails, mut bases) = (Vec::new(), Vec::new());
    for alt in &alts {
        match alt {
            Node::Seq(items) if items.first().is_some_and(is_self) => {
                tails.push(Node::seq(items[1..].to_vec()))
            }
            // `A: A` adds nothing to the language.
            n if is_self(n) => {}
            n => bases.push(n.clone()),
        }
    }
    if tails.is_empty() || bases.is_empty() {
        return Node::alt(alts);
    }
    Node::Seq(vec![
        Node::alt(bases),
        Node::Repeat(Box::new(Node::alt(tails)), 0, None),
    ])
}

fn visit_refs(
    n: &Node,
    f: &mut impl FnMut(&str, usize) -> Result<(), GrammarError>,
) -> Result<(), GrammarError> {
    match n {
        Node::Ref(name, line) => f(name, *line),
        Node::Seq(v) | Node::Alt(v) => v.iter().try_for_each(|k| visit_refs(k, f)),
        Node::Repeat(k, _, _) => visit_refs(k, f),
        Node::Literal(_) | Node::Chars(_) | Node::Expr(_) | Node::Embed(_) => Ok(()),
    }
}

fn node_nullable(n: &Node, index: &HashMap<String, usize>, nullable: &[bool]) -> bool {
    match n {
        Node::Literal(s) => s.is_empty(),
        Node::Chars(_) | Node::Embed(_) => false,
        Node::Expr(e) => crate::matcher::matches(e, &[], b""),
        Node::Ref(name, _) => nullable[index[name.as_str()]],
        Node::Seq(v) => v.iter().all(|k| node_nullable(k, index, nullable)),
        Node::Alt(v) => v.iter().any(|k| node_nullable(k, index, nullable)),
        Node::Repeat(k, min, _) => *min == 0 || node_nullable(k, index, nullable),
    }
}

/// Rules `n` may call before reading a character.
fn first_refs(n: &Node, index: &HashMap<String, usize>, nullable: &[bool], out: &mut Vec<usize>) {
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
        Node::Literal(_) | Node::Chars(_) | Node::Expr(_) | Node::Embed(_) => {}
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

/// Rule bodies to expressions: recursive rules are called, the others inlined (once each,
/// shared between their uses).
struct Lowering<'a> {
    index: &'a HashMap<String, usize>,
    rules: &'a [(String, Node, usize)],
    ids: &'a [Option<RuleId>],
    embed_starts: &'a [RuleId],
    shared: Vec<Option<Expr>>,
}

impl Lowering<'_> {
    fn lower(&mut self, n: &Node) -> Result<Expr, GrammarError> {
        Ok(match n {
            Node::Literal(s) => Expr::literal(s.as_bytes()),
            Node::Chars(c) => Expr::Chars(c.clone()),
            Node::Expr(e) => e.clone(),
            Node::Embed(k) => Expr::Call(self.embed_starts[*k]),
            Node::Ref(name, _) => {
                let i = self.index[name.as_str()];
                match self.ids[i] {
                    Some(id) => Expr::Call(id),
                    None => {
                        if let Some(e) = &self.shared[i] {
                            return Ok(e.clone());
                        }
                        // Not recursive, so this cannot reach rule i again.
                        let body = self.lower(&self.rules[i].1)?;
                        let e = Expr::shared(body);
                        self.shared[i] = Some(e.clone());
                        e
                    }
                }
            }
            Node::Seq(v) => {
                Expr::Concat(v.iter().map(|k| self.lower(k)).collect::<Result<_, _>>()?)
            }
            Node::Alt(v) => Expr::Alt(v.iter().map(|k| self.lower(k)).collect::<Result<_, _>>()?),
            Node::Repeat(k, min, max) => Expr::Repeat {
                expr: Box::new(self.lower(k)?),
                min: *min,
                max: *max,
            },
        })
    }
}

/// Every case variant of each character of `s` (Lark's `"..."i`), as a sequence of classes.
pub(crate) fn case_insensitive(s: &str) -> Node {
    Node::Seq(
        s.chars()
            .map(|c| {
                // A case mapping to several characters (`ß` -> `SS`) is no single-character
                // variant.
                let mut set: Vec<(char, char)> = vec![(c, c)];
                set.extend(one_char(c.to_lowercase()).map(|l| (l, l)));
                set.extend(one_char(c.to_uppercase()).map(|u| (u, u)));
                Node::Chars(CharRanges::new(set))
            })
            .collect(),
    )
}

/// The only item of `chars`, if it has exactly one.
fn one_char(mut chars: impl Iterator<Item = char>) -> Option<char> {
    match (chars.next(), chars.next()) {
        (Some(c), None) => Some(c),
        _ => None,
    }
}
