//! What a tool is and where it comes from: its descriptor and content
//! blocks (`descriptor`), the schemas shown to clients (`schema`), the
//! registry and scopes (`registry`), program tools and their manifests
//! (`manifest`, `program_tool`), provider-ready schemas (`provider`), and
//! the example tools built into the binary (`embedded`), and which
//! toolchain made a component (`toolchain`).

pub(crate) mod descriptor;
pub(crate) mod embedded;
pub(crate) mod manifest;
pub(crate) mod program_tool;
pub(crate) mod provider;
pub(crate) mod registry;
mod schema;
pub(crate) mod toolchain;

pub(crate) use descriptor::*;
