//! The server's own bounds, shared by its transports and its handler: the
//! largest message it reads and the most calls it runs at once.

/// The largest JSON-RPC message (one line, or one HTTP request body) the
/// server reads. Longer lines are discarded unread and answered with an
/// invalid-request error; longer bodies with 413. Tool arguments are capped
/// at [`crate::MAX_ARGS_BYTES`] anyway.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// The most `tools/call` requests a server runs at once (over stdio: its
/// one session; over HTTP: all its sessions together). A call over
/// the limit is refused at once (`SANDBOX_UNAVAILABLE`, before the pipeline,
/// so it is not in the session log): a client cannot make the server hold
/// any number of waiting calls (on approvals, say).
pub const MAX_CALLS_IN_FLIGHT: usize = 256;
