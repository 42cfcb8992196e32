//! Which host interfaces a component is linked against: the one place that
//! decides it.
//!
//! Every component (tools and `toolhost exec` programs alike) is linked
//! against the same sets, once per runtime. Linking grants nothing: what a
//! call may reach through an interface is decided per call, in its WASI
//! context (`runtime::wasi`) and its network hooks (`runtime::net`). A new
//! interface set is one more [`InterfaceSet`] variant, listed in
//! [`LINKED`], with its state on the per-call store.

use crate::bindings::ToolProvider;
use crate::runtime::store::CallState;
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

/// A set of host interfaces the linker provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InterfaceSet {
    /// The WASI 0.2 command surface as wasmtime-wasi implements it:
    /// `wasi:io`, `wasi:clocks`, `wasi:random`, `wasi:cli`,
    /// `wasi:filesystem` and `wasi:sockets`. Linked whole, so that every
    /// standard toolchain's output loads (DESIGN.md §2b); the per-call WASI
    /// context preopens per mode and decides every socket address against
    /// the call's network grant.
    WasiP2,
    /// `wasi:http/outgoing-handler` and `wasi:http/types`, so that a
    /// component built by componentize-js (which imports them) loads. Every
    /// outgoing request is decided against the call's network grant by the
    /// store's hooks (`runtime::net`); without a grant it fails inside the
    /// guest with `HTTP-request-denied`.
    WasiHttp,
    /// `toolhost:tool/host`: structured logs and progress reports.
    ToolhostHost,
}

/// The interface sets every component is linked against, in this order.
pub(crate) const LINKED: &[InterfaceSet] = &[
    InterfaceSet::WasiP2,
    InterfaceSet::WasiHttp,
    InterfaceSet::ToolhostHost,
];

impl InterfaceSet {
    /// Adds this set's interfaces to `linker`.
    fn add_to(self, linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        match self {
            InterfaceSet::WasiP2 => wasmtime_wasi::p2::add_to_linker_async(linker),
            InterfaceSet::WasiHttp => wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker),
            InterfaceSet::ToolhostHost => {
                ToolProvider::add_to_linker::<_, HasSelf<_>>(linker, |s: &mut CallState| {
                    &mut s.host
                })
            }
        }
    }
}

/// A linker for `engine` with every set of [`LINKED`].
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    for set in LINKED {
        set.add_to(&mut linker)?;
    }
    Ok(linker)
}
