//! The footprint the host counts is the one wasmtime enforces.

#![expect(clippy::expect_used, reason = "a test that cannot set up fails loudly")]

use super::*;
use crate::sandbox::{Runtime, RuntimeOptions};

/// A component header (binary format, layer 1).
const COMPONENT: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
/// An empty core module.
const MODULE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

fn section(id: u8, body: &[u8]) -> Vec<u8> {
    let mut s = vec![id, u8::try_from(body.len()).expect("a short section")];
    s.extend_from_slice(body);
    s
}

#[test]
fn core_instances_counts_instantiations_not_instances_of_exports() {
    let mut bytes = COMPONENT.to_vec();
    bytes.extend(section(1, &MODULE));
    // Three core instances: instantiate module 0 twice, one of exports.
    bytes.extend(section(
        2,
        &[0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00],
    ));
    assert_eq!(core_instances(&bytes), Some(2));
}

#[test]
fn core_instances_counts_a_nested_component_as_often_as_it_is_instantiated() {
    let mut nested = COMPONENT.to_vec();
    nested.extend(section(1, &MODULE));
    nested.extend(section(2, &[0x01, 0x00, 0x00, 0x00]));
    let mut bytes = COMPONENT.to_vec();
    bytes.extend(section(4, &nested));
    assert_eq!(
        core_instances(&bytes),
        Some(0),
        "defined, never instantiated"
    );
    // Two component instances of component 0, then one of its export.
    bytes.extend(section(5, &[0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00]));
    assert_eq!(core_instances(&bytes), Some(2));
}

#[test]
fn core_instances_of_an_imported_component_instantiated_is_unknown() {
    let mut bytes = COMPONENT.to_vec();
    // Type 0: an empty component type; import "c" of that type.
    bytes.extend(section(7, &[0x01, 0x41, 0x00]));
    bytes.extend(section(10, &[0x01, 0x00, 0x01, b'c', 0x04, 0x00]));
    assert_eq!(
        core_instances(&bytes),
        Some(0),
        "imported, never instantiated"
    );
    bytes.extend(section(5, &[0x01, 0x00, 0x00, 0x00]));
    assert_eq!(core_instances(&bytes), None);
}

#[test]
fn core_instances_of_garbage_is_unknown() {
    let mut bytes = COMPONENT.to_vec();
    bytes.extend([0x02, 0x7f, 0x01]);
    assert_eq!(core_instances(&bytes), None);
}

/// For every embedded tool (as its toolchain builds it): wasmtime itself
/// (the host's check left out) instantiates it with exactly the counted
/// number of core instances allowed, and refuses one fewer for the
/// instance count. So for such components the count is exact, not only a
/// lower bound.
#[tokio::test]
async fn the_counted_footprint_is_what_wasmtime_enforces() {
    let runtime = Runtime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 2,
        ..RuntimeOptions::default()
    })
    .expect("a runtime");
    for (name, bytes) in crate::tools::embedded::EMBEDDED_TOOLS {
        let linked = runtime.loader.link(name, bytes).expect("the tool links");
        let needs = linked.needs.expect("a tool's footprint is counted");
        assert!(needs.instances > 1, "{name}: {needs:?}");
        for max_instances in [needs.instances, needs.instances - 1] {
            assert!(needs.memories <= 2 * max_instances && needs.tables <= 4 * max_instances);
            let spec = SandboxSpec {
                mode: SandboxMode::None,
                workspace: PathBuf::from("/"),
                limits: Limits {
                    max_instances,
                    ..Limits::default()
                },
                network: Default::default(),
            };
            let mut run = runtime.store(&StoreBuilder::new(&spec)).expect("a store");
            let instantiated = linked.pre.instantiate_async(&mut run.store).await;
            if max_instances == needs.instances {
                assert!(instantiated.is_ok(), "{name}: {:?}", instantiated.err());
            } else {
                let err = instantiated.err().map(|e| format!("{e:#}"));
                assert!(
                    err.as_deref().is_some_and(|e| e.contains("instance count")),
                    "{name} with {max_instances} instances: {err:?}"
                );
            }
        }
    }
}
