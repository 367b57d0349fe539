//! What capms is given that it must never log: metal-api's HMAC key, the credentials of its
//! kubeconfig (a token, a password, a client key as PEM and as base64), its webhook serving
//! key, and the contents of every Secret in the tests' namespaces (bootstrap data, workload
//! clusters' kubeconfigs and CAs), each whole and line by line, raw and base64. Every capms a
//! test starts has its whole log scanned for them when it ends; a line holding one fails the
//! test.

use base64::Engine;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;

/// Shorter pieces are not told apart from ordinary words in a log line.
const SHORTEST: usize = 8;

static KNOWN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Remembers `secret`: whole and each of its lines, raw and base64.
pub fn remember(secret: &str) {
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    let lines = secret.lines().map(str::trim);
    for piece in std::iter::once(secret.trim()).chain(lines) {
        // PEM's armour lines are the same in every key, and a manifest's bare keys
        // (`metadata:`) are in every Kubernetes error capms logs.
        if piece.len() >= SHORTEST && !piece.starts_with("-----") && !bare_key(piece) {
            known.insert(piece.to_owned());
            known.insert(base64(piece));
        }
    }
}

/// A YAML line that is only a key (`metadata:`, `- name:`): structure, not a secret.
fn bare_key(line: &str) -> bool {
    let key = line.trim_start_matches("- ").strip_suffix(':');
    key.is_some_and(|k| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    })
}

/// Remembers what a capms process is given: its HMAC key or token from `env`, its
/// kubeconfig's credentials and its webhook serving key from `args`.
pub fn given(args: &[String], env: &[(&str, &str)]) {
    for (name, value) in env {
        if ["METAL_API_HMAC", "METAL_API_TOKEN"].contains(name) {
            remember(value);
        }
    }
    for arg in args {
        if let Some(path) = arg.strip_prefix("--kubeconfig=") {
            kubeconfig(Path::new(path));
        }
        if let Some(dir) = arg.strip_prefix("--webhook-cert-dir=") {
            let key = std::fs::read_to_string(Path::new(dir).join("tls.key"));
            remember(&key.unwrap_or_default());
        }
    }
}

/// The credentials in a kubeconfig: tokens, passwords and client keys (also decoded).
fn kubeconfig(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines().map(str::trim) {
        for key in ["token:", "password:", "client-key-data:"] {
            let Some(value) = line.strip_prefix(key).map(str::trim) else {
                continue;
            };
            remember(value);
            if key == "client-key-data:" {
                let decoded = base64::engine::general_purpose::STANDARD.decode(value);
                remember(&String::from_utf8_lossy(&decoded.unwrap_or_default()));
            }
        }
    }
}

/// The first line of `log` holding a secret, with the secret masked; None when there is none.
pub fn leak(log: &str) -> Option<String> {
    let known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    log.lines().find_map(|line| {
        let secret = known.iter().find(|s| line.contains(s.as_str()))?;
        Some(line.replace(secret.as_str(), "<secret>"))
    })
}

/// Remembers the contents of every Secret in `namespace` as the apiserver brings them, until
/// the test's runtime ends. Errors back off: once a test's control plane is gone, a watcher
/// retrying at once never yields, and the runtime's end waits for it forever.
pub fn watch_namespace(client: kube::Client, namespace: &str) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Secret;
    use kube::runtime::WatchStreamExt;
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client, namespace);
    let watch = kube::runtime::watcher(secrets, Default::default()).default_backoff();
    tokio::spawn(watch.for_each(|event| {
        if let Ok(
            kube::runtime::watcher::Event::Apply(s) | kube::runtime::watcher::Event::InitApply(s),
        ) = event
        {
            // A bootstrap Secret's `format` (cloud-config, ignition) says what its value is; a
            // credentials Secret's `project`, `apiVersion` and `hmacAuthType` say whose and
            // which: a project's UUID is in machine ids' shape and in many a log line.
            let data = s.data.unwrap_or_default().into_iter();
            let open = ["format", "project", "apiVersion", "hmacAuthType"];
            for (_, value) in data.filter(|(key, _)| !open.contains(&key.as_str())) {
                remember(&String::from_utf8_lossy(&value.0));
            }
        }
        std::future::ready(())
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_whole_by_line_and_in_base64() {
        let key = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n";
        remember(key);
        remember("#cloud-config\nwrite_files: [{path: /etc/capms-test-9f3c}]\n");
        let lines = [
            "DEBUG x: user_data=\"#cloud-config\\nwrite_files: [{path: /etc/capms-test-9f3c}]\"",
            "DEBUG x: key=MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg",
            &format!(
                "DEBUG x: data={}",
                base64("write_files: [{path: /etc/capms-test-9f3c}]")
            ),
        ];
        for line in lines {
            let found = leak(line).unwrap_or_else(|| panic!("not found in {line}"));
            assert!(found.contains("<secret>"), "{found}");
        }
        assert_eq!(
            leak("INFO capms: reconciled object=MetalStackMachine ns/m"),
            None
        );
        assert_eq!(
            leak("-----BEGIN PRIVATE KEY-----"),
            None,
            "armour is no secret"
        );
        // A manifest held in a Secret: its bare keys are in every Kubernetes error capms logs.
        remember(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-controller-manager\nstringData:\n",
        );
        let error = "WARN capms: ApiError: failed (Status { code: 500, metadata: Some(ListMeta { }), reason: \"\" })";
        assert_eq!(leak(error), None, "structure is no secret");
        assert!(leak("DEBUG x: name: cloud-controller-manager").is_some());
    }
}
