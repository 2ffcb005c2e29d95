//! Templates by call signature, so that a call seen before builds nothing.
//!
//! A signature is the overload, its operands' types and strides, and its other arguments. Two
//! tables: one by the whole signature, floats included, and one by the signature with the
//! liftable floats masked, which finds the [`Family`] of a call whose learning rate or bias
//! correction changed since; the family then checks the call (`Family::admits`), and a call it
//! admits runs the family's template, which is the same compiled program. Both tables start over
//! when they grow past a bound, which costs only rebuilding.
//!
//! User kernels have a table of their own, by kernel and operand types: a kernel's template is
//! one `kernel` node whatever the call's strides (it reads the operands' values), and only a call
//! of the kernel's own types builds one; any other is `build_kernel`'s error, never cached.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

use indexmap::IndexMap;
use ttpu_aten::eager::{self, Arg, Built, Family, Operand, Template};
use ttpu_aten::ops::OpDef;
use ttpu_eager::CallGraph;
use ttpu_ir::{Kernel, TensorType};

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

/// A built call of a user kernel.
#[derive(Debug)]
pub struct KernelEntry {
    /// The kernel (kept, so that an entry is found again only for this kernel).
    pub kernel: Arc<Kernel>,
    /// The operand types it was built for (the kernel's own).
    pub operands: Vec<TensorType>,
    /// One `kernel` node: its results contiguous and fresh.
    pub template: Arc<Template>,
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

/// A call's signature, borrowed: looked up without copying it (a hit, the common case, copies
/// nothing).
struct Probe<'a> {
    op: &'static str,
    operands: &'a [Operand],
    args: &'a [Arg],
    kwargs: &'a [(String, Arg)],
    sizes: &'a IndexMap<String, i64>,
}

impl Probe<'_> {
    fn hash(&self) -> u64 {
        let mut hasher = ttpu_runtime::FxHasher::default();
        self.op.hash(&mut hasher);
        self.operands.hash(&mut hasher);
        self.args.hash(&mut hasher);
        self.kwargs.hash(&mut hasher);
        for (name, value) in self.sizes {
            name.hash(&mut hasher);
            value.hash(&mut hasher);
        }
        hasher.finish()
    }

    fn matches(&self, key: &Key) -> bool {
        self.op == key.op
            && self.operands == key.operands.as_slice()
            && self.args == key.args.as_slice()
            && self.kwargs == key.kwargs.as_slice()
            && self.sizes.len() == key.sizes.len()
            && self.sizes.iter().zip(&key.sizes).all(|((a, x), (b, y))| a == b && x == y)
    }

    fn key(&self) -> Key {
        Key {
            op: self.op,
            operands: self.operands.to_vec(),
            args: self.args.to_vec(),
            kwargs: self.kwargs.to_vec(),
            sizes: self.sizes.iter().map(|(name, &value)| (name.clone(), value)).collect(),
        }
    }
}

/// Entries by the hash of their signature; a bucket holds more than one only on a collision.
type Table<T> = HashMap<u64, Vec<(Key, T)>, BuildHasherDefault<ttpu_runtime::FxHasher>>;

fn find<'t, T>(table: &'t Table<T>, probe: &Probe<'_>, hash: u64) -> Option<&'t T> {
    table.get(&hash)?.iter().find(|(key, _)| probe.matches(key)).map(|(_, value)| value)
}

fn insert<T>(table: &mut Table<T>, hash: u64, key: Key, value: T) -> usize {
    let bucket = table.entry(hash).or_default();
    bucket.push((key, value));
    1
}

/// Entries kept before the tables start over.
const CAPACITY: usize = 8192;

