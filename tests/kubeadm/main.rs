//! A whole cluster with the real kubeadm providers: the shipped `cluster-template.yaml` rendered
//! by the real clusterctl, Cluster API's core, kubeadm bootstrap and kubeadm control-plane
//! managers, capms, the simulator and its node stand-in (a real etcd and kube-apiserver per
//! workload cluster). Every Machine reaches `Running` with a `nodeRef`, workers scale down and
//! up, and deleting the Cluster frees everything.

// A test (and its helpers) fails loudly on what it does not expect.
#![allow(clippy::expect_used)]

use capms_test_support as support;

// The Go provider's own template.
mod go_template;
// The high-availability and upgrade test.
mod ha;
// Remediation with Cluster API's MachineHealthCheck.
mod remediation;
// A cluster of the shipped ClusterClass, by Cluster API's topology controller.
mod topology;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use metal_api::types::event;
use metal_sim::inventory::Inventory;
use metal_sim::workload::{Agent, AgentConfig, member::Binaries};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use support::{
    ControlPlane, KubeadmProviders, LOADED_MACHINE_WAIT, ManagerOn, Managers, RunningSim, binaries,
    eventually, eventually_seen, repo_root,
};

const CLUSTER: &str = "kc";
/// A free address of the simulator's public network (127.100.0.0/24), as an operator picks it.
const CONTROL_PLANE_IP: &str = "127.100.0.250";

