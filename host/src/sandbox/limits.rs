//! What bounds one call, in one file: the memory, table and instance
//! limits its store's resource limiter enforces ([`Limiter`]), the limit
//! hit it records or the store raises ([`LimitHit`]), and the host's own
//! caps on what a guest can make the host hold ([`MAX_RESOURCES`],
//! [`MAX_FIELDS_BYTES`], [`MAX_CONTENT_BLOCKS`], [`transfer_cap`]).
//!
//! The limits a call is granted are the pipeline's ([`Limits`]); this
//! module only enforces and names them. It runs no guest code and
//! classifies nothing (that is `classify`'s).

use crate::sandbox::spec::Limits;
use wasmtime::ResourceLimiter;

/// The most host resources one call may hold at once: open files and
/// directories, sockets, streams, pollables, HTTP requests, responses and
/// header fields (each an entry of the call's resource table). Sockets and
/// files are host file descriptors and fields are host memory, none of it
/// counted in the guest's own memory; without a cap a guest could exhaust
/// the process's descriptors (a socket object needs no grant to exist) or
/// its memory. Past the cap the call ends `MEMORY_LIMIT`.
pub(crate) const MAX_RESOURCES: usize = 1024;

/// The largest set of HTTP header fields a guest may build (wasi:http's
/// default is 128 KiB): with [`MAX_RESOURCES`], what a call's fields can
/// hold of the host's memory.
pub(crate) const MAX_FIELDS_BYTES: usize = 64 * 1024;

/// The most content blocks a tool's result may have.
pub(crate) const MAX_CONTENT_BLOCKS: usize = 1024;

/// A limit of the call that the guest ran into.
///
/// The growth limits are recorded by the store's resource limiter when it
/// refuses a growth (the guest then usually traps, with a trap that says
/// nothing about why). The count limits are checked by the store before a
/// component is instantiated and raised as this error: wasmtime enforces
/// them too, but reports them with an untyped message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LimitHit {
    /// A linear memory would have grown past `Limits::max_memory`.
    #[error("the tool tried to grow its memory past the limit ({limit} bytes of memory)")]
    Memory {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A table would have grown past `Limits::max_table_elements`.
    #[error("the tool tried to grow its table past the limit ({limit} table elements)")]
    Table {
        /// The limit, in elements.
        limit: usize,
    },
    /// Instantiating would create more core instances than the call allows.
    #[error(
        "the tool needs more resources than the call allows: instance count {needed} is above the limit of {limit}"
    )]
    Instances {
        /// Core instances the component creates.
        needed: usize,
        /// The call's limit.
        limit: usize,
    },
    /// Instantiating would create more linear memories than the call allows.
    #[error(
        "the tool needs more resources than the call allows: memory count {needed} is above the limit of {limit}"
    )]
    Memories {
        /// Memories the component defines.
        needed: usize,
        /// The call's limit.
        limit: usize,
    },
    /// Instantiating would create more tables than the call allows.
    #[error(
        "the tool needs more resources than the call allows: table count {needed} is above the limit of {limit}"
    )]
    Tables {
        /// Tables the component defines.
        needed: usize,
        /// The call's limit.
        limit: usize,
    },
}

/// Enforces the memory, table and instance limits of one call and records
/// what it saw (peak memory, whether a growth limit was refused).
///
/// The memory limit holds for the call as a whole: every linear memory the
/// call's instances create or grow counts against the same `max_memory`, so
/// a component with several memories cannot hold several times the limit.
pub(crate) struct Limiter {
    max_memory: usize,
    max_table_elements: usize,
    max_instances: usize,
    /// Bytes of linear memory the call's memories hold together. Memories
    /// only grow, and live as long as the call's store, so this is also the
    /// peak.
    memory: usize,
    hit: Option<LimitHit>,
}

impl Limiter {
    pub(crate) fn new(limits: &Limits) -> Limiter {
        Limiter {
            max_memory: limits.max_memory,
            max_table_elements: limits.max_table_elements,
            max_instances: limits.max_instances,
            memory: 0,
            hit: None,
        }
    }

    /// Bytes of linear memory the call's memories hold together: its peak.
    pub(crate) fn memory(&self) -> usize {
        self.memory
    }

    /// The growth limit refused, if one was.
    pub(crate) fn hit(&self) -> Option<LimitHit> {
        self.hit
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // wasmtime asks here for a new memory too (from `current` 0), so
        // every memory of the call is counted once, at its current size.
        let total = self.memory.saturating_sub(current).saturating_add(desired);
        if total > self.max_memory || maximum.is_some_and(|m| desired > m) {
            self.hit = Some(LimitHit::Memory {
                limit: self.max_memory,
            });
            return Ok(false);
        }
        self.memory = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_table_elements || maximum.is_some_and(|m| desired > m) {
            self.hit = Some(LimitHit::Table {
                limit: self.max_table_elements,
            });
            return Ok(false);
        }
        Ok(true)
    }

    // wasmtime reads these three once, when the limiter is installed, and
    // enforces them itself; `CallState::admit` checks the same numbers
    // first so that exceeding one is reported by type.

    fn instances(&self) -> usize {
        self.max_instances
    }

    fn tables(&self) -> usize {
        self.max_instances.saturating_mul(4)
    }

    fn memories(&self) -> usize {
        self.max_instances.saturating_mul(2)
    }
}

/// Most bytes a tool may hand the host in one transfer (wasmtime's hostcall
/// fuel): its result, or the arguments of one host call. Lifting a value
/// costs the host about four times what it counts (an empty content block
/// counts its 32-byte slot but takes a vector entry and a string), so
/// wasmtime's default of 128 MiB let one result take over half a gigabyte
/// of the host's memory before the output cap could see it. Any result
/// within `max_output` fits (its bytes, and [`MAX_CONTENT_BLOCKS`] slots);
/// 16 MiB at least, so that a tool's stream writes (chunked by the guest's
/// libc) are never near it; a single positioned write (`pwrite`) above it
/// ends the call `OUTPUT_TOO_LARGE`. Commands (`toolhost exec`, program
/// tools) keep wasmtime's default: their output goes through streams.
pub(crate) fn transfer_cap(max_output: usize) -> usize {
    max_output
        .saturating_add(MAX_CONTENT_BLOCKS * 64)
        .saturating_add(1 << 20)
        .max(16 << 20)
}
