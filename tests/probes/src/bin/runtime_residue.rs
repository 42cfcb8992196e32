//! Looks for what an earlier call left in linear memory: a zero-initialised
//! static area and freshly grown pages must read all zero (Wasm semantics),
//! whatever the previous instance in the same pool slot wrote there. Each
//! call then dirties both, for the next call to check. Catches a pool that
//! reuses memory (kept resident or not) without resetting it.

#[path = "../shared/echo.rs"]
mod echo;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {}

#[derive(Serialize, JsonSchema)]
struct Out {
    /// Non-zero bytes found in the 64 KiB static area.
    static_dirty: usize,
    /// Non-zero bytes found in the pages this call grew.
    grown_dirty: usize,
    /// Pages grown (0 if growing failed).
    grown_pages: usize,
}

const PAGE: usize = 65536;
#[cfg_attr(
    not(target_arch = "wasm32"),
    allow(dead_code, reason = "used only by the WASI build")
)]
const GROW: usize = 32;

static mut AREA: [u8; PAGE] = [0; PAGE];

/// Counts non-zero bytes in `len` bytes at `start`, then fills them with a
/// marker. Volatile, so the compiler cannot assume the zeros.
///
/// # Safety
///
/// `start..start + len` must be memory this instance owns and nothing else
/// uses.
unsafe fn count_then_dirty(start: *mut u8, len: usize) -> usize {
    let mut dirty = 0;
    for i in 0..len {
        // SAFETY: in bounds by the caller's contract.
        unsafe {
            let p = start.add(i);
            if std::ptr::read_volatile(p) != 0 {
                dirty += 1;
            }
            std::ptr::write_volatile(p, 0xa5);
        }
    }
    dirty
}

struct Residue;

impl Tool for Residue {
    const NAME: &'static str = "residue";
    const DESCRIPTION: &'static str =
        "Reports non-zero bytes in zero-initialised memory, then dirties it.";
    type Args = Args;
    type Output = Out;
    fn run(_: Args) -> Result<Out, ToolError> {
        // SAFETY: AREA is only touched here, by one call at a time.
        let static_dirty = unsafe { count_then_dirty(std::ptr::addr_of_mut!(AREA).cast(), PAGE) };
        #[cfg(target_arch = "wasm32")]
        let (grown_dirty, grown_pages) = {
            let old = core::arch::wasm32::memory_grow::<0>(GROW);
            if old == usize::MAX {
                (0, 0)
            } else {
                // SAFETY: the pages were just grown by this call and the
                // allocator does not know them.
                let dirty = unsafe { count_then_dirty((old * PAGE) as *mut u8, GROW * PAGE) };
                (dirty, GROW)
            }
        };
        #[cfg(not(target_arch = "wasm32"))]
        let (grown_dirty, grown_pages) = (0, 0);
        Ok(Out {
            static_dirty,
            grown_dirty,
            grown_pages,
        })
    }
}

toolhost_guest::export_tools!(Residue, echo::Echo);

fn main() {}
