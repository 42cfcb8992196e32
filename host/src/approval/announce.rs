//! Approval announcements: every approval request is announced to
//! listeners when it becomes pending (after its `approval/asked` event is
//! written, before anyone decides) and again when it is decided (after its
//! `approval/decided` event is written). The MCP server forwards them to
//! its clients as `notifications/message`; a library caller takes them
//! with [`Host::approval_listener`](crate::Host::approval_listener).
//!
//! Bounded by construction: announcements go through one broadcast ring of
//! [`ANNOUNCE_CAPACITY`] entries. Sending never waits; a listener that falls
//! more than that far behind loses the oldest ones and is told how many
//! ([`ApprovalListener::dropped`]). A slow listener can neither block a call
//! nor make the host hold more than the ring.

use crate::approval::{ApprovalOutcome, ApprovalRequest};
use serde::Serialize;
use tokio::sync::broadcast;

/// How many announcements the ring holds for listeners that lag.
pub const ANNOUNCE_CAPACITY: usize = 256;

/// One announcement about one approval request.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum ApprovalAnnouncement {
    /// Recorded and waiting for a decision.
    Pending {
        /// The approval's id (what `toolhost approvals decide` takes).
        approval_id: String,
        /// The call it belongs to.
        call_id: String,
        /// Who asked for the call.
        principal: String,
        /// What an approver is shown.
        request: Box<ApprovalRequest>,
        /// Who will decide (the approver's name).
        approver: String,
    },
    /// Decided (by an approver, a timeout, cancellation or an error).
    Decided {
        /// The approval's id.
        approval_id: String,
        /// The call it belongs to.
        call_id: String,
        /// Who asked for the call.
        principal: String,
        /// The outcome; only `allowed-once` lets the call run.
        outcome: ApprovalOutcome,
        /// The approver's detail, if any.
        detail: Option<String>,
    },
}

impl ApprovalAnnouncement {
    /// The approval's id.
    pub fn approval_id(&self) -> &str {
        match self {
            ApprovalAnnouncement::Pending { approval_id, .. }
            | ApprovalAnnouncement::Decided { approval_id, .. } => approval_id,
        }
    }

    /// Who asked for the call.
    pub fn principal(&self) -> &str {
        match self {
            ApprovalAnnouncement::Pending { principal, .. }
            | ApprovalAnnouncement::Decided { principal, .. } => principal,
        }
    }
}

/// The sending side, shared by a host and its successors (a reload keeps
/// its listeners).
#[derive(Debug, Clone)]
pub(crate) struct Announcer(broadcast::Sender<ApprovalAnnouncement>);

impl Default for Announcer {
    fn default() -> Self {
        Announcer(broadcast::channel(ANNOUNCE_CAPACITY).0)
    }
}

impl Announcer {
    /// Announces without waiting; nobody listening is fine.
    pub(crate) fn announce(&self, a: ApprovalAnnouncement) {
        let _ = self.0.send(a);
    }

    /// True when someone listens (announcing then needs the request durable first).
    pub(crate) fn has_listeners(&self) -> bool {
        self.0.receiver_count() > 0
    }

    pub(crate) fn listen(&self) -> ApprovalListener {
        ApprovalListener {
            rx: self.0.subscribe(),
            dropped: 0,
        }
    }
}

/// Receives the announcements made after it was created.
#[derive(Debug)]
pub struct ApprovalListener {
    rx: broadcast::Receiver<ApprovalAnnouncement>,
    dropped: u64,
}

impl ApprovalListener {
    /// The next announcement; `None` once the host (and every successor)
    /// is gone. Announcements this listener fell too far behind for are
    /// skipped and counted in [`dropped`](ApprovalListener::dropped).
    pub async fn recv(&mut self) -> Option<ApprovalAnnouncement> {
        loop {
            match self.rx.recv().await {
                Ok(a) => return Some(a),
                Err(broadcast::error::RecvError::Lagged(n)) => self.dropped += n,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next announcement if one is ready, without waiting.
    pub fn try_recv(&mut self) -> Option<ApprovalAnnouncement> {
        loop {
            match self.rx.try_recv() {
                Ok(a) => return Some(a),
                Err(broadcast::error::TryRecvError::Lagged(n)) => self.dropped += n,
                Err(_) => return None,
            }
        }
    }

    /// How many announcements this listener lost by lagging.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}
