//! A call's network egress, enforced (DESIGN.md §2b). This module holds
//! the network grants of a host, loaded once: the policy's `[network]`
//! grants and limits, its credentials with their secrets read, the
//! resolver, and the TLS client configuration ([`Egress`]). A
//! [`NetworkGrant`] is what one call gets of it. Network is never implied
//! by a sandbox mode: a call reaches only what the policy's grants name,
//! whatever its mode.
//!
//! For every outgoing HTTP request (wasmtime-wasi-http's `handle`, whose
//! `send_request` hook is the call's, `http`):
//!
//! 1. the request's scheme, host, port and method are decided by the
//!    policy (`call`: its `[network]` grants and those of the policy rules
//!    the call matched); a refusal fails inside the guest with wasi:http's
//!    own error code (`HTTP-request-denied`, `destination-IP-prohibited`,
//!    `DNS-error`) and is recorded;
//! 2. an allowed request is planned (`client`): its host is resolved once
//!    (by the host's resolver, off the executor) and every address checked;
//!    the connection goes to those addresses only, never through a second
//!    lookup;
//! 3. the credential of exactly that host (if any) is set, replacing any
//!    header of the same name the guest sent, and its response is asked
//!    for whole and uncompressed (`accept-encoding: identity`; the guest's
//!    `range`, `if-range` and `te` dropped; an encoded response refused);
//!    the `Host` header is the request's host (never a userinfo the guest
//!    put in the authority); that host's response is read whole and has
//!    the loaded secrets masked before the guest reads any of it (`body`);
//! 4. per-call limits hold: at most `max_requests` requests, at most
//!    `max_response_bytes` response body bytes summed, each request within
//!    `request_timeout_ms` and the call's own deadline (`body`);
//! 5. redirects are not followed: the guest sees the 3xx, and a request it
//!    makes to the new location is decided again.
//!
//! Sockets are decided in `call` too (`CallNet::check_socket`); the host's
//! own sockets never raise `SIGPIPE` (`nosigpipe`). This module never
//! reaches into the sandbox: the store's state gives it the call's
//! [`CallNet`](call::CallNet) (`http::HasCallNet`).

mod body;
pub(crate) mod call;
mod client;
pub(crate) mod http;
pub(crate) mod nosigpipe;

use std::fmt;
use std::sync::Arc;
use toolhost_egress::{Credentials, NetworkPolicy, Resolver, RuleGrants, SystemResolver};

/// A resolver the host may share between calls and threads.
pub type SharedResolver = Arc<dyn Resolver + Send + Sync>;

/// The network grants of a host with everything loaded that a request
/// needs: built once by the host builder, shared by every call.
pub(crate) struct Egress {
    pub(crate) policy: NetworkPolicy,
    pub(crate) credentials: Credentials,
    pub(crate) resolver: SharedResolver,
    pub(crate) tls: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Egress")
            .field("reachable", &self.policy.reachable())
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// Loads `policy`'s credentials and TLS roots (the policy's `ca_file`
    /// on top of the system's roots); `resolver` resolves names
    /// (the system's when `None`). `rules` are the policy rules' grants,
    /// checked here as `policy`'s are (each call gets those of the rules
    /// it matches).
    ///
    /// # Ambient Authority
    ///
    /// Reads each credential's environment variable or file, and the CA
    /// file, with the host process's rights. Errors name the variable or
    /// file, never a secret.
    pub(crate) fn load(
        policy: &NetworkPolicy,
        rules: &[&RuleGrants],
        resolver: Option<SharedResolver>,
    ) -> Result<Egress, String> {
        // The host decides a socket's address as the guest connects it and
        // looks no name up for sockets (name lookup is refused to guests),
        // so a `tcp://`/`udp://` grant must name an address: one that
        // names a host name would never match anything.
        let by_name = |g: &&toolhost_egress::Grant| {
            !g.scheme().is_http() && !matches!(g.host(), toolhost_egress::HostPattern::Ip(_))
        };
        let named = policy
            .grants()
            .find(by_name)
            .map(|g| ("network".to_string(), g))
            .or_else(|| {
                rules.iter().find_map(|r| {
                    let g = r.grants().iter().find(by_name)?;
                    Some((format!("rules[{}].network", r.rule()), g))
                })
            });
        if let Some((key, g)) = named {
            return Err(format!(
                "{key} grant {:?}: a tcp:// or udp:// grant must name an IP address, not a host name (sockets connect to addresses; the host looks up no name for them)",
                g.as_str()
            ));
        }
        let credentials = Credentials::load(policy.credentials())
            .map_err(|(path, e)| format!("policy {path}: {e}"))?;
        let tls = tls_config(policy.ca_file())?;
        Ok(Egress {
            policy: policy.clone().with_rule_grants(!rules.is_empty()),
            credentials,
            resolver: resolver.unwrap_or_else(|| Arc::new(SystemResolver)),
            tls: Arc::new(tls),
        })
    }
}

/// The most bytes a `ca_file` may have (a bundle of every public root is
/// about 200 KB).
const MAX_CA_FILE_BYTES: usize = 4 << 20;

