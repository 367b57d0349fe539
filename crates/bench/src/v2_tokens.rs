//! The clusters' project tokens on API v2: minted for the run (as an operator gives capms one),
//! written into each cluster's credentials Secret, and, once the clusters are deleted, how many
//! Secrets hold a token capms refreshed.

use crate::support::RunningSim;
use serde::Serialize;

/// The project of the benchmark's clusters.
const PROJECT: &str = crate::support::LAB_PROJECT;

/// The name of cluster `cluster`'s credentials Secret.
pub(crate) fn secret_name(cluster: &str) -> String {
    format!("{cluster}-metal")
}

/// Each cluster's metal-apiserver credentials (a credentials Secret's data, holding the
/// project token minted for it), by cluster.
pub(crate) struct V2Credentials {
    credentials: Vec<serde_json::Value>,
}

impl V2Credentials {
    /// A token of the benchmark's project for each of `clusters`, minted by `sim` as an
    /// operator gives capms one, living `lifetime` seconds (8 hours when None).
    pub(crate) async fn minted(
        sim: &RunningSim,
        clusters: usize,
        lifetime: Option<u64>,
    ) -> V2Credentials {
        let lifetime = lifetime.map(|seconds| format!("{seconds}s"));
        let mut credentials = Vec::new();
        for _ in 0..clusters {
            let minted = sim.mint_capms_token(PROJECT, lifetime.as_deref()).await;
            let token = minted["secret"].as_str().expect("a token");
            credentials.push(sim.v2_credentials(token, PROJECT));
        }
        V2Credentials { credentials }
    }

    /// How many of `clusters`' credentials Secrets in `namespace` (by cluster number) hold a
    /// token other than the one minted for them.
    pub(crate) async fn refreshed(
        &self,
        client: &kube::Client,
        namespace: &str,
        clusters: &[String],
    ) -> usize {
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client.clone(), namespace);
        let mut refreshed = 0;
        for (cluster, credentials) in clusters.iter().zip(&self.credentials) {
            let minted = credentials["token"].as_str().expect("the minted token");
            let secret = secrets
                .get(&secret_name(cluster))
                .await
                .expect("a cluster's credentials Secret");
            let data = secret.data.unwrap_or_default();
            let token = data.get("token").map(|t| t.0.as_slice());
            refreshed += usize::from(token != Some(minted.as_bytes()));
        }
        refreshed
    }

    /// Cluster number `i`'s credentials Secret `name`.
    pub(crate) fn secret(&self, namespace: &str, name: &str, i: usize) -> String {
        let secret = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": self.credentials[i],
        });
        serde_json::to_string(&secret).expect("a Secret serializes")
    }
}

/// The API v2 tokens of a run whose tokens live shorter than it.
#[derive(Serialize)]
pub struct TokenRefreshes {
    pub lifetime_seconds: u64,
    pub clusters: usize,
    /// Clusters whose Secret holds a token other than the one minted for it.
    pub refreshed: usize,
}
