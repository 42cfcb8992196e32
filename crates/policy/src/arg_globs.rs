//! [`ArgGlobs`]: the argument globs of a list of rules, compiled per pointer
//! into one [`GlobSet`], so that a call's deny and ask rules look at each
//! string of an argument once, however many rules there are. Matched rule by
//! rule, a long argument list cost rules × strings glob matches: a caller
//! could buy CPU with arguments.
//!
//! This module owns the sets and the per-call pass over an argument
//! ([`GlobHits`]). It must answer for each matcher it covers exactly what
//! [`ArgMatcher::matches`](crate::matcher::ArgMatcher::matches) answers;
//! which rule wins stays with the callers (`policy.rs`, `layer.rs`). Allow
//! rules are not covered: they match single values only (one string, never a
//! list). Known limit: regex matchers are still matched rule by rule, so deny
//! or ask rules with regexes at a pointer that holds a list still cost
//! rules × strings.

use crate::decision::DecisionKind;
use crate::facts::CallFacts;
use crate::matcher::{Leaf, count_glob_eval, find_leaf, glob_set, normalize_path, number_text};
use crate::rule::Rule;
use globset::{Candidate, Glob, GlobSet};
use std::borrow::Cow;

/// The deny and ask rules' argument globs of one list of rules, by pointer.
#[derive(Debug, Clone, Default)]
pub(crate) struct ArgGlobs {
    /// One set per pointer.
    pointers: Vec<PointerGlobs>,
    /// For each rule, for each of its matchers: where its answer is (the
    /// pointer's position in `pointers`, and the matcher's slot there), or
    /// `None` for a matcher matched on its own.
    at: Vec<Vec<Option<(usize, usize)>>>,
}

/// The globs of the matchers at one pointer.
#[derive(Debug, Clone)]
struct PointerGlobs {
    pointer: String,
    set: GlobSet,
    /// The slot (matcher) of each glob of `set`: a glob and its directory
    /// stem share one.
    slot_of: Vec<usize>,
    slots: usize,
}

impl ArgGlobs {
    /// Compiles the glob matchers of the deny and ask rules of `rules`.
    ///
    /// A pointer whose set cannot be built (globset's size limits are per
    /// set, and each glob was only checked alone) keeps its matchers matched
    /// one by one, as before: the same answers, at the old cost.
    pub(crate) fn new(rules: &[Rule]) -> ArgGlobs {
        // By pointer: its globs, the slot of each, and how many slots.
        let mut by_pointer: Vec<(&str, Vec<&Glob>, Vec<usize>, usize)> = Vec::new();
        let mut at = Vec::with_capacity(rules.len());
        for rule in rules {
            let loose = rule.decision() != DecisionKind::Allow;
            let mut slots = Vec::with_capacity(rule.args().len());
            for m in rule.args() {
                let Some(globs) = m.loose_globs().filter(|_| loose) else {
                    slots.push(None);
                    continue;
                };
                let p = match by_pointer.iter().position(|(ptr, ..)| *ptr == m.pointer()) {
                    Some(p) => p,
                    None => {
                        by_pointer.push((m.pointer(), Vec::new(), Vec::new(), 0));
                        by_pointer.len() - 1
                    }
                };
                let (_, all, slot_of, count) = &mut by_pointer[p];
                slot_of.extend(globs.iter().map(|_| *count));
                all.extend(globs);
                slots.push(Some((p, *count)));
                *count += 1;
            }
            at.push(slots);
        }
        let mut pointers = Vec::with_capacity(by_pointer.len());
        // Where each pointer's set went in `pointers`, if it was built.
        let mut kept = Vec::with_capacity(by_pointer.len());
        for (pointer, globs, slot_of, slots) in by_pointer {
            kept.push(glob_set(globs).map(|set| {
                pointers.push(PointerGlobs {
                    pointer: pointer.to_string(),
                    set,
                    slot_of,
                    slots,
                });
                pointers.len() - 1
            }));
        }
        for slot in at.iter_mut().flatten() {
            *slot = slot.and_then(|(p, s)| kept.get(p).copied().flatten().map(|p| (p, s)));
        }
        ArgGlobs { pointers, at }
    }