fn api(client: &kube::Client, ns: &str, group: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1beta2", kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

fn capi(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    api(client, ns, "cluster.x-k8s.io", kind)
}

/// A shipped template (`cluster-template.yaml`, or `cluster-template-<flavor>.yaml`), rendered
/// by clusterctl for `ns`.
async fn render(
    cp: &ControlPlane,
    ns: &str,
    metal_api: &str,
    flavor: Option<&str>,
    machines: (&str, &str),
) -> String {
    let file = match flavor {
        Some(flavor) => format!("cluster-template-{flavor}.yaml"),
        None => "cluster-template.yaml".to_string(),
    };
    let template = repo_root().join("manifests/clusterctl").join(file);
    let variables = [
        ("METAL_PARTITION", "mini-lab"),
        ("METAL_PROJECT_ID", "00000000-0000-0000-0000-000000000001"),
        ("METAL_PUBLIC_NETWORK_ID", "internet-mini-lab"),
        ("CONTROL_PLANE_IP", CONTROL_PLANE_IP),
        ("METAL_CONTROL_PLANE_IMAGE", "ubuntu-26.4"),
        ("METAL_WORKER_IMAGE", "ubuntu-26.4"),
        ("METAL_API_URL", metal_api),
        ("METAL_API_HMAC", "metal-edit"),
    ];
    generate(cp, ns, &template, machines, &variables, "v1.33.5").await
}

/// `template` rendered by the real clusterctl as cluster `kc` in `ns`, Kubernetes `version`,
/// with `(control_planes, workers)` machines and the template's `variables`.
async fn generate(
    cp: &ControlPlane,
    ns: &str,
    template: &Path,
    (control_planes, workers): (&str, &str),
    variables: &[(&str, &str)],
    version: &str,
) -> String {
    let out = cp
        .clusterctl_with(
            &[
                "generate",
                "cluster",
                CLUSTER,
                "--from",
                &template.to_string_lossy(),
                "--kubernetes-version",
                version,
                "--control-plane-machine-count",
                control_planes,
                "--worker-machine-count",
                workers,
                "--target-namespace",
                ns,
            ],
            variables,
        )
        .await;
    assert!(
        out.status.success(),
        "clusterctl generate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a test looks at of a Machine.
#[derive(Debug)]
struct MachineSummary {
    phase: String,
    node: String,
    version: String,
    control_plane: bool,
    ready: bool,
}

async fn machines(client: &kube::Client, ns: &str) -> Vec<MachineSummary> {
    let list = capi(client, ns, "Machine")
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.iter()
        .map(|m| MachineSummary {
            phase: m.data["status"]["phase"].as_str().unwrap_or("").to_owned(),
            node: m.data["status"]["nodeRef"]["name"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            version: m.data["spec"]["version"].as_str().unwrap_or("").to_owned(),
            control_plane: m
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("cluster.x-k8s.io/control-plane")),
            ready: m.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True"),
        })
        .collect()
}

/// Allocated machines of the cluster in the simulator: (id, hostname, firewall).
fn allocated(sim: &RunningSim, ns: &str) -> Vec<(String, String, bool)> {
    let tag = format!("cluster.metal-stack.io/id={ns}.{CLUSTER}");
    let state = sim.sim.state();
    state
        .machines
        .values()
        .filter(|m| m.tags.contains(&tag))
        .filter_map(|m| {
            let a = m.allocation.as_ref()?;
            Some((m.id.clone(), a.hostname.clone(), a.role == "firewall"))
        })
        .collect()
}

/// Waits until every Machine's `Ready` condition is True: for control-plane machines that takes
/// the kubeadm control-plane provider's etcd-member and static-pod checks through the kubelet.
async fn wait_ready(client: &kube::Client, ns: &str, what: &str) {
    eventually(what, Duration::from_secs(120), || async {
        machines(client, ns)
            .await
            .iter()
            .all(|m| m.ready)
            .then_some(())
    })
    .await;
}

/// Waits until `count` Machines are Running with a nodeRef (and no others exist).
async fn wait_running(client: &kube::Client, ns: &str, count: usize, what: &str) {
    eventually(what, Duration::from_secs(240), || async {
        let ms = machines(client, ns).await;
        (ms.len() == count
            && ms
                .iter()
                .all(|m| m.phase == "Running" && !m.node.is_empty()))
        .then_some(())
    })
    .await;
}

async fn workload_client(kubeconfig: &Path) -> kube::Client {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("admin.conf");
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

async fn workload_nodes(kubeconfig: &Path) -> Vec<(String, String)> {
    Api::<Node>::all(workload_client(kubeconfig).await)
        .list(&Default::default())
        .await
        .expect("nodes of the workload cluster")
        .items
        .into_iter()
        .map(|n| {
            let id = n.spec.and_then(|s| s.provider_id).unwrap_or_default();
            (n.metadata.name.unwrap_or_default(), id)
        })
        .collect()
}

/// Everything one test runs: a namespace on the shared control plane, the simulator and its node
/// stand-in, Cluster API's three managers and capms.
struct Stack {
    ns: support::TestNamespace,
    sim: RunningSim,
    workloads: std::path::PathBuf,
    agent: tokio::task::JoinHandle<()>,
    managers: (Managers, KubeadmProviders),
    _logs: LogsOnFailure,
    work: tempfile::TempDir,
}

/// The tests of this file run one at a time: the simulators hand out the same loopback
/// addresses, and a workload cluster's processes bind them.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Stack {
    async fn start(prefix: &str, inventory: Inventory) -> Stack {
        Stack::start_with(prefix, inventory, &[]).await
    }

    /// [`Stack::start`] with Cluster API's core manager given `capi_args` too.
    async fn start_with(prefix: &str, inventory: Inventory, capi_args: &[&str]) -> Stack {
        capms::tls::install_default_provider();
        capms::telemetry::init_logging();
        let cp = ControlPlane::shared();
        let ns = cp.namespace(prefix).await;
        let sim = RunningSim::start(inventory, "/metal").await;
        let work = tempfile::tempdir().expect("dir");
        let on = ManagerOn {
            cp,
            namespace: &ns.name,
            work: work.path(),
        };
        let log = "info,capms=debug";
        let managers = Managers::start_with_capi_args(&on, &sim.url, (&[], log), capi_args).await;
        let kubeadm = KubeadmProviders::start(&on).await;
        let workloads = work.path().join("workloads");
        let agent = Agent::spawn(
            sim.sim.clone(),
            AgentConfig {
                binaries: Binaries {
                    etcd: binaries().k8s.join("etcd"),
                    kube_apiserver: binaries().k8s.join("kube-apiserver"),
                    kubelet: Some(binaries().kubelet.clone()),
                },
                dir: workloads.clone(),
                period: Duration::from_millis(500),
            },
        );
        Stack {
            _logs: LogsOnFailure(work.path().to_path_buf()),
            ns,
            sim,
            workloads,
            agent,
            managers: (managers, kubeadm),
            work,
        }
    }

    /// Renders a shipped template with clusterctl and applies it.
    async fn apply_cluster(&self, flavor: Option<&str>, control_planes: &str, workers: &str) {
        let cp = ControlPlane::shared();
        let file = self.work.path().join("cluster.yaml");
        let machines = (control_planes, workers);
        let rendered = render(cp, &self.ns.name, &self.sim.url, flavor, machines).await;
        std::fs::write(&file, rendered).expect("write");
        cp.kubectl(&["apply", "--server-side", "-f"], &[file]);
    }

    /// Cluster API's `v1beta1` served too: its CRDs convert through this stack's managers.
    fn serve_capi_v1beta1(&self) {
        let cp = ControlPlane::shared();
        let (managers, kubeadm) = &self.managers;
        cp.convert_through(Path::new("crd/core"), managers.capi.webhook_port);
        cp.convert_through(Path::new("crd/bootstrap"), kubeadm.bootstrap.webhook_port);
        let control_plane = kubeadm.control_plane.webhook_port;
        cp.convert_through(Path::new("crd/controlplane"), control_plane);
    }

    fn kubeconfig(&self) -> std::path::PathBuf {
        Agent::kubeconfig_path(&self.workloads, &format!("{}.{CLUSTER}", self.ns.name))
    }

    /// Deletes the Cluster and waits until every machine is freed and the workload cluster's
    /// processes stopped.
    async fn delete_cluster(&self) {
        capi(&self.ns.client, &self.ns.name, "Cluster")
            .delete(CLUSTER, &DeleteParams::foreground())
            .await
            .expect("delete the Cluster");
        eventually("everything freed", Duration::from_secs(240), || async {
            allocated(&self.sim, &self.ns.name).is_empty().then_some(())
        })
        .await;
        let kubeconfig = self.kubeconfig();
        eventually(
            "the workload cluster stopped",
            Duration::from_secs(180),
            || async { (!kubeconfig.exists()).then_some(()) },
        )
        .await;
        self.agent.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeadm_cluster_reaches_running_scales_and_is_freed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let stack = Stack::start("kubeadm", Inventory::default_lab()).await;
    stack.apply_cluster(None, "1", "2").await;
    let (client, ns) = (&stack.ns.client, stack.ns.name.as_str());
    wait_running(
        client,
        ns,
        3,
        "one control-plane machine and two workers Running",
    )
    .await;
    let kcp = api(
        client,
        ns,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    )
    .get(&format!("{CLUSTER}-control-plane"))
    .await
    .expect("KubeadmControlPlane");
    assert_eq!(
        kcp.data["status"]["initialization"]["controlPlaneInitialized"],
        json!(true),
        "{:#}",
        kcp.data["status"]
    );
    firewall_booted_before_the_control_plane(&stack.sim, ns);
    wait_ready(
        client,
        ns,
        "every Machine Ready, the control plane's etcd member healthy",
    )
    .await;
    let nodes = workload_nodes(&stack.kubeconfig()).await;
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    assert!(
        nodes
            .iter()
            .all(|(_, id)| id.starts_with("metal://mini-lab/"))
    );
    metal_ccm_installed(&stack, client, ns).await;

    scale_workers(client, ns, 1).await;
    wait_running(client, ns, 2, "one worker after scaling down").await;
    eventually("a worker freed", Duration::from_secs(60), || async {
        (allocated(&stack.sim, ns).len() == 3).then_some(())
    })
    .await;
    scale_workers(client, ns, 2).await;
    wait_running(client, ns, 3, "two workers again").await;
    assert_eq!(
        allocated(&stack.sim, ns).len(),
        4,
        "firewall, control plane, two workers"
    );
    stack.delete_cluster().await;
}

/// Cluster API's ClusterResourceSet controller put metal-ccm and its metal-api Secret into the
/// workload cluster, and recorded that in the cluster's ClusterResourceSetBinding.
async fn metal_ccm_installed(stack: &Stack, management: &kube::Client, ns: &str) {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Secret};
    let workload = workload_client(&stack.kubeconfig()).await;
    let found = tokio::time::timeout(support::LOADED_MACHINE_WAIT, async {
        loop {
            let deployment = Api::<Deployment>::namespaced(workload.clone(), "kube-system")
                .get_opt("cloud-controller-manager")
                .await;
            let secret = Api::<Secret>::namespaced(workload.clone(), "kube-system")
                .get_opt("cloud-controller-manager")
                .await;
            if let (Ok(Some(_)), Ok(Some(secret))) = (deployment, secret) {
                return secret;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    let Ok(secret) = found else {
        let sets = Api::<DynamicObject>::namespaced_with(
            management.clone(),
            ns,
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "addons.cluster.x-k8s.io",
                "v1beta2",
                "ClusterResourceSet",
            )),
        )
        .list(&Default::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .map(|o| o.data["status"].clone())
                .collect::<Vec<_>>()
        });
        panic!("metal-ccm not in the workload cluster after 90 s; ClusterResourceSets: {sets:?}");
    };
    let url = secret
        .data
        .and_then(|d| d.get("api-url").cloned())
        .expect("api-url");
    assert_eq!(String::from_utf8_lossy(&url.0), stack.sim.url);
}

/// Prints the tail of every log of the test's managers when the test fails.
struct LogsOnFailure(std::path::PathBuf);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for entry in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<_> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                eprintln!("==> {} <==\n{tail}", path.display());
            }
        }
    }
}

