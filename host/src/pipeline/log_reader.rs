//! The session log as an embedder sees it: read only.
//!
//! A host's log is its audit record: only the pipeline appends to it (an
//! intent before a body, the approval pair, the result). [`LogReader`] is
//! what [`Host::log`](crate::Host::log) hands out: it reads events and can
//! make what was appended durable, and has no way to append one, so an
//! embedder cannot write an event that looks like the pipeline's.
//!
//! ```compile_fail
//! # fn forge(host: &toolhost::Host) {
//! // A library user cannot append to a host's log.
//! let _ = host.log().append(&[], toolhost::log::Durability::Durable);
//! # }
//! ```

use std::sync::Arc;
use toolhost_log::{Event, LogError, SessionLog};

/// A read-only view of a host's session log.
#[derive(Clone)]
pub struct LogReader(Arc<SessionLog>);

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LogReader").finish_non_exhaustive()
    }
}

impl LogReader {
    pub(crate) fn new(log: Arc<SessionLog>) -> LogReader {
        LogReader(log)
    }

    /// Every event, in sequence order.
    pub fn events(&self) -> Result<Vec<Event>, LogError> {
        self.0.events()
    }

    /// The events of one call, in sequence order.
    pub fn events_for_call(&self, call_id: &str) -> Result<Vec<Event>, LogError> {
        self.0.events_for_call(call_id)
    }

    /// The calls whose intent is durable and whose result is not.
    pub fn pending_calls(&self) -> Result<Vec<String>, LogError> {
        self.0.pending_calls()
    }

    /// Makes every event already appended durable (results and audit
    /// events ride on the next durable commit otherwise).
    pub fn flush(&self) -> Result<(), LogError> {
        self.0.flush()
    }

    /// Whether `other` reads the same log (two hosts sharing one).
    pub fn is_same_log(&self, other: &LogReader) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