/// A rustls client configuration trusting the system's roots (as
/// `rustls-native-certs` finds them: the platform's store, or the files
/// that `SSL_CERT_FILE` / `SSL_CERT_DIR` name) and the certificates of
/// `ca_file` (PEM), if any. Where the system has no root at all, the
/// bundled web PKI roots stand in for them, and the host says so; but a
/// store the environment names (`SSL_CERT_FILE` / `SSL_CERT_DIR`) that
/// cannot be read whole, or holds no root, stops the host: whoever pinned
/// it did not mean the bundled roots. The crypto provider is named
/// explicitly (ring), so that no process-wide default is needed.
fn tls_config(ca_file: Option<&std::path::Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let pinned = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|p| !p.is_empty()));
    let system = rustls_native_certs::load_native_certs();
    if pinned && let Some(e) = system.errors.first() {
        return Err(format!(
            "TLS roots named by SSL_CERT_FILE / SSL_CERT_DIR: {e}"
        ));
    }
    for e in &system.errors {
        tracing::debug!("system TLS roots: {e}");
    }
    let (added, ignored) = roots.add_parsable_certificates(system.certs);
    if ignored > 0 {
        tracing::debug!("system TLS roots: {ignored} certificates could not be used");
    }
    if added == 0 && pinned {
        return Err(
            "TLS roots named by SSL_CERT_FILE / SSL_CERT_DIR: no usable certificate there".into(),
        );
    }
    if added == 0 {
        tracing::warn!(
            "no system TLS root certificates were found; trusting the bundled web PKI roots instead"
        );
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = ca_file {
        add_ca_file(&mut roots, path)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .map_err(|e| format!("TLS configuration: {e}"))
}

/// Adds every certificate of the PEM file `path` (a regular file of at
/// most [`MAX_CA_FILE_BYTES`]) to `roots`; a file with none is an error.
fn add_ca_file(roots: &mut rustls::RootCertStore, path: &std::path::Path) -> Result<(), String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let failed = |e: &dyn fmt::Display| format!("network.ca_file {}: {e}", path.display());
    let pem = toolhost_egress::read_bounded(path, MAX_CA_FILE_BYTES).map_err(|e| failed(&e))?;
    let mut added = 0usize;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| failed(&e))?;
        roots.add(cert).map_err(|e| failed(&e))?;
        added += 1;
    }
    if added == 0 {
        return Err(failed(&"no PEM certificate in the file"));
    }
    Ok(())
}

/// What one call may reach on the network: nothing by default.
///
/// Built by the pipeline from the host's policy: the `allow` grants always,
/// the `ask` grants only when this call's approval covered them, and the
/// grants of the policy rules that matched the call.
#[derive(Clone, Default)]
pub struct NetworkGrant {
    pub(crate) egress: Option<Arc<Egress>>,
    pub(crate) ask_approved: bool,
    /// The grants of the policy rules that matched this call (`allow`
    /// grants of this call alone; empty for most calls, allocating nothing).
    pub(crate) rules: Vec<RuleGrants>,
    /// The policy has network grants, but the tool does not declare the
    /// side effect `external`, so it gets none of them (what a refusal
    /// says).
    pub(crate) not_external: bool,
}

impl fmt::Debug for NetworkGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetworkGrant")
            .field("reachable", &self.reachable())
            .finish()
    }
}

impl NetworkGrant {
    /// No network at all.
    pub fn none() -> NetworkGrant {
        NetworkGrant::default()
    }

    /// The grant of `policy`'s `allow` grants (its limits and CA file with
    /// them) to every call of what runs with it (`toolhost exec
    /// --allow-net`); none when it has no grants. Names are resolved by
    /// `resolver` (the system's when `None`).
    ///
    /// # Errors
    ///
    /// A socket grant that names a host, or a CA file or system roots that
    /// cannot be read.
    pub fn from_policy(
        policy: &NetworkPolicy,
        resolver: Option<SharedResolver>,
    ) -> Result<NetworkGrant, String> {
        if policy.allow().is_empty() {
            return Ok(NetworkGrant::none());
        }
        let egress = Egress::load(policy, &[], resolver)?;
        Ok(NetworkGrant::new(Some(Arc::new(egress)), false, Vec::new()))
    }

    pub(crate) fn new(
        egress: Option<Arc<Egress>>,
        ask_approved: bool,
        rules: Vec<RuleGrants>,
    ) -> NetworkGrant {
        NetworkGrant {
            egress,
            ask_approved,
            rules,
            not_external: false,
        }
    }

    /// The grant of a call of a tool with the declared `side_effect`: the
    /// host's network grants for a tool that declares `external` (the
    /// `ask` ones when `ask_approved`, and `rules`, the grants of the
    /// policy rules the call matched), none for any other. A tool cannot
    /// use the network while declaring that it does not act outside the
    /// host, which is what the policy's rules and presets decide on.
    pub(crate) fn for_tool(
        egress: Option<Arc<Egress>>,
        side_effect: toolhost_core::SideEffect,
        ask_approved: bool,
        rules: Vec<RuleGrants>,
    ) -> NetworkGrant {
        if side_effect == toolhost_core::SideEffect::External {
            return NetworkGrant::new(egress, ask_approved, rules);
        }
        NetworkGrant {
            not_external: egress.is_some(),
            ..NetworkGrant::none()
        }
    }

    /// Why a request of this call is refused when it has no grants at all.
    pub(crate) fn off_reason(&self) -> toolhost_egress::DenyReason {
        if self.not_external {
            toolhost_egress::DenyReason::NotExternal
        } else {
            toolhost_egress::DenyReason::NetworkOff
        }
    }

    /// What the call may reach, for its intent: every `allow` grant, the
    /// `ask` grants (prefixed `ask:`) when they were approved for it, then
    /// the grants of the policy rules it matched (each once).
    pub fn reachable(&self) -> Vec<String> {
        let Some(egress) = &self.egress else {
            return Vec::new();
        };
        let mut reachable: Vec<String> = egress
            .policy
            .reachable()
            .into_iter()
            .filter(|g| self.ask_approved || !g.starts_with("ask:"))
            .collect();
        for grant in self.rules.iter().flat_map(RuleGrants::grants) {
            let grant = grant.canonical();
            if !reachable.contains(&grant) {
                reachable.push(grant);
            }
        }
        reachable
    }
}
