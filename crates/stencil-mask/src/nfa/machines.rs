//! Machines: `And`, `Not` and explicit DFAs determinized, combined and trimmed when first
//! reached, then stepped as one item carrying the machine's state.

use super::*;

impl Nfa {
    /// The start of machine `m` (built): `(state, live, accepting)`, or `None` if it matches
    /// nothing.
    pub(super) fn machine_start(&mut self, m: u32) -> Result<Option<(u32, bool, bool)>, MaskError> {
        Ok(match &mut self.machines[m as usize] {
            Some(Built::Explicit(d)) => Some((0, d.live[0], d.accept[0])),
            Some(Built::Counted(c)) => c.start()?.map(|s| (s, c.live(s), c.accept(s))),
            None => None,
        })
    }

    /// Machine `m` after byte `b` from `state`: `(state, live, accepting)`.
    pub(super) fn machine_next(
        &mut self,
        m: u32,
        state: u32,
        b: u8,
    ) -> Result<Option<(u32, bool, bool)>, MaskError> {
        Ok(match &mut self.machines[m as usize] {
            Some(Built::Explicit(d)) => {
                let t = d.next(state, b);
                (t != MDEAD).then(|| (t, d.live[t as usize], d.accept[t as usize]))
            }
            Some(Built::Counted(c)) => c.next(state, b)?.map(|t| (t, c.live(t), c.accept(t))),
            None => None,
        })
    }

