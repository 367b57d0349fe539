//! The baseline: the run's workload with Cluster API alone. capms's CRDs are installed and each
//! cluster's kubeconfig Secret is applied as in a provider run, but no provider runs and none of
//! its webhooks is registered. The benchmark marks each MetalStackCluster provisioned at once, as
//! a provider taking no time would. Cluster API creates every Machine and MetalStackMachine and
//! owns them, and nothing more happens to them: how fast it does that on this apiserver is the
//! pace a provider run is compared with.

use crate::Args;
use crate::apiserver_load::{ApiserverLoad, ClusterApiAlone};
use crate::measure::{ApiserverScrape, Counters, CpuClock};
use crate::scenario::{apply, fresh_work_dir, timeout, write_clusters};
use crate::watch::Timelines;
use capms::api::MetalStackCluster;
use capms::capi::Cluster;
use capms_test_support::{
    CapiManager, ControlPlane, ManagerOn, TestNamespace, eventually, eventually_seen,
};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;
use std::time::Instant;

/// A run of the workload with Cluster API and no capms: a namespace of its own, Cluster API's
/// manager, the clusters applied with their MetalStackClusters marked provisioned, and what the
/// benchmark watches and counts from before the clusters were applied.
pub(crate) struct Baseline {
    pub(crate) ns: TestNamespace,
    capi: CapiManager,
    pub(crate) timelines: Timelines,
    apiserver: ApiserverScrape,
    before: Counters,
    pub(crate) cpu: CpuClock,
}

impl Baseline {
    /// Starts Cluster API in a fresh namespace `name`-..., its logs in `work` under `--out`,
    /// applies the clusters and marks them provisioned.
    pub(crate) async fn start(args: &Args, name: &str, work: &str) -> Baseline {
        let cp = ControlPlane::shared();
        let ns = cp.namespace(name).await;
        let work = fresh_work_dir(args, work);
        let on = ManagerOn {
            cp,
            namespace: &ns.name,
            work: &work,
        };
        let capi = CapiManager::start(&on).await;
        let manifest = write_clusters(args, &ns.name, &work, None);

        let timelines = Timelines::start(ns.client.clone(), &ns.name);
        let apiserver = ApiserverScrape::new(ns.client.clone());
        let before = apiserver.counters().await;
        let cpu = CpuClock::start(cp.apiserver_pid());
        timelines.set_origin(Instant::now());
        apply(&manifest);
        provision_clusters(&ns, args).await;
        Baseline {
            ns,
            capi,
            timelines,
            apiserver,
            before,
            cpu,
        }
    }

    /// The apiserver's requests since the clusters were applied.
    pub(crate) async fn counters(&self) -> Counters {
        self.apiserver.counters().await.minus(&self.before)
    }

    /// Deletes the clusters, with Cluster API still there for its finalizers, and waits until
    /// they are gone: out of the way of the next run.
    pub(crate) async fn end(self, args: &Args) {
        let ns = &self.ns;
        ControlPlane::shared().kubectl(
            &[
                "delete",
                "clusters.cluster.x-k8s.io",
                "--all",
                "-n",
                &ns.name,
                "--wait=false",
            ],
            &[],
        );
        let (machines, clusters) = (capi_api(ns, "Machine"), capi_api(ns, "Cluster"));
        eventually(
            "the baseline's Machines and Clusters gone",
            timeout(args),
            || async {
                let machines = machines.list_metadata(&Default::default()).await.ok()?;
                let clusters = clusters.list_metadata(&Default::default()).await.ok()?;
                (machines.items.is_empty() && clusters.items.is_empty()).then_some(())
            },
        )
        .await;
        drop(self.capi);
    }
}

pub async fn run(args: &Args) -> ClusterApiAlone {
    let mut baseline = Baseline::start(args, "bench-alone", "work-alone").await;
    let workers = args.clusters * args.workers;
    let timelines = &baseline.timelines;
    timelines
        .wait(
            "Cluster API alone to create and own every MetalStackMachine",
            timeout(args),
            |s| s.owned_machines() >= workers,
        )
        .await;
    baseline.cpu.phase("provisioning");
    let counters = baseline.counters().await;
    let seen = timelines.snapshot();
    let cpu_seconds = baseline.cpu.usage().cpu_seconds_by_phase["provisioning"];
    // Not part of the pace, nor of the apiserver's load above.
    let reported = machine_sets_reported(timelines, args).await;
    baseline.end(args).await;

    ClusterApiAlone {
        last_machine_created_seconds: last(seen.machines.values().map(|t| t.created)),
        last_owned_seconds: last(seen.machines.values().filter_map(|t| t.owned)),
        machine_sets_reported_seconds: reported.unwrap_or(f64::NAN),
        apiserver: ApiserverLoad::new(
            // No firewalls: no provider.
            (workers, workers),
            cpu_seconds,
            &counters,
            (0.0, 0.0),
        ),
        ideal: None,
    }
}

