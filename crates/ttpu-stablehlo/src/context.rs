//! The MLIR context of one lowering, with its diagnostics captured instead of printed.
//!
//! A fresh context per call keeps `lower` re-entrant and `Send`-agnostic (an MLIR context is
//! not thread-safe to share) and frees every uniqued attribute and type afterwards, so big
//! constants do not accumulate across compilations. Creating one costs well under a
//! millisecond (threading is off: no thread pool is spawned), small next to lowering itself.

use std::cell::RefCell;
use std::rc::Rc;

use melior::Context;
use melior::diagnostic::DiagnosticHandlerId;
use melior::dialect::DialectHandle;

/// A context plus the diagnostics MLIR reported on it.
pub(crate) struct Session {
    context: Context,
    diagnostics: Rc<RefCell<Vec<String>>>,
    handler: DiagnosticHandlerId,
}

impl Session {
    /// A context that knows `func` and accepts the (unregistered) `stablehlo` dialect.
    pub(crate) fn new() -> Session {
        let context = Context::new_with_threading(false);
        // `func` is registered so MLIR verifies `func.return` against the signature and prints
        // `func.func` in its readable form; StableHLO ops and attributes stay unregistered.
        DialectHandle::func().load_dialect(&context);
        context.set_allow_unregistered_dialects(true);
        let diagnostics = Rc::new(RefCell::new(Vec::new()));
        let sink = Rc::clone(&diagnostics);
        let handler = context.attach_diagnostic_handler(move |diagnostic| {
            let mut text = format!("{}: {diagnostic}", diagnostic.location());
            for index in 0..diagnostic.note_count() {
                if let Ok(note) = diagnostic.note(index) {
                    text.push_str(&format!("\n  note: {note}"));
                }
            }
            sink.borrow_mut().push(text);
            // Handled: MLIR must not also print it to stderr.
            true
        });
        Session { context, diagnostics, handler }
    }

    /// The context.
    pub(crate) fn context(&self) -> &Context {
        &self.context
    }

    /// Takes the diagnostics reported so far, one per line.
    pub(crate) fn take_diagnostics(&self) -> String {
        std::mem::take(&mut *self.diagnostics.borrow_mut()).join("\n")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.context.detach_diagnostic_handler(self.handler);
    }
}
