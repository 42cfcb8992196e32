//! Where a new project's SDK comes from. Nothing of toolhost is published
//! to crates.io, PyPI or npm, so a project takes its SDK from a toolhost
//! checkout: the one `--sdk` names, else the one this binary was built
//! from (`cargo install --path host` builds it in place), when it is still
//! there. Without a checkout, Rust and Python projects take the SDK from
//! the toolhost git repository; npm cannot install a package from a
//! repository's subdirectory, so a JavaScript project then needs `--sdk`.

use crate::args::Lang;
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};

/// The toolhost repository, for the git form of a dependency.
const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");

/// Where the SDK of a new project comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sdk {
    /// A toolhost checkout: its directory (absolute).
    Checkout(PathBuf),
    /// The toolhost git repository: its URL.
    Git(&'static str),
}

/// The SDK's directory in a checkout, and the file that makes it one.
fn sdk_dir(lang: Lang) -> (&'static str, &'static str) {
    match lang {
        Lang::Rust => ("guest-sdk", "Cargo.toml"),
        Lang::Python => ("sdk/python", "pyproject.toml"),
        Lang::Js => ("sdk/js", "package.json"),
    }
}

/// Whether `checkout` holds `lang`'s SDK.
fn holds_sdk(checkout: &Path, lang: Lang) -> bool {
    let (dir, marker) = sdk_dir(lang);
    checkout.join(dir).join(marker).is_file()
}

impl Sdk {
    /// The SDK for `lang`: the checkout `flag` names, else the checkout
    /// this binary was built from, else the git repository.
    pub(crate) fn resolve(flag: Option<&Path>, lang: Lang) -> Result<Sdk> {
        if let Some(dir) = flag {
            let abs = std::path::absolute(dir)
                .map_err(|e| anyhow::anyhow!("--sdk {}: {e}", dir.display()))?;
            if !holds_sdk(&abs, lang) {
                let (sdk, marker) = sdk_dir(lang);
                bail!(
                    "--sdk {}: not a toolhost checkout (no {sdk}/{marker})",
                    dir.display()
                );
            }
            return Ok(Sdk::Checkout(abs));
        }
        if let Some(checkout) = Path::new(env!("CARGO_MANIFEST_DIR")).parent()
            && holds_sdk(checkout, lang)
        {
            return Ok(Sdk::Checkout(checkout.to_path_buf()));
        }
        if lang == Lang::Js {
            bail!(
                "the JavaScript SDK is installed from a toolhost checkout (npm cannot install \
                 a package from a git repository's subdirectory), and this binary's checkout \
                 ({}) is gone: pass --sdk DIR, a toolhost checkout",
                env!("CARGO_MANIFEST_DIR")
            );
        }
        Ok(Sdk::Git(REPOSITORY))
    }

    /// Where the SDK comes from, in words, for the project's README.
    pub(crate) fn note(&self) -> String {
        match self {
            Sdk::Checkout(dir) => format!("the toolhost checkout at `{}`", dir.display()),
            Sdk::Git(url) => format!("the toolhost git repository ({url})"),
        }
    }

    /// The `toolhost-guest` line of a Cargo.toml.
    pub(crate) fn cargo_dependency(&self) -> String {
        let (key, value) = match self {
            Sdk::Checkout(dir) => ("path", dir.join("guest-sdk").display().to_string()),
            Sdk::Git(url) => ("git", url.to_string()),
        };
        format!(
            "toolhost-guest = {{ {key} = {} }}",
            toml::Value::from(value)
        )
    }

    /// The `toolhost-guest` line of a pip requirements file.
    pub(crate) fn pip_requirement(&self) -> String {
        match self {
            Sdk::Checkout(dir) => format!(
                "toolhost-guest @ file://{}",
                percent_encode(&dir.join("sdk/python").display().to_string())
            ),
            Sdk::Git(url) => format!("toolhost-guest @ git+{url}#subdirectory=sdk/python"),
        }
    }

    /// The `toolhost-guest` version spec of a package.json, as JSON.
    pub(crate) fn npm_spec(&self) -> Result<String> {
        match self {
            Sdk::Checkout(dir) => {
                let spec = format!("file:{}", dir.join("sdk/js").display());
                Ok(serde_json::Value::from(spec).to_string())
            }
            Sdk::Git(_) => bail!("the JavaScript SDK needs a toolhost checkout: pass --sdk DIR"),
        }
    }
}

/// `path` with every byte outside the unreserved characters and `/`
/// percent-encoded, for a `file://` URL.
fn percent_encode(path: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkout_gives_paths_and_git_gives_the_repository() {
        let checkout = Sdk::Checkout(PathBuf::from("/src/tool host"));
        assert_eq!(
            checkout.cargo_dependency(),
            r#"toolhost-guest = { path = "/src/tool host/guest-sdk" }"#
        );
        assert_eq!(
            checkout.pip_requirement(),
            "toolhost-guest @ file:///src/tool%20host/sdk/python"
        );
        assert_eq!(
            checkout.npm_spec().ok().as_deref(),
            Some(r#""file:/src/tool host/sdk/js""#)
        );
        let git = Sdk::Git("https://example.com/toolhost");
        assert_eq!(
            git.cargo_dependency(),
            r#"toolhost-guest = { git = "https://example.com/toolhost" }"#
        );
        assert_eq!(
            git.pip_requirement(),
            "toolhost-guest @ git+https://example.com/toolhost#subdirectory=sdk/python"
        );
        assert!(git.npm_spec().is_err());
    }

    #[test]
    fn this_binary_defaults_to_its_checkout() {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(Path::to_path_buf);
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let sdk = Sdk::resolve(None, lang).ok();
            assert_eq!(sdk, checkout.clone().map(Sdk::Checkout));
        }
        assert!(Sdk::resolve(Some(Path::new("/nonexistent")), Lang::Rust).is_err());
    }
}
