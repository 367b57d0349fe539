//! Faults of a management cluster's Kubernetes, made on purpose: its kube-apiserver killed and
//! restarted (with etcd compacted while it is down, so every watch resumes from a revision that is gone:
//! 410 Gone), and every write of one user answered 409 Conflict for as long as a test wants.
//! Also where the apiserver runs (its pid), which a restart changes.

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A validating webhook that answers 409 Conflict to every create, update and delete one user
/// makes of capms's kinds (status included) while it is on. Its failure policy is `Ignore`, so
/// once it is off or gone it costs nothing; dropping it removes its configuration.
pub struct ConflictingWrites {
    on: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    name: String,
    kubeconfig: PathBuf,
    _server: conversion::WebhookServer,
}

impl ConflictingWrites {
    pub fn set(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    /// How many writes it refused.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for ConflictingWrites {
    fn drop(&mut self) {
        delete_quietly(
            &self.kubeconfig,
            &["validatingwebhookconfiguration", &self.name],
        );
    }
}

/// The answer to one review: allowed, or refused as the apiserver refuses a stale write.
fn answer(review: &serde_json::Value, conflict: bool) -> serde_json::Value {
    let uid = review.pointer("/request/uid").cloned().unwrap_or_default();
    let response = if conflict {
        let message = "injected by the test: the object has been modified; please apply your changes to the latest version and try again";
        serde_json::json!({"uid": uid, "allowed": false,
            "status": {"code": 409, "reason": "Conflict", "message": message}})
    } else {
        serde_json::json!({"uid": uid, "allowed": true})
    };
    serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

impl ControlPlane {
    /// The pid of this control plane's kube-apiserver (it changes with a restart).
    pub fn apiserver_pid(&self) -> u32 {
        let pids =
            std::fs::read_to_string(self.dir.join("pids")).expect("the control plane's pids");
        pids.lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("kube-apiserver's pid on the second line")
    }

    /// Kills kube-apiserver (SIGKILL) and starts it again with the same command line; with `compact`,
    /// etcd is compacted at its current revision meanwhile. Returns once it is ready again.
    pub fn restart_apiserver(&self, compact: bool) {
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("tests/scripts/controlplane.sh"))
            .arg("restart-apiserver")
            .arg(&self.dir);
        if compact {
            cmd.arg("--compact");
        }
        let status = cmd.status().expect("controlplane.sh runs");
        assert!(
            status.success(),
            "restarting kube-apiserver failed; its log is {}",
            self.dir.join("kube-apiserver.log").display()
        );
    }

    /// Registers a [`ConflictingWrites`] for `user`, off until [`ConflictingWrites::set`].
    pub fn conflicting_writes(&self, user: &str) -> ConflictingWrites {
        let on = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let router = {
            let (on, refused) = (on.clone(), refused.clone());
            axum::Router::new().route(
                "/conflict",
                axum::routing::post(move |axum::Json(review): axum::Json<serde_json::Value>| {
                    let conflict = on.load(Ordering::SeqCst);
                    if conflict {
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                    std::future::ready(axum::Json(answer(&review, conflict)))
                }),
            )
        };
        let (server, url) = self.serve_webhook("conflicts", router);
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem());
        let name = format!("conflicts-{user}");
        let config = serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "conflicts.capms.test", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "failurePolicy": "Ignore", "timeoutSeconds": 10,
                "clientConfig": {"url": format!("{url}/conflict"), "caBundle": ca},
                "rules": [{"apiGroups": [capms::api::common::GROUP], "apiVersions": ["*"],
                           "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["*/*"], "scope": "*"}],
                "matchConditions": [{"name": "only-this-user",
                                     "expression": format!("request.userInfo.username == '{user}'")}]
            }]
        });
        let file = self.dir.join(format!("{name}.json"));
        std::fs::write(&file, serde_json::to_vec(&config).expect("json")).expect("write");
        self.apply(&file);
        ConflictingWrites {
            on,
            refused,
            name,
            kubeconfig: self.kubeconfig.clone(),
            _server: server,
        }
    }
}
