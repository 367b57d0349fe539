//! The machines' kubelets for `--nodes`: each machine's Node registered in the API server the
//! clusters' kubeconfig Secrets point at, once it phones home.

use capms_test_support::RunningSim;
use metal_sim::workload::nodes;
use std::time::Duration;

/// The simulator's node agent for every cluster of the run (one for all, as they share one
/// API server), stopped when dropped.
pub(crate) struct Kubelets(tokio::task::JoinHandle<()>);

impl Kubelets {
    /// Starts the agent for the clusters of `namespace` named `clusters`.
    pub(crate) fn start(
        sim: &RunningSim,
        client: kube::Client,
        namespace: &str,
        clusters: &[String],
    ) -> Self {
        let tags = clusters.iter();
        let tags = tags.map(|name| capms::ownership::cluster_tag(namespace, name));
        let period = Duration::from_secs(1);
        Kubelets(nodes::spawn(
            sim.sim.clone(),
            tags.collect(),
            client,
            period,
        ))
    }
}

impl Drop for Kubelets {
    fn drop(&mut self) {
        self.0.abort();
    }
}