#[derive(Default)]
pub(crate) struct Memo {
    exact: Table<Arc<Entry>>,
    families: Table<Arc<Entry>>,
    sizes: Table<Arc<CallGraph>>,
    /// Kernel calls by the hash of the kernel's name and the operand types.
    kernels: HashMap<u64, Vec<Arc<KernelEntry>>, BuildHasherDefault<ttpu_runtime::FxHasher>>,
    /// Entries in `exact` and `sizes`, in `families`, and in `kernels`.
    count: usize,
    family_count: usize,
    kernel_count: usize,
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
        let probe = Probe { op: def.name, operands, args, kwargs, sizes: symbol_values };
        let hash = probe.hash();
        if let Some(entry) = find(&self.exact, &probe, hash) {
            return Ok(Lookup::Entry(Arc::clone(entry)));
        }
        if let Some(sizes) = find(&self.sizes, &probe, hash) {
            return Ok(Lookup::Sizes(Arc::clone(sizes)));
        }
        if self.count >= CAPACITY {
            self.exact.clear();
            self.sizes.clear();
            self.count = 0;
        }
        if self.family_count >= CAPACITY {
            self.families.clear();
            self.family_count = 0;
        }
        let masked_args: Vec<Arg> = args.iter().map(masked).collect();
        let masked_kwargs: Vec<(String, Arg)> = kwargs.iter().map(|(name, arg)| (name.clone(), masked(arg))).collect();
        let family_probe = Probe { args: &masked_args, kwargs: &masked_kwargs, ..probe };
        let family_hash = family_probe.hash();
        if let Some(entry) = find(&self.families, &family_probe, family_hash)
            && entry.family.admits(def, args, kwargs, operands)
        {
            let entry = Arc::clone(entry);
            self.count += insert(&mut self.exact, hash, probe.key(), Arc::clone(&entry));
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
                    self.family_count +=
                        insert(&mut self.families, family_hash, family_probe.key(), Arc::clone(&entry));
                }
                self.count += insert(&mut self.exact, hash, probe.key(), Arc::clone(&entry));
                Ok(Lookup::Entry(entry))
            }
            Built::Sizes(graph) => {
                let call = Arc::new(CallGraph::new(graph)?);
                self.count += insert(&mut self.sizes, hash, probe.key(), Arc::clone(&call));
                Ok(Lookup::Sizes(call))
            }
        }
    }

    /// The template of a call of `kernel` (the overload `op`) on `operands`, built on first sight.
    pub(crate) fn kernel(&mut self, op: &str, kernel: &Arc<Kernel>, operands: &[Operand]) -> Result<Arc<KernelEntry>> {
        let mut hasher = ttpu_runtime::FxHasher::default();
        kernel.name.hash(&mut hasher);
        for operand in operands {
            operand.ty.hash(&mut hasher);
        }
        let hash = hasher.finish();
        // Two kernels of one name are one only if they are the same kernel (types and module
        // bytes): a template of another's module would compute other numbers.
        let same = |entry: &&Arc<KernelEntry>| {
            (Arc::ptr_eq(&entry.kernel, kernel) || entry.kernel == *kernel)
                && entry.operands.iter().eq(operands.iter().map(|operand| &operand.ty))
        };
        if let Some(entry) = self.kernels.get(&hash).and_then(|bucket| bucket.iter().find(same)) {
            return Ok(Arc::clone(entry));
        }
        let family = match eager::build_kernel(kernel, operands).map_err(|error| Error::from_table(op, error))? {
            Built::Template(family) => family,
            Built::Sizes(_) => {
                return Err(Error::Call {
                    op: op.to_string(),
                    message: "a kernel call asked for a size program".into(),
                });
            }
        };
        self.built += 1;
        if self.kernel_count >= CAPACITY {
            self.kernels.clear();
            self.kernel_count = 0;
        }
        let entry = Arc::new(KernelEntry {
            kernel: Arc::clone(kernel),
            operands: operands.iter().map(|operand| operand.ty.clone()).collect(),
            call: CallGraph::new(family.template.graph.clone())?,
            template: family.template,
        });
        self.kernels.entry(hash).or_default().push(Arc::clone(&entry));
        self.kernel_count += 1;
        Ok(entry)
    }
}
