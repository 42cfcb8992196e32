//! [`SideEffect`]: what a tool declares it does to the world, as rules match
//! it. The type is shared with the host (it lives in `toolhost-core`), so a
//! descriptor's side effect reaches the policy without conversion.

pub use toolhost_core::SideEffect;
