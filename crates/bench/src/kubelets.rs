//! The machines' kubelets for `--nodes`: each machine's Node registered in the API server the
//! clusters' kubeconfig Secrets point at, once it phones home.

use capms_test_support::RunningSim;
use metal_sim::workload::nodes;

/// The simulator's node agent for every cluster of the run, stopped when dropped. One agent
/// for all: each sync deletes the managed Nodes it was not given.
pub(crate) struct Kubelets(tokio::task::JoinHandle<()>);

impl Kubelets {
    /// Starts the agent for the clusters of `namespace` named `clusters`.
    pub(crate) fn start(
        sim: &RunningSim,
        client: kube::Client,
        namespace: &str,
        clusters: &[String],
    ) -> Self {
        let sim = sim.sim.clone();
        let tags: Vec<String> = (clusters.iter())
            .map(|name| {
                let id = capms::ownership::cluster_id(namespace, name);
                format!("{}={id}", capms::ownership::CLUSTER_ID)
            })
            .collect();
        Kubelets(tokio::spawn(async move {
            loop {
                let wanted = tags.iter().flat_map(|t| nodes::phoned_home(&sim, t));
                if let Err(error) = nodes::sync(&client, &wanted.collect()).await {
                    eprintln!("bench: node agent: {error}");
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }))
    }
}

impl Drop for Kubelets {
    fn drop(&mut self) {
        self.0.abort();
    }
}
