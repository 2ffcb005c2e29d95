//! Templates by call signature, so that a call seen before builds nothing.
//!
//! A signature is the overload, its operands' types and strides, and its other arguments. Two
//! tables: one by the whole signature, floats included, and one by the signature with the
//! liftable floats masked, which finds the [`Family`] of a call whose learning rate or bias
//! correction changed since; the family then checks the call (`Family::admits`), and a call it
//! admits runs the family's template, which is the same compiled program. Both tables start over
//! when they grow past a bound, which costs only rebuilding.

use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;
use ttpu_aten::eager::{self, Arg, Built, Family, Operand};
use ttpu_aten::ops::OpDef;
use ttpu_eager::CallGraph;

use crate::{Error, Result};

/// A built call: its template as a callable graph.
#[derive(Debug)]
pub struct Entry {
    /// The overload's name.
    pub op: &'static str,
    /// The overload.
    pub def: &'static OpDef,
    /// The template and how it was built.
    pub family: Family,
    /// The template's graph, as a step of the lazy tape.
    pub call: CallGraph,
}

/// What a call needs.
pub(crate) enum Lookup {
    /// Its template.
    Entry(Arc<Entry>),
    /// A size program first (see [`Built::Sizes`]).
    Sizes(Arc<CallGraph>),
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    op: &'static str,
    operands: Vec<Operand>,
    args: Vec<Arg>,
    kwargs: Vec<(String, Arg)>,
    sizes: Vec<(String, i64)>,
}

/// Entries kept before the tables start over.
const CAPACITY: usize = 8192;

#[derive(Default)]
pub(crate) struct Memo {
    exact: HashMap<Key, Arc<Entry>>,
    families: HashMap<Key, Arc<Entry>>,
    sizes: HashMap<Key, Arc<CallGraph>>,
    /// Templates built so far (for statistics).
    pub(crate) built: u64,
}

/// A float that stands for any liftable value in a family's key: a NaN payload no call passes
/// by accident (and were one passed, the family's check would still decide).
const MASK: u64 = 0x7ff8_dead_beef_0001;

fn masked(arg: &Arg) -> Arg {
    match arg {
        Arg::Float(value) if eager::liftable(*value) => Arg::Float(f64::from_bits(MASK)),
        Arg::List(items) => Arg::List(items.iter().map(masked).collect()),
        other => other.clone(),
    }
}

impl Memo {
    pub(crate) fn lookup(
        &mut self,
        def: &'static OpDef,
        args: &[Arg],
        kwargs: &[(String, Arg)],
        operands: &[Operand],
        symbol_values: &IndexMap<String, i64>,
    ) -> Result<Lookup> {
        let key = Key {
            op: def.name,
            operands: operands.to_vec(),
            args: args.to_vec(),
            kwargs: kwargs.to_vec(),
            sizes: symbol_values.iter().map(|(name, &value)| (name.clone(), value)).collect(),
        };
        if let Some(entry) = self.exact.get(&key) {
            return Ok(Lookup::Entry(Arc::clone(entry)));
        }
        if let Some(sizes) = self.sizes.get(&key) {
            return Ok(Lookup::Sizes(Arc::clone(sizes)));
        }
        if self.exact.len() + self.sizes.len() >= CAPACITY {
            self.exact.clear();
            self.sizes.clear();
        }
        if self.families.len() >= CAPACITY {
            self.families.clear();
        }
        let family_key = Key {
            args: args.iter().map(masked).collect(),
            kwargs: kwargs.iter().map(|(name, arg)| (name.clone(), masked(arg))).collect(),
            ..key.clone()
        };
        if let Some(entry) = self.families.get(&family_key)
            && entry.family.admits(def, args, kwargs, operands)
        {
            let entry = Arc::clone(entry);
            self.exact.insert(key, Arc::clone(&entry));
            return Ok(Lookup::Entry(entry));
        }
        self.built += 1;
        match eager::build(def, args, kwargs, operands, symbol_values)
            .map_err(|error| Error::from_table(def.name, error))?
        {
            Built::Template(family) => {
                let call = CallGraph::new(family.template.graph.clone())?;
                let lifted = !family.template.scalars.is_empty();
                let entry = Arc::new(Entry { op: def.name, def, family, call });
                if lifted {
                    self.families.insert(family_key, Arc::clone(&entry));
                }
                self.exact.insert(key, Arc::clone(&entry));
                Ok(Lookup::Entry(entry))
            }
            Built::Sizes(graph) => {
                let call = Arc::new(CallGraph::new(graph)?);
                self.sizes.insert(key, Arc::clone(&call));
                Ok(Lookup::Sizes(call))
            }
        }
    }
}