    /// Builds machine `m` on first use (and refines the byte classes with its own).
    pub(super) fn build_machine(&mut self, m: u32) -> Result<(), MaskError> {
        if self.machines[m as usize].is_some() {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let def = self.machine_defs[m as usize].clone();
        let built = match def.clone() {
            MachineDef::And(parts) => Built::Explicit(Arc::new(self.intersect(&parts)?)),
            MachineDef::Not(inner) => {
                Built::Explicit(Arc::new(self.determinize(inner)?.complement().trim()))
            }
            MachineDef::Dfa(bd) => Built::Explicit(crate::machine::from_shared_dfa(&bd)),
            MachineDef::Counted { min, max, rest } => {
                let chars = self.chars_machine()?;
                let pattern = if rest.is_empty() {
                    chars.clone()
                } else {
                    Arc::new(self.intersect(&rest)?)
                };
                tracing::trace!(
                    "counted {min}..{max}: pattern {} states x {} classes in {:?}",
                    pattern.num_states(),
                    pattern.nclasses,
                    t0.elapsed()
                );
                Built::Counted(Box::new(Counted::new(
                    pattern,
                    chars,
                    min,
                    max,
                    self.limit,
                    self.max_token_len,
                )?))
            }
        };
        let boundaries: Vec<u8> = match &built {
            Built::Explicit(d) => d.boundaries().collect(),
            Built::Counted(c) => c.boundaries().collect(),
        };
        if tracing::enabled!(tracing::Level::TRACE) {
            let (kind, states) = match (&def, &built) {
                (MachineDef::And(p), Built::Explicit(d)) => {
                    (format!("and/{}", p.len()), d.num_states())
                }
                (MachineDef::Counted { min, max, .. }, _) => (format!("counted {min}..{max}"), 0),
                (MachineDef::Not(_), Built::Explicit(d)) => ("not".into(), d.num_states()),
                (_, Built::Explicit(d)) => ("dfa".into(), d.num_states()),
                _ => (String::new(), 0),
            };
            tracing::trace!("machine {m} {kind}: {states} states, {:?}", t0.elapsed());
        }
        let mut changed = false;
        for b in boundaries {
            changed |= !std::mem::replace(&mut self.boundary[b as usize], true);
        }
        if changed {
            self.recompute_classes();
        }
        self.machines[m as usize] = Some(built);
        self.upper.machine_built();
        Ok(())
    }

    /// The explicit DFA of the strings every node matches.
    ///
    /// Complements of counted machines are applied last, by stepping the counter along the
    /// product of the rest (`Counted::subtract_from`) instead of enumerating it.
    pub(super) fn intersect(&mut self, parts: &[NodeId]) -> Result<Machine, MaskError> {
        let (subtracted, kept): (Vec<NodeId>, Vec<NodeId>) = parts
            .iter()
            .partition(|&&p| self.complemented_counter(p).is_some());
        let (mut acc, subtracted) = match kept.split_first() {
            Some((&first, rest)) => {
                let mut acc = self.determinize(first)?;
                for &p in rest {
                    let d = self.determinize(p)?;
                    acc = Machine::product(&acc, &d, self.machine_limit)?;
                }
                (acc, subtracted)
            }
            None => (self.determinize(subtracted[0])?, subtracted[1..].to_vec()),
        };
        for p in subtracted {
            let Some(c) = self.complemented_counter(p) else {
                unreachable!("partitioned above")
            };
            self.build_machine(c)?;
            let Some(Built::Counted(counter)) = &mut self.machines[c as usize] else {
                unreachable!("a counted machine builds as one")
            };
            acc = counter.subtract_from(&acc, self.machine_limit)?;
        }
        Ok(acc)
    }

    /// The counted machine `p` complements, if `p` is the complement of one.
    fn complemented_counter(&self, p: NodeId) -> Option<u32> {
        let Node::Machine(m) = self.nodes[p as usize] else {
            return None;
        };
        let MachineDef::Not(inner) = self.machine_defs[m as usize] else {
            return None;
        };
        let Node::Machine(c) = self.nodes[inner as usize] else {
            return None;
        };
        matches!(self.machine_defs[c as usize], MachineDef::Counted { .. }).then_some(c)
    }

    /// The DFA of any sequence of JSON string characters (start = between characters).
    pub(super) fn chars_machine(&mut self) -> Result<Arc<Machine>, MaskError> {
        if let Some(c) = &self.chars {
            return Ok(c.clone());
        }
        let d = Arc::new(self.determinize(self.star_unit)?);
        self.chars = Some(d.clone());
        Ok(d)
    }

    /// The explicit DFA of a call-free node, by subset construction over its items.
    pub(super) fn determinize(&mut self, node: NodeId) -> Result<Machine, MaskError> {
        if let Node::Machine(m) = self.nodes[node as usize] {
            self.build_machine(m)?;
            match &mut self.machines[m as usize] {
                Some(Built::Explicit(d)) => return Ok((**d).clone()),
                Some(Built::Counted(c)) => return c.enumerate(self.machine_limit),
                None => {}
            }
        }
        // Nested machines first; the operand's own byte classes (from the leaves and machines
        // it contains) are usually far fewer than the whole grammar's.
        let mut todo = vec![node];
        let mut visited: FxHashSet<NodeId> = FxHashSet::default();
        let mut boundary = [false; 256];
        boundary[0] = true;
        while let Some(n) = todo.pop() {
            if !visited.insert(n) {
                continue;
            }
            match self.nodes[n as usize] {
                Node::Seq { start, len } | Node::Alt { start, len } => {
                    todo.extend_from_slice(&self.kids[start as usize..(start + len) as usize])
                }
                Node::Repeat { body, .. } => todo.push(body),
                Node::Object(o) => {
                    let obj = &self.objects[o as usize];
                    for &(a, b) in obj.members.iter().chain([&obj.extra]) {
                        todo.extend([a, b]);
                    }
                }
                Node::Byte(lo, hi) => {
                    boundary[lo as usize] = true;
                    if hi < 255 {
                        boundary[hi as usize + 1] = true;
                    }
                }
                Node::Machine(m) => {
                    self.build_machine(m)?;
                    let bs: Vec<u8> = match &self.machines[m as usize] {
                        Some(Built::Explicit(d)) => d.boundaries().collect(),
                        Some(Built::Counted(c)) => c.boundaries().collect(),
                        None => Vec::new(),
                    };
                    for b in bs {
                        boundary[b as usize] = true;
                    }
                }
                _ => {}
            }
        }
        let (class_of, reps) = crate::machine::classes_with_reps(&boundary);
        let k = reps.len();
        let start = self.run(Work::Expand(node, DONE), None)?;
        let mut map: FxHashMap<Box<[ItemId]>, u32> = FxHashMap::default();
        let mut sets: Vec<Box<[ItemId]>> = vec![start.clone()];
        map.insert(start, 0);
        let mut trans = Vec::new();
        let mut accept = Vec::new();
        let mut buckets: Vec<Vec<ItemId>> = vec![Vec::new(); k];
        let mut source: Vec<ContId> = vec![NO_SOURCE; k];
        // The state of a set that is exactly one continuation's closure, by continuation: most
        // sets are, and a `u32` key is cheaper than hashing the set.
        let mut by_source: FxHashMap<ContId, u32> = FxHashMap::default();
        let mut i = 0;
        while i < sets.len() {
            let set = sets[i].clone();
            self.step_classes(&set, &class_of, &reps, &mut buckets, &mut source)?;
            for (next, &src) in buckets.iter().zip(&source) {
                if next.is_empty() {
                    trans.push(MDEAD);
                    continue;
                }
                if let Some(&id) = by_source.get(&src) {
                    trans.push(id);
                    continue;
                }
                let id = match map.get(next.as_slice()) {
                    Some(&id) => id,
                    None => {
                        if sets.len() >= self.machine_limit {
                            return Err(MaskError::TooManyStates {
                                what: "intersection DFA",
                                given: sets.len() + 1,
                                limit: self.machine_limit,
                            });
                        }
                        let id = sets.len() as u32;
                        let boxed: Box<[ItemId]> = next.as_slice().into();
                        map.insert(boxed.clone(), id);
                        sets.push(boxed);
                        id
                    }
                };
                if src != MIXED {
                    by_source.insert(src, id);
                }
                trans.push(id);
            }
            accept.push(set.contains(&ACCEPT));
            i += 1;
        }
        Ok(Machine::from_rows(class_of, k, trans, accept).trim())
    }
}
