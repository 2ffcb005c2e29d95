//! Index checks: PyTorch raises on an index outside its range, where a program's gathers clamp
//! and its scatters drop it. Each call that takes indices (`ttpu_aten::bounds`) records a small
//! check beside itself, folding "any index out of range" into one error code per device, a lazy
//! `i32` scalar that runs in the same fused program as the call. The next host read (or
//! `synchronize`) reads the code and raises for the first check that failed, as CUDA reports a
//! device-side assert at the next synchronizing call: the value the user asked for is never
//! returned.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use indexmap::IndexSet;
use ttpu_aten::bounds::{self, IndexBound};
use ttpu_aten::eager::{Arg, Operand};
use ttpu_aten::ops::OpDef;
use ttpu_eager::CallGraph;
use ttpu_ir::TensorType;

use crate::{Error, Result};

/// The checks of one device not read yet: 0 while every check passed, else the 1-based index in
/// [`Checks::messages`] of the first that failed.
type Pending = Option<ttpu_eager::Tensor>;

/// A built check: the index type, its range, its code and whether a code comes before it.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    index: TensorType,
    bound: IndexBound,
    code: i32,
    first: bool,
}

/// Every device's pending checks and the check programs built so far.
pub(crate) struct Checks {
    pending: Vec<Mutex<Pending>>,
    /// Each distinct failure's message; a check's code is its position, so this stays as small as
    /// the set of (overload, range) pairs the programs use, however many steps run unread.
    messages: Mutex<IndexSet<String>>,
    graphs: Mutex<HashMap<Key, Arc<CallGraph>>>,
    /// The program folding a compiled graph's code into a device's (`merge`).
    merge: Mutex<Option<Arc<CallGraph>>>,
}

/// Check programs kept; past this the table starts over (rebuilding costs little).
const MAX_GRAPHS: usize = 1024;

/// Distinct failure messages kept with their own range; codes must stay valid while any pending
/// code may hold them, so the set never shrinks.
const MAX_MESSAGES: usize = 4096;

impl Checks {
    pub(crate) fn new(devices: usize) -> Checks {
        Checks {
            pending: (0..devices).map(|_| Mutex::default()).collect(),
            messages: Mutex::default(),
            graphs: Mutex::default(),
            merge: Mutex::default(),
        }
    }

    /// Records the checks of the call `def(*args, **kwargs)` on `device` (index `at`), whose
    /// operands are `operands` with the lazy values `values`.
    pub(crate) fn record(
        &self,
        device: &ttpu_eager::Device,
        at: usize,
        def: &OpDef,
        call: (&[Arg], &[(String, Arg)]),
        operands: &[Operand],
        values: &[ttpu_eager::Tensor],
    ) -> Result<()> {
        let (args, kwargs) = call;
        for bound in bounds::index_bounds(def, args, kwargs, operands) {
            let (Some(operand), Some(value)) = (operands.get(bound.operand), values.get(bound.operand)) else {
                continue;
            };
            if operand.ty.shape.as_static().is_some_and(|dims| dims.contains(&0)) {
                continue;
            }
            let slot = self.pending.get(at).ok_or(Error::NoSuchDevice { index: at, count: self.pending.len() })?;
            let code = self.code_of(def.name, bound.message(def.name))?;
            let mut pending = slot.lock()?;
            let key = Key { index: operand.ty.clone(), bound, code, first: pending.is_none() };
            let graph = self.graph(def.name, key)?;
            let mut operands: Vec<&ttpu_eager::Tensor> = vec![value];
            operands.extend(pending.as_ref());
            let mut results = device.call(&graph, &operands)?;
            *pending = results.pop();
        }
        Ok(())
    }

    /// The code of a check of a call of `op` failing with `message`. Past [`MAX_MESSAGES`] (a
    /// program whose sizes change every step), new checks share one message per overload.
    pub(crate) fn code_of(&self, op: &str, message: String) -> Result<i32> {
        let mut messages = self.messages.lock()?;
        let message = if messages.len() < MAX_MESSAGES || messages.contains(&message) {
            message
        } else {
            format!("`{op}`: an index is out of range")
        };
        let (position, _) = messages.insert_full(message);
        Ok(i32::try_from(position + 1).unwrap_or(i32::MAX))
    }

    /// The program of the check `bound` of an index of type `index` (a call of `op`), failing
    /// with `code`; `first` when no code comes before it.
    pub(crate) fn check(
        &self,
        op: &str,
        index: &TensorType,
        bound: IndexBound,
        code: i32,
        first: bool,
    ) -> Result<Arc<CallGraph>> {
        self.graph(op, Key { index: index.clone(), bound, code, first })
    }

    /// Folds `code`, computed by a compiled graph on device `at`, into the device's: the earlier
    /// failure stays the one reported.
    pub(crate) fn merge(&self, device: &ttpu_eager::Device, at: usize, code: ttpu_eager::Tensor) -> Result<()> {
        let slot = self.pending.get(at).ok_or(Error::NoSuchDevice { index: at, count: self.pending.len() })?;
        let mut pending = slot.lock()?;
        let Some(before) = pending.as_ref() else {
            *pending = Some(code);
            return Ok(());
        };
        let graph = {
            let mut merge = self.merge.lock()?;
            match merge.as_ref() {
                Some(graph) => graph.clone(),
                None => {
                    let graph = bounds::merge_graph()
                        .map_err(|error| Error::Call { op: "index check".into(), message: error.to_string() })?;
                    merge.insert(Arc::new(CallGraph::new(graph)?)).clone()
                }
            }
        };
        let mut results = device.call(&graph, &[before, &code])?;
        *pending = results.pop();
        Ok(())
    }

    fn graph(&self, op: &str, key: Key) -> Result<Arc<CallGraph>> {
        let mut graphs = self.graphs.lock()?;
        if let Some(graph) = graphs.get(&key) {
            return Ok(graph.clone());
        }
        let graph = bounds::check_graph(&key.index, &key.bound, key.code, key.first)
            .map_err(|error| Error::Call { op: op.to_string(), message: format!("its index check: {error}") })?;
        let graph = Arc::new(CallGraph::new(graph)?);
        if graphs.len() >= MAX_GRAPHS {
            graphs.clear();
        }
        graphs.insert(key, graph.clone());
        Ok(graph)
    }

    /// Whether checks on device `at` wait to be read (their code runs with the pending work).
    pub(crate) fn waiting(&self, at: usize) -> Result<bool> {
        Ok(match self.pending.get(at) {
            Some(slot) => slot.lock()?.is_some(),
            None => false,
        })
    }

    /// Reads device `at`'s code (after its pending work ran) and clears it: the first failed
    /// check's error, if one failed.
    pub(crate) fn read(&self, at: usize) -> Result<()> {
        let Some(slot) = self.pending.get(at) else { return Ok(()) };
        let Some(code) = slot.lock()?.take() else { return Ok(()) };
        let code = code.item::<i32>()?;
        let failed = usize::try_from(code).ok().and_then(|code| code.checked_sub(1));
        let messages = self.messages.lock()?;
        match failed.and_then(|index| messages.get_index(index)) {
            Some(message) => Err(Error::IndexOutOfRange { message: message.clone() }),
            None if code == 0 => Ok(()),
            None => Err(Error::Call { op: "index check".into(), message: format!("an unknown code {code}") }),
        }
    }
}