/// The latest of `times`, 0 for none.
pub(crate) fn last(times: impl Iterator<Item = f64>) -> f64 {
    times.fold(0.0, f64::max)
}

/// When the last of the run's MachineSets reported every replica. After its pace, Cluster API's
/// MachineSets go over their Machines once more before they report them all, which is what ends
/// capms's wait for a MachineSet: how long that takes with no provider at all.
pub(crate) async fn machine_sets_reported(timelines: &Timelines, args: &Args) -> Option<f64> {
    let what = "Cluster API's MachineSets (no capms) to report every replica";
    timelines
        .wait(what, timeout(args), |s| {
            let sets = s.machine_sets.values().filter(|m| m.wanted > 0).count();
            sets >= args.clusters && s.machine_sets_reported().is_some()
        })
        .await;
    timelines.snapshot().machine_sets_reported()
}

/// Marks every MetalStackCluster of `ns` provisioned, as a provider taking no time would: its
/// control plane endpoint set and its status ready; returns once Cluster API has taken each
/// Cluster's infrastructure as provisioned. Cluster API does more for a cluster whose
/// infrastructure is ready than for one still provisioning (it writes the Cluster's status more
/// often and reads more), and in a provider run every cluster is ready within seconds: a
/// baseline left unready would set a pace no provider could keep.
async fn provision_clusters(ns: &TestNamespace, args: &Args) {
    let api: Api<MetalStackCluster> = Api::namespaced(ns.client.clone(), &ns.name);
    let endpoint = json!({"spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}}});
    let ready = json!({"status": {"ready": true, "initialization": {"provisioned": true}}});
    let what = "the baseline's MetalStackClusters marked provisioned";
    eventually_seen(what, timeout(args), || async {
        let clusters = api.list_metadata(&Default::default()).await;
        let clusters = clusters.map_err(|e| format!("listing them: {e}"))?.items;
        if clusters.len() < args.clusters {
            return Err(format!("{} of {} there", clusters.len(), args.clusters));
        }
        let params = PatchParams::default();
        for name in clusters.iter().map(ResourceExt::name_any) {
            let spec = api.patch(&name, &params, &Patch::Merge(&endpoint)).await;
            spec.map_err(|e| format!("setting {name}'s endpoint: {e}"))?;
            let status = api
                .patch_status(&name, &params, &Patch::Merge(&ready))
                .await;
            status.map_err(|e| format!("setting {name}'s status: {e}"))?;
        }
        Ok(())
    })
    .await;
    clusters_taken_as_provisioned(ns, args).await;
}

/// Waits until Cluster API has copied every MetalStackCluster's readiness into its Cluster:
/// the proof that the baseline's marking took.
async fn clusters_taken_as_provisioned(ns: &TestNamespace, args: &Args) {
    let api: Api<Cluster> = Api::namespaced(ns.client.clone(), &ns.name);
    let what = "Cluster API to take the baseline's clusters as provisioned";
    eventually_seen(what, timeout(args), || async {
        let clusters = api.list(&Default::default()).await;
        let clusters = clusters
            .map_err(|e| format!("listing the Clusters: {e}"))?
            .items;
        let provisioned = |c: &Cluster| {
            let initialization = c.status.as_ref().and_then(|s| s.initialization.as_ref());
            initialization.and_then(|i| i.infrastructure_provisioned) == Some(true)
        };
        let waiting: Vec<String> = clusters
            .iter()
            .filter(|c| !provisioned(c))
            .map(ResourceExt::name_any)
            .collect();
        if clusters.len() >= args.clusters && waiting.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} Clusters, not yet provisioned: {waiting:?}",
            clusters.len()
        ))
    })
    .await;
}

/// Cluster API's `kind` (`cluster.x-k8s.io/v1beta2`) in the test namespace `ns`.
fn capi_api(ns: &TestNamespace, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
    Api::namespaced_with(ns.client.clone(), &ns.name, &ApiResource::from_gvk(&gvk))
}
