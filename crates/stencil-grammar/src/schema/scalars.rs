//! Numbers and strings: ranges, `multipleOf`, lengths, `pattern`, `format`.

use super::*;

impl Compiler<'_> {
    pub(super) fn number(
        &mut self,
        m: &Obj,
        ptr: &str,
        integer: bool,
    ) -> Result<Expr, GrammarError> {
        let dec = |k: &str| -> Result<Option<Decimal>, GrammarError> {
            match m.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => Decimal::parse(&n.to_string())
                    .map(Some)
                    .ok_or_else(|| GrammarError::invalid(ptr, format!("{k} is out of range"))),
                Some(v) => Err(GrammarError::invalid(
                    ptr,
                    format!("{k} must be a number, not {v}"),
                )),
            }
        };
        let tighter = |a: Option<Bound>, b: Option<Bound>, lower: bool| -> Option<Bound> {
            match (a, b) {
                (None, x) | (x, None) => x,
                (Some(x), Some(y)) => {
                    use std::cmp::Ordering::*;
                    let ord = x.0.cmp_value(&y.0);
                    Some(match (ord, lower) {
                        (Greater, true) | (Less, false) => x,
                        (Less, true) | (Greater, false) => y,
                        (Equal, _) => (x.0, x.1 || y.1),
                    })
                }
            }
        };
        let lo = tighter(
            dec("minimum")?.map(|d| (d, false)),
            dec("exclusiveMinimum")?.map(|d| (d, true)),
            true,
        );
        let hi = tighter(
            dec("maximum")?.map(|d| (d, false)),
            dec("exclusiveMaximum")?.map(|d| (d, true)),
            false,
        );
        let step = dec("multipleOf")?;
        if step.as_ref().is_some_and(|s| s.neg || s.is_zero()) {
            return Err(GrammarError::invalid(
                ptr,
                "multipleOf must be greater than 0",
            ));
        }
        let too_big = || GrammarError::unsupported("minimum", ptr, "numeric bounds beyond 1e38");
        let base = if integer {
            let l = match &lo {
                Some((d, s)) => Some(d.ceil_int(*s).ok_or_else(too_big)?),
                None => None,
            };
            let h = match &hi {
                Some((d, s)) => Some(d.floor_int(*s).ok_or_else(too_big)?),
                None => None,
            };
            if let (Some(l), Some(h)) = (l, h) {
                if l > h {
                    return Ok(Expr::Nothing);
                }
            }
            // Draft 4: an integer is written without a fraction (`1.0` is not one).
            let dot_zero = !self.draft.draft4 && !self.opts.plain_integers;
            if l.is_none() && h.is_none() {
                self.json.integer(dot_zero)
            } else {
                integer_range(l, h, dot_zero)
            }
        } else if lo.is_none() && hi.is_none() {
            self.json.number()
        } else {
            if let (Some((l, ls)), Some((h, hs))) = (&lo, &hi) {
                use std::cmp::Ordering::*;
                match l.cmp_value(h) {
                    Greater => return Ok(Expr::Nothing),
                    Equal if *ls || *hs => return Ok(Expr::Nothing),
                    _ => {}
                }
            }
            number_range(lo, hi).ok_or_else(too_big)?
        };
        match step {
            None => Ok(base),
            Some(step) => {
                let dfa = multiple_of(&step).ok_or_else(|| {
                    GrammarError::unsupported(
                        "multipleOf",
                        ptr,
                        "multipleOf with more than 100000 residues",
                    )
                })?;
                Ok(Expr::and(vec![base, dfa]))
            }
        }
    }

    /// The text between the quotes of a string valid under `m`'s string keywords.
    pub(super) fn string_content(&mut self, m: &Obj, ptr: &str) -> Result<Expr, GrammarError> {
        let mut parts = Vec::new();
        let (min, max) = (
            self.count(m, "minLength", ptr)?.unwrap_or(0),
            self.count(m, "maxLength", ptr)?,
        );
        if max.is_some_and(|x| x < min) {
            return Ok(Expr::Nothing);
        }
        let patterns: Vec<Value> = match m.get("pattern") {
            None => vec![],
            Some(Value::Array(list)) => list.clone(),
            Some(p) => vec![p.clone()],
        };
        // A pattern whose shortest match has more characters than `maxLength` leaves no
        // string at all: say so at compile time rather than leave the automaton a dead end
        // after the opening quote.
        if let Some(max) = max {
            for p in patterns.iter().filter_map(Value::as_str) {
                if crate::regex::pattern_min_chars(p).is_some_and(|n| n > max as usize) {
                    return Ok(Expr::Nothing);
                }
            }
        }
        // A `minLength` that a pattern's or format's shortest string already reaches adds
        // nothing, and intersecting would cost a determinization.
        let format_regex = m
            .get("format")
            .and_then(Value::as_str)
            .filter(|_| self.opts.format != FormatMode::Annotate)
            .and_then(crate::formats::format_regex);
        let implied = max.is_none()
            && patterns
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .chain(format_regex)
                .any(|p| crate::regex::pattern_min_chars(&p).is_some_and(|n| n >= min as usize));
        if (min > 0 || max.is_some()) && !implied {
            parts.push(Expr::repeat(any_string_char(), min, max));
        }
        for p in patterns {
            let p = p
                .as_str()
                .ok_or_else(|| GrammarError::invalid(ptr, "pattern must be a string"))?;
            parts.push(pattern_to_string_content(p, &format!("{ptr}/pattern"))?);
        }
        if let Some(f) = m.get("format") {
            let f = f
                .as_str()
                .ok_or_else(|| GrammarError::invalid(ptr, "format must be a string"))?;
            if self.opts.format != FormatMode::Annotate {
                match crate::formats::format_regex(f) {
                    Some(_) if f == "email" => {
                        // RFC 5321: a local part of at most 64 characters, bounded on its own
                        // (cheap); the 254-character total with `format_total_lengths`.
                        // (Address literals are short: the total bounds only named domains.)
                        let (local, name, literal) = crate::formats::email_parts();
                        let exact =
                            |re: &str| pattern_to_string_content(&format!("^(?:{re})$"), ptr);
                        let local = Expr::shared(Expr::and(vec![
                            exact(&local)?,
                            Expr::repeat(any_string_char(), 1, Some(64)),
                        ]));
                        let mut named =
                            Expr::concat([local.clone(), Expr::literal("@"), exact(&name)?]);
                        if self.opts.format_total_lengths {
                            named = Expr::and(vec![
                                named,
                                Expr::repeat(any_string_char(), 3, Some(254)),
                            ]);
                        }
                        let literal = Expr::concat([local, Expr::literal("@"), exact(&literal)?]);
                        parts.push(Expr::alt([named, literal]));
                    }
                    Some(_) if f == "time" || f == "date-time" => {
                        // Leap seconds are a second branch: alone, the exact language as an
                        // explicit DFA built once per process (`formats::leap_second_time`);
                        // intersected with a pattern or length, where its 11,000 states would
                        // be multiplied eagerly, only 23:59:60 UTC (a subset: never invalid).
                        let time = crate::formats::time();
                        let leap = if parts.is_empty() {
                            Expr::Dfa(crate::formats::leap_second_time())
                        } else {
                            let utc = crate::formats::LEAP_SECOND_UTC;
                            pattern_to_string_content(&format!("^{utc}$"), ptr)?
                        };
                        let time = Expr::alt([
                            pattern_to_string_content(&time, &format!("{ptr}/format"))?,
                            leap,
                        ]);
                        parts.push(if f == "date-time" {
                            let date = crate::formats::date_time_prefix();
                            Expr::concat([pattern_to_string_content(&date, ptr)?, time])
                        } else {
                            time
                        });
                    }
                    Some(re) => {
                        parts.push(pattern_to_string_content(&re, &format!("{ptr}/format"))?);
                        if f == "hostname" {
                            // No "--" in label positions 3-4: IDN A-labels (xn--) cannot be
                            // validated by a regex, so they are refused rather than accepted
                            // unchecked. The 253-character total with `format_total_lengths`
                            // (a lazily stepped counter over the label automaton).
                            let idn = pattern_to_string_content(r"^(?:[^.]*\.)*[^.]{2}--", ptr)?;
                            parts.push(Expr::Not(Box::new(idn)));
                            if self.opts.format_total_lengths {
                                parts.push(Expr::repeat(any_string_char(), 1, Some(253)));
                            }
                        }
                    }
                    // A format the specification defines is one a validator may assert
                    // (MaskBench's instances do): refused rather than left unchecked.
                    None if crate::formats::SPEC_UNCHECKED.contains(&f) => self.refuse(
                        "format",
                        ptr,
                        &format!("format {f:?} is not checked by stencil"),
                    )?,
                    None if self.opts.format == FormatMode::Strict => {
                        self.refuse("format", ptr, &format!("unknown format {f:?}"))?
                    }
                    None => self.warn(
                        "format",
                        ptr,
                        &format!("unknown format {f:?}, an annotation: any string is allowed"),
                    ),
                }
            }
        }
        Ok(match parts.len() {
            0 => Expr::star(any_string_char()),
            _ => Expr::and(parts),
        })
    }
}