/// The firewall phoned home before the first control-plane machine was allocated.
fn firewall_booted_before_the_control_plane(sim: &RunningSim, ns: &str) {
    let tag = format!("cluster.metal-stack.io/id={ns}.{CLUSTER}");
    let state = sim.sim.state();
    let of = |firewall: bool| {
        state
            .machines
            .values()
            .filter(|m| m.tags.contains(&tag))
            .filter(|m| {
                m.allocation
                    .as_ref()
                    .is_some_and(|a| (a.role == "firewall") == firewall)
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    let firewall_home = of(true)
        .iter()
        .flat_map(|m| m.events.iter())
        .filter(|e| e.event == event::PHONED_HOME)
        .map(|e| e.time)
        .min()
        .expect("the firewall phoned home");
    let first_machine = of(false)
        .iter()
        .filter_map(|m| m.allocation.as_ref().map(|a| a.created))
        .min()
        .expect("machines allocated");
    assert!(
        firewall_home < first_machine,
        "firewall phoned home at {firewall_home:?}, first machine allocated at {first_machine:?}"
    );
}

async fn scale_workers(client: &kube::Client, ns: &str, replicas: u32) {
    capi(client, ns, "MachineDeployment")
        .patch(
            &format!("{CLUSTER}-worker"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale the workers");
}