    /// How many sets were compiled: one per pointer that a deny or ask rule's
    /// glob looks at.
    #[cfg(test)]
    pub(crate) fn sets(&self) -> usize {
        self.pointers.len()
    }

    /// A call's answers, computed as they are asked for.
    pub(crate) fn hits<'a>(&'a self, args: &'a serde_json::Value) -> GlobHits<'a> {
        GlobHits {
            globs: self,
            args,
            hits: vec![None; self.pointers.len()],
        }
    }
}

/// What the sets of an [`ArgGlobs`] say about one call's arguments: each
/// pointer's argument is looked at once, the first time a rule asks.
pub(crate) struct GlobHits<'a> {
    globs: &'a ArgGlobs,
    args: &'a serde_json::Value,
    /// For each pointer, once looked at: which of its matchers match.
    hits: Vec<Option<Vec<bool>>>,
}

impl GlobHits<'_> {
    /// Whether `rule`, the `index`th of the rules the sets were built from,
    /// matches the call: [`Rule::matches`], its globs answered by the sets.
    pub(crate) fn rule_matches(
        &mut self,
        index: usize,
        rule: &Rule,
        facts: &CallFacts<'_>,
    ) -> bool {
        let strict = rule.decision() == DecisionKind::Allow;
        let globs = self.globs;
        let slots = globs.at.get(index).map_or(&[][..], Vec::as_slice);
        rule.matches_by(facts, strict, |j, m| {
            match slots.get(j).copied().flatten() {
                Some((p, slot)) => self.hit(p, slot),
                None => m.matches(facts.args, strict),
            }
        })
    }

    fn hit(&mut self, p: usize, slot: usize) -> bool {
        let (Some(pg), Some(hits)) = (self.globs.pointers.get(p), self.hits.get_mut(p)) else {
            return false;
        };
        let hits = hits.get_or_insert_with(|| pass(pg, self.args));
        hits.get(slot).copied().unwrap_or(false)
    }
}

/// One pass over the argument at `pg`'s pointer: which matchers match some
/// string, number or boolean in it, as
/// [`ArgMatcher::matches`](crate::matcher::ArgMatcher::matches) decides for a
/// deny or ask rule (a string as written and normalised, a glob `dir/**`
/// also for `dir`). Stops once every matcher matched.
fn pass(pg: &PointerGlobs, args: &serde_json::Value) -> Vec<bool> {
    let mut hits = Hits {
        hit: vec![false; pg.slots],
        left: pg.slots,
        into: Vec::new(),
    };
    let Some(value) = args.pointer(&pg.pointer) else {
        return hits.hit;
    };
    find_leaf(value, &mut |leaf| {
        match leaf {
            Leaf::Str(s) => {
                hits.test(pg, s);
                if let Cow::Owned(normal) = normalize_path(s)
                    && normal != s
                {
                    hits.test(pg, &normal);
                }
            }
            Leaf::Num(n) => hits.test(pg, &number_text(n)),
            Leaf::Bool(b) => hits.test(pg, if b { "true" } else { "false" }),
        }
        (hits.left == 0).then_some(())
    });
    hits.hit
}

/// The state of one [`pass`].
struct Hits {
    hit: Vec<bool>,
    /// Matchers not matched yet.
    left: usize,
    /// The set's answer for one string (kept to reuse its allocation).
    into: Vec<usize>,
}

impl Hits {
    fn test(&mut self, pg: &PointerGlobs, text: &str) {
        count_glob_eval();
        pg.set
            .matches_candidate_into(&Candidate::new(text), &mut self.into);
        for &g in &self.into {
            if let Some(hit) = pg.slot_of.get(g).and_then(|&slot| self.hit.get_mut(slot))
                && !*hit
            {
                *hit = true;
                self.left -= 1;
            }
        }
    }
}
